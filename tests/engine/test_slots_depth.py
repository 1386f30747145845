"""The Depth Anything V2 metric depth slot: the published key layout, its input size, loading through the
manifest, the focal-length rescale, and a job end to end on the CPU.

The weights are UNTRAINED (seeded random init in the published layout): these tests prove that a published
checkpoint's keys and shapes load and that the slot runs through the engine, not what its depth is worth.
"""
from __future__ import annotations

import dataclasses
import tempfile

import pytest
import torch

from sweep_engine import schema
from sweep_engine.config import EngineConfig
from sweep_engine.models import random_weights
from sweep_engine.pipeline import Engine, ModelOutput
from sweep_engine.slots import depth_anything
from sweep_engine.slots.depth_anything import DepthAnythingV2Metric, input_size
from sweep_engine.synth.provider import FakeProvider, jpeg, job_for, photo_ref, synth_frames
from sweep_engine.weights import WeightsError, pin

DAV2 = dict(depth_model="depth-anything-v2-metric-vits", depth_input_side=70, backbone="mobilenetv3_small_100",
            detector="sis-centres", batch_size=2, fetch_timeout_s=5.0)


def published_vits_keys() -> dict[str, tuple]:
    """The keys and shapes of ``depth_anything_v2_metric_vkitti_vits.pth`` as the official code names them
    (metric_depth/depth_anything_v2: DINOv2 ViT-S/14 at 518 px as ``pretrained``, the DPT head with
    features 64 and out_channels 48/96/192/384 as ``depth_head``), written out here independently."""
    d, keys = 384, {}
    keys.update({"pretrained.cls_token": (1, 1, d), "pretrained.pos_embed": (1, 37 * 37 + 1, d),
                 "pretrained.mask_token": (1, d), "pretrained.patch_embed.proj.weight": (d, 3, 14, 14),
                 "pretrained.patch_embed.proj.bias": (d,), "pretrained.norm.weight": (d,),
                 "pretrained.norm.bias": (d,)})
    for i in range(12):
        b = f"pretrained.blocks.{i}."
        keys.update({b + "norm1.weight": (d,), b + "norm1.bias": (d,), b + "attn.qkv.weight": (3 * d, d),
                     b + "attn.qkv.bias": (3 * d,), b + "attn.proj.weight": (d, d), b + "attn.proj.bias": (d,),
                     b + "ls1.gamma": (d,), b + "norm2.weight": (d,), b + "norm2.bias": (d,),
                     b + "mlp.fc1.weight": (4 * d, d), b + "mlp.fc1.bias": (4 * d,),
                     b + "mlp.fc2.weight": (d, 4 * d), b + "mlp.fc2.bias": (d,), b + "ls2.gamma": (d,)})
    out, f, h = (48, 96, 192, 384), 64, "depth_head."
    for i, c in enumerate(out):
        keys.update({f"{h}projects.{i}.weight": (c, d, 1, 1), f"{h}projects.{i}.bias": (c,),
                     f"{h}scratch.layer{i + 1}_rn.weight": (f, c, 3, 3)})
    keys.update({h + "resize_layers.0.weight": (48, 48, 4, 4), h + "resize_layers.0.bias": (48,),
                 h + "resize_layers.1.weight": (96, 96, 2, 2), h + "resize_layers.1.bias": (96,),
                 h + "resize_layers.3.weight": (384, 384, 3, 3), h + "resize_layers.3.bias": (384,)})
    for i in range(1, 5):
        r = f"{h}scratch.refinenet{i}."
        keys.update({r + "out_conv.weight": (f, f, 1, 1), r + "out_conv.bias": (f,)})
        for unit in ("resConfUnit1", "resConfUnit2"):
            for conv in ("conv1", "conv2"):
                keys.update({f"{r}{unit}.{conv}.weight": (f, f, 3, 3), f"{r}{unit}.{conv}.bias": (f,)})
    keys.update({h + "scratch.output_conv1.weight": (32, 64, 3, 3), h + "scratch.output_conv1.bias": (32,),
                 h + "scratch.output_conv2.0.weight": (32, 32, 3, 3), h + "scratch.output_conv2.0.bias": (32,),
                 h + "scratch.output_conv2.2.weight": (1, 32, 1, 1), h + "scratch.output_conv2.2.bias": (1,)})
    return keys


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return DepthAnythingV2Metric("vits", 80.0).eval()


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return random_weights(EngineConfig(**DAV2), tmp_path_factory.mktemp("dav2"), seed=5)


