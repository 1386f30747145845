"""Training on generated scenes: deterministic for a seed, varied as documented, pinned on output.

The runs here are tiny (64x48 scenes, two steps): they prove the loop, its
determinism and what it writes, not what the weights are worth
(bench/accuracy.py measures that).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sweep_engine.config import EngineConfig
from sweep_engine.synth import street_scene
from sweep_engine.models import load_models
from sweep_engine.train import augment
from sweep_engine.train.data import Variety, generator_id, sample, scene_params
from sweep_engine.train.loop import _RUN, assemble, main, parser, train

TINY = ["--steps", "2", "--batch", "2", "--width", "64", "--height", "48", "--threads", "1", "--log-every", "1",
        "--checkpoint-every", "1"]


def run(tmp_path, name, *extra):
    argv = ["--out", str(tmp_path / name), *TINY, *extra]
    path = train(parser().parse_args(argv), argv)
    return json.loads(path.read_text()), path


@pytest.fixture(scope="module")
def dense_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train")
    return [run(tmp, name, "--only", "dense", "--seed", str(seed)) for name, seed in (("a", 3), ("b", 3), ("c", 4))]


def test_training_is_deterministic_for_a_seed(dense_runs):
    (a, _), (b, _), (c, _) = dense_runs
    assert a["weights"][0]["sha256"] == b["weights"][0]["sha256"]
    assert a["weights"][0]["sha256"] != c["weights"][0]["sha256"]


def test_the_manifest_pins_license_and_provenance(dense_runs):
    doc, path = dense_runs[0]
    (entry,) = doc["weights"]
    assert entry["name"] == "dense" and entry["trained"] is True and entry["dtype"] == "float16"
    assert entry["license"].startswith("Apache-2.0")
    assert entry["architecture"] == "sis-dense/mobilenetv3_small_100/c64/k17/f0.8"   # the engine's default
    build = entry["build"]
    assert build["seed"] == 3 and build["steps"] == 2 and build["generator"] == generator_id()
    assert build["command"].startswith("python -m sweep_engine.train --out ") and "--seed 3" in build["command"]
    assert "--canonical-focal 0.8" in build["command"]     # named though the run took the default
    assert build["command"] in entry["provenance"]
    assert (path.parent / "dense.pt").stat().st_size == entry["sizeBytes"]
    log = [json.loads(line) for line in (path.parent / "train-dense.log").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2] and all(np.isfinite(r["depth"]) and r["seg"] > 0 for r in log)


def test_both_networks_train_and_load_into_the_engine(tmp_path):
    out = str(tmp_path / "w")
    assert main(["--out", out, *TINY, "--only", "dense", "--seed", "1"]) == 0
    assert main(["--out", out, *TINY, "--only", "detector", "--seed", "1"]) == 0
    path = assemble(out)
    names = [w["name"] for w in json.loads(path.read_text())["weights"]]
    assert names == ["dense", "detector"]
    cfg = EngineConfig(backbone="mobilenetv3_small_100", detector="sis-centres",
                       input_width=64, input_height=48, weights_manifest=str(path))
    _, _, entries = load_models(cfg)
    assert entries["detector"].trained and "--only detector" in entries["detector"].provenance


def test_rendering_in_a_worker_process_does_not_change_the_weights(tmp_path):
    inline, _ = run(tmp_path, "inline", "--seed", "6")
    worker, _ = run(tmp_path, "worker", "--seed", "6", "--workers", "1")
    assert [w["sha256"] for w in worker["weights"]] == [w["sha256"] for w in inline["weights"]]
    assert [w["name"] for w in worker["weights"]] == ["dense", "detector"]


def test_a_resumed_run_ends_where_an_uninterrupted_one_does(tmp_path):
    full, _ = run(tmp_path, "full", "--only", "dense", "--seed", "5")
    run(tmp_path, "part", "--only", "dense", "--seed", "5", "--stop-after", "1")
    resumed, _ = run(tmp_path, "part", "--only", "dense", "--seed", "5", "--resume")
    assert resumed["weights"][0]["sha256"] == full["weights"][0]["sha256"]
    assert "--resume" not in resumed["weights"][0]["build"]["command"]


def test_a_fine_tuning_run_starts_from_the_given_weights_and_names_them(tmp_path, dense_runs):
    import torch

    first, first_path = dense_runs[0]
    moved, moved_path = run(tmp_path, "moved", "--only", "dense", "--seed", "8", "--init", str(first_path))
    fresh, fresh_path = run(tmp_path, "fresh", "--only", "dense", "--seed", "8")

    def gap(path) -> float:             # how far a run's weights lie from the first run's
        a, b = (torch.load(p.parent / "dense.pt", weights_only=True) for p in (first_path, path))
        return sum(float((a[k].float() - b[k].float()).norm()) for k in a if a[k].is_floating_point())
    assert gap(moved_path) < 0.1 * gap(fresh_path)      # two small steps from the first run, not from scratch
    (entry,) = moved["weights"]
    assert entry["sha256"] not in (first["weights"][0]["sha256"], fresh["weights"][0]["sha256"])
    assert entry["build"]["init"]["dense"]["sha256"] == first["weights"][0]["sha256"]
    assert entry["provenance"].startswith("fine-tuned from dense sha256 " + first["weights"][0]["sha256"][:16])
    assert "--init" in entry["build"]["command"]


def test_a_fine_tune_of_a_fine_tune_names_each_earlier_run_once(tmp_path, dense_runs):
    """Each provenance used to nest its init networks' whole provenances, so it doubled with every run.
    Now it lists the runs behind it, each once, oldest first, then its own."""
    first, first_path = dense_runs[0]
    _, moved_path = run(tmp_path, "moved", "--only", "dense", "--seed", "8", "--init", str(first_path))
    again, _ = run(tmp_path, "again", "--only", "dense", "--seed", "9", "--init", str(moved_path))
    text = again["weights"][0]["provenance"]
    commands = [c for c in text.split("`") if c.startswith("python -m sweep_engine.train")]
    assert [c.split("--seed ")[1].split()[0] for c in commands] == [first["weights"][0]["build"]["command"].split(
        "--seed ")[1].split()[0], "8", "9"]
    assert commands[-1] == again["weights"][0]["build"]["command"]
    assert len(_RUN.findall(text)) == 3        # what the text writes, the next fine-tune reads back
    assert "provenance" not in again["weights"][0]["build"]["init"]["dense"]


def test_the_shipped_weights_came_from_eight_runs_each_named_once():
    from sweep_engine.train.loop import earlier_runs

    manifest = json.loads((Path(__file__).parents[2] / "sweep_engine/default_weights/weights.json").read_text())
    runs = earlier_runs([w["provenance"] for w in manifest["weights"]])
    assert [r.split("--seed ")[1].split()[0] for r in runs] == ["0", "1", "2", "3", "4", "7", "8", "9"]
    assert earlier_runs(["operator fine-tune, run 42", runs[0], "operator fine-tune, run 42"]) == [
        "operator fine-tune, run 42", runs[0]]
    elsewhere = "fine-tuned on 2,000 street photos of Bandung from " + runs[0]   # not written here: kept whole
    assert earlier_runs([elsewhere, manifest["weights"][0]["provenance"]]) == [elsewhere, *runs]


def test_a_canonical_focal_run_trains_depth_for_one_focal_length_and_the_engine_scales_it_back(tmp_path, dense_runs):
    """``--canonical-focal 0.8``: depth targets are what a camera of focal 0.8 x the frame's side reads; the
    architecture says so (weights trained one way are never read the other way); the engine's outputs name
    that focal length, so a photo's measured one rescales the depth (``Engine.measure``)."""
    import torch

    from sweep_engine.pipeline import Engine
    from sweep_engine.train.loop import batch_tensors, log_focal_targets
    from sweep_engine.weights import WeightsError

    samples = [sample(11, i, width=64, height=48) for i in range(2)]
    _, plain, valid, _, _ = batch_tensors(samples, 80.0)
    _, canon, _, _, _ = batch_tensors(samples, 80.0, 0.8 * 64)
    for i, s in enumerate(samples):
        ratio = (canon[i][valid[i]] / plain[i][valid[i]]).numpy()
        assert np.allclose(ratio, 0.8 * 64 / s.frame.camera.fx, rtol=1e-5)

    targets = log_focal_targets(samples)
    assert np.allclose(np.exp(targets.numpy()), [s.frame.camera.fx / 64 for s in samples], rtol=1e-5)

    _, own_focal = run(tmp_path, "own", "--only", "dense", "--seed", "3", "--canonical-focal", "0")
    assert json.loads(own_focal.read_text())["weights"][0]["architecture"].endswith("/k17")
    moved, _ = run(tmp_path, "moved", "--only", "dense", "--seed", "8", "--canonical-focal", "0.8",
                   "--init", str(own_focal))   # from weights trained for each scene's own focal length
    assert moved["weights"][0]["architecture"] == "sis-dense/mobilenetv3_small_100/c64/k17/f0.8"
    state = torch.load(tmp_path / "moved" / "dense.pt", weights_only=True)
    assert state["focal_head.3.weight"].abs().sum() > 0   # the head was added to the init's layout (at zero), trained
    log = [json.loads(line) for line in (tmp_path / "moved" / "train-dense.log").read_text().splitlines()]
    assert all("focal" in row for row in log)

    both, path = run(tmp_path, "both", "--seed", "8", "--canonical-focal", "0.8")
    cfg = EngineConfig(weights_manifest=str(path), input_width=64, input_height=48, dense_focal=0.8, device="cpu")
    outs, _ = Engine(cfg).infer([torch.zeros(3, 48, 64, dtype=torch.uint8)])
    assert outs[0].depth_focal_px == pytest.approx(0.8 * 64)
    assert 0.5 * 0.8 * 64 < outs[0].focal_guess_px < 2 * 0.8 * 64     # the focal head's reading, frame pixels
    engine = Engine(cfg)
    _measured_focal_is_held_against_the_head_and_a_missing_one_taken_from_it(engine, samples[0])
    with pytest.raises(WeightsError, match="are for sis-dense/.*/f0.8, but the engine is configured for .*k17; the "
                                           "two differ in the focal length .* dense_focal \\(SIS_ENGINE_DENSE_FOCAL"):
        Engine(EngineConfig(weights_manifest=str(path), input_width=64, input_height=48, dense_focal=0.0,
                            device="cpu"))