@pytest.fixture(scope="module")
def engine(manifest):
    return Engine(EngineConfig(**DAV2, weights_manifest=str(manifest)))


def test_the_architecture_has_the_published_checkpoints_keys_and_shapes(model):
    got = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert got == published_vits_keys()
    assert sum(v.numel() for v in model.state_dict().values()) == pytest.approx(24.8e6, rel=0.01)  # "24.8M"


def test_photos_are_read_at_a_518_px_short_side_in_multiples_of_14_aspect_kept():
    assert input_size(640, 480) == (686, 518)
    assert input_size(480, 640) == (518, 686)
    assert input_size(1242, 375) == (1722, 518)  # Virtual KITTI 2's frames, as they were trained
    assert input_size(518, 518) == (518, 518)
    assert input_size(256, 192, side=70) == (98, 70)


def test_outputs_are_metres_within_max_depth_at_the_input_size(model):
    with torch.no_grad():
        depth = model(torch.rand(2, 3, 70, 98))
    assert depth.shape == (2, 70, 98) and float(depth.min()) >= 0.0 and float(depth.max()) <= 80.0
    with pytest.raises(ValueError, match="multiples of 14"):
        model(torch.rand(1, 3, 70, 100))


def test_position_embeddings_are_resized_as_dinov2_does(model):
    pos = model._pos_embed(37, 37, torch.float32)
    assert torch.equal(pos, model.pretrained.pos_embed)  # the native grid is used as it is
    assert model._pos_embed(5, 7, torch.float32).shape == (1, 36, 384)


def test_the_slot_loads_through_the_manifest_into_the_engine(engine, manifest):
    slot = next(s for s in engine.slots if s.name == "depth")
    assert slot.entry.architecture == "depth-anything-v2-metric-vits/max80" and slot.size == (98, 70)
    saved = torch.load(manifest.parent / "depth.pt", weights_only=True)
    assert torch.equal(slot.module.state_dict()["depth_head.scratch.output_conv2.2.weight"],
                       saved["depth_head.scratch.output_conv2.2.weight"])
    assert [s.roles for s in engine.slots if s.name == "dense"] == [("seg",)]  # the dense net keeps only classes


def test_a_file_in_another_layout_is_refused_naming_the_keys(manifest, tmp_path):
    state = torch.load(manifest.parent / "depth.pt", weights_only=True)
    state.pop("pretrained.mask_token")
    state["pretrained.head.weight"] = torch.zeros(1)
    torch.save(state, tmp_path / "depth.pt")
    (tmp_path / "dense.pt").write_bytes((manifest.parent / "dense.pt").read_bytes())
    (tmp_path / "detector.pt").write_bytes((manifest.parent / "detector.pt").read_bytes())
    m = tmp_path / "weights.json"
    cfg = EngineConfig(**DAV2)
    for name, arch in (("dense", "sis-dense/mobilenetv3_small_100/c64/k17/f0.8"),
                       ("detector", "sis-centres/mobilenetv3_small_100/c64/k9"),
                       ("depth", "depth-anything-v2-metric-vits/max80")):
        pin(m, name, tmp_path / f"{name}.pt", arch, license="test", provenance="test", trained=False)
    with pytest.raises(WeightsError, match=r"1 missing key\(s\): pretrained\.mask_token; "
                                           r"1 unexpected key\(s\): pretrained\.head\.weight"):
        Engine(EngineConfig(**{**cfg.__dict__, "weights_manifest": str(m)}))


def test_indoor_weights_are_not_taken_for_outdoor_ones(manifest):
    with pytest.raises(WeightsError, match="are for depth-anything-v2-metric-vits/max80.*configured for "
                                           "depth-anything-v2-metric-vits/max20"):
        Engine(EngineConfig(**{**DAV2, "max_depth_m": 20.0}, weights_manifest=str(manifest)))