def test_object_pixels_weigh_more_in_the_depth_loss_when_asked():
    import torch

    from sweep_engine.labels import SEG
    from sweep_engine.train.loop import dense_loss

    depth = torch.full((1, 4, 4), 10.0)
    seg = torch.full((1, 4, 4), SEG["road"])
    seg[0, 0, 0] = SEG["pole"]
    pred = torch.full((1, 4, 4), 10.0)
    pred[0, 0, 0] = 20.0                                  # only the pole's pixel is wrong, by log 2

    def net(_images):
        return pred, torch.zeros(1, len(SEG), 4, 4), None
    valid = torch.ones(1, 4, 4, dtype=torch.bool)
    plain = dense_loss(net, None, depth, valid, seg)["depth"]
    weighed = dense_loss(net, None, depth, valid, seg, object_weight=4.0)["depth"]
    assert float(plain) == pytest.approx(np.log(2) / 16) and float(weighed) == pytest.approx(4 * np.log(2) / 19)


def test_samples_are_a_pure_function_of_seed_and_index():
    a, b, c = sample(7, 2, width=64, height=48), sample(7, 2, width=64, height=48), sample(7, 3, width=64, height=48)
    assert np.array_equal(a.rgb, b.rgb) and np.array_equal(a.seg, b.seg) and np.array_equal(a.boxes, b.boxes)
    assert not np.array_equal(a.rgb, c.rgb)


def test_scene_variety_covers_the_documented_ranges():
    v = Variety()
    rng = np.random.default_rng(0)
    draws = [scene_params(rng, v, 256, 192) for _ in range(400)]
    widths = [d["road_width_m"] for d in draws]
    heights = [d["camera_height_m"] for d in draws]
    assert 3.0 <= min(widths) < 3.5 and 19.5 < max(widths) <= 20.0
    assert 1.0 <= min(heights) < 1.1 and 3.1 < max(heights) <= 3.2
    focals = [d["focal_px"] / 256 for d in draws]
    assert 0.5 <= min(focals) < 0.55 and 1.15 < max(focals) <= 1.2
    assert {d["n_vehicles"] for d in draws} == set(range(7))
    assert min(d["pitch_deg"] for d in draws) < -5 and max(d["pitch_deg"] for d in draws) > 3



def _ahead(scene, kind: str) -> list[float]:
    """How far ahead (metres, box centre along the road) each of a scene's ``kind`` boxes stands."""
    return sorted(round((b.s0 + b.s1) / 2, 2) for b in scene.boxes if b.name.startswith(kind))


def test_a_spread_street_draws_where_things_stand():
    """At fixed distances an object's image row is the focal length over the camera height: a network
    learns the row. A spread street draws each thing's presence, distance and size; a fixed one is as it was."""
    fixed = [street_scene(seed, n_vehicles=6) for seed in range(30)]
    spread = [street_scene(seed, n_vehicles=6, spread=True) for seed in range(30)]
    # The fixed street: two poles at 14 and 26 m (+-1), vehicles in three rows 10, 18, 26 m (+-1), 12 m buildings.
    for sc in fixed:
        assert [abs(a - b) <= 1.0 for a, b in zip(_ahead(sc, "pole@"), (14.0, 26.0))] == [True, True]
        assert {round((s - 10.0) / 8.0) for s in _ahead(sc, "car@") + _ahead(sc, "truck@") + _ahead(sc, "bus@")} \
            <= {0, 1, 2}
        assert {b.z1 for b in sc.boxes if b.name == "building"} == {12.0}
    poles = [s for sc in spread for s in _ahead(sc, "pole@")]
    assert min(poles) < 12.0 and max(poles) > 35.0 and len(set(poles)) == len(poles)
    counts = {len(_ahead(sc, "pole@")) + len(_ahead(sc, "sign@")) + len(_ahead(sc, "person@")) for sc in spread}
    assert 0 in counts and 4 in counts  # from a bare road to a full one
    tops = {b.z1 for sc in spread for b in sc.boxes if b.name == "building"}
    assert min(tops) < 8.0 and max(tops) > 18.0
    # Vehicles keep their lanes and never overlap along one.
    for sc in spread:
        vehicles = sorted((b for b in sc.boxes if b.seg == "vehicle"), key=lambda b: (b.a0 > 0, b.s0))
        for one, nxt in zip(vehicles, vehicles[1:]):
            if (one.a0 > 0) == (nxt.a0 > 0):
                assert nxt.s0 > one.s1
    # The scene's own draws (its road, its vehicles' lanes and sizes) are the fixed street's.
    for a, b in zip(fixed, spread):
        assert a.street.road_width_m == b.street.road_width_m
        assert [(v.a0, v.a1, v.z1) for v in a.boxes if v.seg == "vehicle"] == \
            [(v.a0, v.a1, v.z1) for v in b.boxes if v.seg == "vehicle"]