def test_depth_is_rescaled_by_a_measured_focal_length_over_the_models(engine):
    frame = synth_frames(seed=3, n=1, width=256, height=192)[0]
    photo = photo_ref("p", frame, "http://127.0.0.1")
    f_model = depth_anything.focal_px(70, 192)
    assert f_model == pytest.approx(725.0087 * 518 / 375 * 192 / 70)
    out = ModelOutput(depth=frame.depth.astype("float32"), seg=frame.seg, detections=frame.detections(),
                      depth_focal_px=f_model)
    _, ev = engine.measure(photo, (256, 192), out, focal_px=200.0)
    assert ev["depthModelFocalPx"] == pytest.approx(f_model) and ev["depthRescale"] == pytest.approx(200 / f_model)
    assumed = dataclasses.replace(photo, focal_mm=None)
    _, ev = engine.measure(assumed, (256, 192), out)
    assert ev["depthRescale"] is None  # an assumed focal length is left to calibration


async def test_a_job_runs_end_to_end_with_the_depth_anything_slot():
    frames = synth_frames(seed=2, n=3)
    provider = FakeProvider({f"p{i}": jpeg(f) for i, f in enumerate(frames)})
    await provider.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            m = random_weights(EngineConfig(**DAV2), tmp, seed=6)
            engine = Engine(EngineConfig(**DAV2, weights_manifest=str(m)))
            result = await engine.run_job(job_for(frames, provider.base_url))
    finally:
        await provider.stop()
    again = schema.Result.from_json(result.to_json())
    assert [x.photo_id for x in again.measurements] == ["p0", "p1", "p2"] and not again.skipped
    for x in again.measurements:
        assert x.calibration.evidence["depthModelFocalPx"] == pytest.approx(depth_anything.focal_px(70, 192))


def test_sis_engine_measure_runs_the_slot_and_reports_focal_length_in_the_photo_s_pixels(manifest, tmp_path,
                                                                                        monkeypatch, capsys):
    from sweep_engine.cli import main

    assert main(["synth", str(tmp_path), "--seed", "4", "--width", "320", "--height", "240"]) == 0
    monkeypatch.setenv("SIS_ENGINE_DEPTH_INPUT_SIDE", "70")
    capsys.readouterr()
    code = main(["measure", str(tmp_path / "synth-4-0.jpg"), "--weights", str(manifest), "--backbone",
                 "mobilenetv3_small_100", "--detector", "sis-centres", "--depth-model",
                 "depth-anything-v2-metric-vits", "--focal-px", "300", "--heading", "0"])
    assert code == 0
    m = schema.Measurement.from_json(capsys.readouterr().out)
    ev = m.calibration.evidence
    assert ev["frame"]["widthPx"] == 256 and ev["frame"]["photoWidthPx"] == 320
    assert ev["focalPx"]["prior"] == pytest.approx(300 * 256 / 320)  # the evidence stays in the frame's pixels
    assert m.calibration.focal_px == pytest.approx(ev["focalPx"]["solved"] * 320 / 256, rel=1e-4)
    assert ev["depthModelFocalPx"] == pytest.approx(depth_anything.focal_px(70, 192))
    assert ev["depthRescale"] == pytest.approx(300 * 256 / 320 / depth_anything.focal_px(70, 192), rel=1e-4)


def test_a_dense_network_trained_for_one_focal_length_reading_only_classes_leaves_the_depth_slot_s_own(tmp_path):
    """With Depth Anything for depth, a dense network trained for one focal length (``dense_focal``) reads
    only the classes: the depth's focal length is Depth Anything's, whatever order the slots run in."""
    cfg = EngineConfig(**DAV2, dense_focal=0.8)
    engine = Engine(EngineConfig(**{**cfg.__dict__, "weights_manifest": str(random_weights(cfg, tmp_path, seed=7))}))
    assert engine.weights["dense"].architecture.endswith("/k17/f0.8")
    assert {s.name: s.depth_focal_px for s in engine.slots} == {
        "dense": None, "depth": pytest.approx(depth_anything.focal_px(70, 192)), "detector": None}
    outs, _ = engine.infer([torch.zeros(3, 192, 256, dtype=torch.uint8)])
    assert outs[0].depth_focal_px == pytest.approx(depth_anything.focal_px(70, 192))
    assert outs[0].focal_guess_px is None     # its focal head reads for its own depth, which is not used