def test_roll_keeps_the_truth_exact():
    s = sample(11, 0, width=96, height=72, variety=Variety(augment=0.0, roll_deg=0.0))
    f = s.frame
    rgb, depth, seg, inst = augment.roll(f.rgb, f.depth, f.seg, f.instance, 3.0)
    known = seg != augment.IGNORE
    assert 0.9 < known.mean() < 1.0  # the corners rotated in from outside are unknown
    assert np.isnan(depth[~known]).all() and (inst[~known] == -1).all()
    # A rotation about the optical axis moves pixels, it does not change z-depth: the values are the originals'.
    finite = np.isfinite(depth) & known
    assert np.isin(depth[finite], f.depth[np.isfinite(f.depth)]).all()
    same = augment.roll(f.rgb, f.depth, f.seg, f.instance, 0.0)
    assert same[0] is f.rgb


def test_photometric_variety_changes_pixels_not_truth():
    clean = sample(12, 0, width=64, height=48, variety=Variety(augment=0.0, roll_deg=0.0))
    varied = sample(12, 0, width=64, height=48, variety=Variety(augment=1.0, roll_deg=0.0))
    assert np.array_equal(clean.seg, varied.seg) and np.array_equal(clean.boxes, varied.boxes)
    assert np.abs(clean.rgb.astype(int) - varied.rgb.astype(int)).mean() > 3
    rained = augment.rain(clean.rgb, np.random.default_rng(0))
    assert rained.shape == clean.rgb.shape and not np.array_equal(rained.astype(np.uint8), clean.rgb)


def test_a_budgeted_run_plans_its_steps_and_its_command_reproduces_it(tmp_path):
    argv = ["--out", str(tmp_path / "budget"), *TINY, "--only", "dense", "--seed", "8", "--warmup", "6",
            "--budget-minutes", "0.05"]
    argv[argv.index("--steps") + 1] = "100000"
    budgeted = json.loads(train(parser().parse_args(argv), argv).read_text())["weights"][0]
    command = budgeted["build"]["command"].split()[3:]
    assert "--budget-minutes" not in command and command.count("--steps") == 1
    steps = int(command[command.index("--steps") + 1])
    # Planned after the warm-up (6 steps); a machine so loaded that the warm-up outlasts the budget stops
    # there, and its command says where (--stop-after). Either way the command reproduces the weights.
    assert 6 <= steps < 100000 or "--stop-after" in command, command
    assert budgeted["build"]["steps"] <= steps
    again = ["--out", str(tmp_path / "again"), *command[command.index("--out") + 2:]]
    replay = json.loads(train(parser().parse_args(again), again).read_text())["weights"][0]
    assert replay["sha256"] == budgeted["sha256"]


def test_a_drawn_layout_and_look_paint_the_scene_without_moving_its_truth():
    rng = np.random.default_rng(3)
    from sweep_engine.synth import render, street_scene
    from sweep_engine.synth.look import draw_look
    from sweep_engine.train.data import layout_params
    layout = layout_params(rng, 7.0)
    layout["verges"] = ((("grass", 2.0),), (("kerb", 0.2), ("paving", 2.0)))
    scene = street_scene(5, road_width_m=7.0, **layout)
    flat, painted = render(scene), render(scene, draw_look(rng))
    assert np.array_equal(flat.seg, painted.seg) and np.array_equal(flat.depth, painted.depth)
    assert np.abs(flat.rgb.astype(int) - painted.rgb.astype(int)).mean() > 10
    # The verges are labelled by their material: grass on the left is terrain right at the road's edge.
    from sweep_engine.labels import SEG
    rows = painted.seg[-20:]
    left = [r[: np.flatnonzero(r == SEG["road"])[0]] for r in rows if (r == SEG["road"]).any()]
    assert all(len(x) == 0 or x[-1] == SEG["terrain"] for x in left)
    assert (painted.seg == SEG["kerb"]).any() and (painted.seg == SEG["sidewalk"]).any()


def test_most_samples_are_drawn_in_a_wider_look_and_some_keep_the_flat_one():
    looks = [sample(0, i, width=64, height=48).info["look"] for i in range(40)]
    assert 0.6 < np.mean(looks) < 0.95


def _measured_focal_is_held_against_the_head_and_a_missing_one_taken_from_it(engine, s):
    """``Engine.measure`` with a network that has a focal head: a measured focal length is checked against the
    head's reading; a photo with none in its metadata is solved from that reading; a photo of another shape
    than the frame's is not read by the head at all (it was trained on the frame's)."""
    import dataclasses

    import torch

    from sweep_engine.synth.provider import photo_ref

    (out,), _ = engine.infer([torch.from_numpy(s.rgb.copy()).permute(2, 0, 1)])
    photo = photo_ref("p", s.frame, "http://127.0.0.1")
    _, ev = engine.measure(photo, (64, 48), out)
    assert ev["focalPx"]["fromNetwork"] == pytest.approx(out.focal_guess_px)
    off = abs(np.log(s.frame.camera.fy / out.focal_guess_px))
    assert ev["measured"]["focalPx"]["networkOffBy"] == pytest.approx(off, rel=1e-4)
    bare = dataclasses.replace(photo, focal_mm=None, sensor_width_mm=None, camera_make=None, camera_model=None)
    _, ev = engine.measure(bare, (64, 48), out)
    assert ev["focalPx"]["priorFrom"] == "network" and ev["focalPx"]["prior"] == pytest.approx(out.focal_guess_px)
    assert ev["depthRescale"] == pytest.approx(out.focal_guess_px / out.depth_focal_px) and "network" in ev["note"]
    _, ev = engine.measure(bare, (160, 90), out)           # 16:9 into a 4:3 frame
    assert "fromNetwork" not in ev["focalPx"] and "priorFrom" not in ev["focalPx"] and ev["focalGuessUnused"]


def test_a_file_missing_the_focal_head_or_part_of_it_is_refused(tmp_path):
    """Weights for one focal length must carry the whole focal head; a fine-tune from weights without one
    (``absent``) starts it fresh, but half a head is a broken file, refused."""
    import torch

    from sweep_engine.models import build_dense, dense_architecture
    from sweep_engine.weights import WeightsError, load_into, pin

    cfg = EngineConfig(input_width=64, input_height=48)
    state = build_dense(cfg).state_dict()
    arch = dense_architecture(cfg)
    for name, drop in (("none", [k for k in state if k.startswith("focal_head.")]), ("half", ["focal_head.3.bias"])):
        torch.save({k: v for k, v in state.items() if k not in drop}, tmp_path / f"{name}.pt")
        pin(tmp_path / f"{name}.json", "dense", tmp_path / f"{name}.pt", arch, license="t", provenance="t")
    with pytest.raises(WeightsError, match=r"missing key\(s\): focal_head"):
        load_into(build_dense(cfg), tmp_path / "none.json", "dense", arch)
    load_into(build_dense(cfg), tmp_path / "none.json", "dense", arch, absent=("focal_head.",))
    with pytest.raises(WeightsError, match=r"1 missing key\(s\): focal_head\.3\.bias"):
        load_into(build_dense(cfg), tmp_path / "half.json", "dense", arch, absent=("focal_head.",))
