"""Sweep engine accuracy on held-out synthetic scenes: what the configured weights are worth.

    .venv/bin/python bench/accuracy.py [--weights MANIFEST] [--seed 1000] [--scenes 80] [--json OUT]
        [--detector ARCH] [--min-score S] [--dense-focal F] [--substitute depth,seg,boxes] [--give-height] [--no-exact]
        [--plain-scenes 40] [--plain-seed 1000]

``--substitute`` replaces those parts of the networks' output with the exact
ones and ``--give-height`` gives the true camera height as measured: what each
part costs.  Choose thresholds on another seed (2000 was used), never on 1000.

The held-out scenes come from the training generator (``sweep_engine.train.data``)
with another seed than training's (training uses seed 0 and its own indices;
the default here is seed 1000), with its full variety (road widths 3-20 m,
camera heights 1.0-3.2 m, focal, pitch, yaw, vehicles, lighting, textures,
blur, noise, rain, JPEG) except roll: the geometry models no roll, so the
held-out scenes have none.  Each photo goes through the engine as a node runs
it: the networks at the configured input size, then ``Engine.measure`` with
the photo's metadata (EXIF focal: measured; pitch: given; camera height: not
given, so the 1.65 m prior, assumed, that calibration may move).

What is measured (definitions):

- road width: the photo's ``roadWidth`` against the street's true carriageway
  width; absolute error in metres and in % of the true width, median and p90,
  over the photos that report one (coverage is printed).
- object distance: AbsRel = mean |d - d*| / d* and delta1 = share with
  max(d/d*, d*/d) < 1.25, d* the exact range to the point the box centre's ray
  hits.  Two rows: objects the detector found (matched to truth, same label,
  IoU >= 0.5), and the truth boxes measured on the network's depth (depth
  alone, without the detector's misses).  Truth objects counted: vehicles,
  people, poles, signs, gates, entrances with visible fraction >= 0.5.
- detection precision and recall per class at the engine's ``min_score``,
  IoU >= 0.5, greedy by score.  Truth that counts: visible fraction >= 0.5,
  box at least 4 px wide and 8 px high; detections matching smaller or more
  hidden truth are ignored (neither true nor false).
- scaleTrust: the same photos calibrated with true metadata and with
  deliberately wrong *measured* metadata (focal length x0.7 or x1.4, or a
  camera height x0.7 or x1.4 given as measured), in turn; a confusion matrix
  of the verdicts.  A miscalibrated scene should read ``low``.
  ``trust_variants`` adds rows: true metadata with the camera height given
  (measured) and not given; the four wrong values given as measured (kept,
  so the result is miscalibrated) and as assumed (unmeasured: the
  calibration may correct them); and, over all of these, by outcome: the
  solved focal length or camera height within ``OUTCOME_TOLERANCE`` (10 %) of
  the truth or not.

The independent set (``--plain-scenes``, ``evaluate_plain``): plain road
scenes from ``sweep_engine.heldout``, a renderer written apart from the
training generator and never used in training (different asphalt, markings,
verges, backdrops, sky, light and camera ranges), rendered at 512 x 384 and
resized by the engine as a photo would be. Road width is read as the issue
posed it (focal length and camera height given, measured), and again with
the height not given; the same scaleTrust rows. ``side_by_side`` prints the
issue's figures for both sets, with the exact-input floor of each (the
scenes' own depth and classes through the same geometry and edge check).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

# Run as a script, bench/ comes first on the path, where bench/queue.py would shadow the standard
# library's queue (which torch imports): the repository root replaces it.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from sweep_engine import schema  # noqa: E402
from sweep_engine.config import EngineConfig  # noqa: E402
from sweep_engine.heldout import plain_road, render_plain  # noqa: E402
from sweep_engine.measure import measure_objects  # noqa: E402
from sweep_engine.pipeline import Engine, ModelOutput, depth_at_focal  # noqa: E402
from sweep_engine.synth.provider import photo_ref  # noqa: E402
from sweep_engine.train.data import Variety, sample  # noqa: E402

DISTANCE_LABELS = ("car", "truck", "bus", "person", "pole", "sign", "gate", "entrance")
MISCALIBRATIONS = (("focal x0.7", 0.7, 1.0), ("focal x1.4", 1.4, 1.0), ("height x0.7", 1.0, 0.7),
                   ("height x1.4", 1.0, 1.4))
VEHICLES = ("car", "truck", "bus")


def iou(a, b) -> float:
    x0, y0, x1, y1 = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x1 - x0) * max(0.0, y1 - y0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def counted(o) -> bool:
    return (o.bbox is not None and o.visible_fraction >= 0.5 and o.bbox[2] - o.bbox[0] >= 4
            and o.bbox[3] - o.bbox[1] >= 8)


def match_detections(dets, truth, min_score: float):
    """Greedy matching by score: per class (tp, fp, fn) and [(det, truth)] pairs of true positives."""
    stats: dict[str, list[int]] = {}
    pairs = []
    taken = set()
    for label, box, score in sorted((d for d in dets if d[2] >= min_score), key=lambda d: -d[2]):
        best, best_iou = None, 0.5
        for i, o in enumerate(truth):
            if i in taken or o.label != label:
                continue
            v = iou(box, o.bbox)
            if v >= best_iou:
                best, best_iou = i, v
        s = stats.setdefault(label, [0, 0, 0])
        if best is None:
            s[1] += 1
        elif counted(truth[best]):
            taken.add(best)
            s[0] += 1
            pairs.append(((label, box, score), truth[best]))
        else:
            taken.add(best)  # a detection of a barely visible object: neither right nor wrong
    for i, o in enumerate(truth):
        if i not in taken and counted(o):
            stats.setdefault(o.label, [0, 0, 0])[2] += 1
    return stats, pairs


def distance_stats(pairs) -> dict:
    """AbsRel and delta1 over (measured, true) distance pairs."""
    if not pairs:
        return {"n": 0, "absrel": float("nan"), "delta1": float("nan"), "median": float("nan"), "p90": float("nan")}
    d = np.array([p[0] for p in pairs])
    t = np.array([p[1] for p in pairs])
    rel = np.abs(d - t) / t
    return {"n": len(pairs), "absrel": float(np.mean(rel)), "delta1": float(np.mean(np.maximum(d / t, t / d) < 1.25)),
            "median": float(np.median(rel)), "p90": float(np.percentile(rel, 90))}


def exact_output(frame, max_depth_m: float) -> ModelOutput:
    """What perfect networks would output: the frame's own depth (capped at the head's range), classes, boxes."""
    depth = np.where(np.isfinite(frame.depth), np.minimum(frame.depth, max_depth_m + 0.05), max_depth_m + 0.05)
    return ModelOutput(depth=depth.astype(np.float32), seg=frame.seg, detections=frame.detections())


COMPONENTS = ("depth", "seg", "boxes")


def substitute(out: ModelOutput, frame, max_depth_m: float, parts) -> ModelOutput:
    """The networks' output with the named parts (of ``COMPONENTS``) replaced by the scene's exact ones. Exact
    depth goes with no focal head's reading (exact outputs have none), so that it measures the geometry alone."""
    ex = exact_output(frame, max_depth_m)
    exact_depth = "depth" in parts
    return ModelOutput(depth=ex.depth if exact_depth else out.depth, seg=ex.seg if "seg" in parts else out.seg,
                       detections=ex.detections if "boxes" in parts else out.detections,
                       depth_focal_px=None if exact_depth else out.depth_focal_px,
                       focal_guess_px=None if exact_depth else out.focal_guess_px)


def evaluate(engine: Engine, seed: int, n: int, batch: int = 8, exact: bool = False, substituted=(),
             give_height: bool = False) -> dict:
    """The figures for the engine's networks, or with ``exact`` for perfect ones (the geometry's own floor).

    ``substituted`` (a subset of ``COMPONENTS``) replaces only those parts of the networks' output with the
    exact ones, to bound what each network costs; ``give_height`` gives the engine the true camera height
    (as measured), to separate the scale from the rest.
    """
    cfg = engine.config
    variety = Variety(roll_deg=0.0)
    model_sigma = engine.depth_sigma
    if exact or "depth" in substituted:
        engine.depth_sigma = None  # exact depth: no depth model error for the geometry to allow for
    try:
        return _evaluate(engine, seed, n, batch, exact, substituted, give_height, variety)
    finally:
        engine.depth_sigma = model_sigma


def _evaluate(engine, seed, n, batch, exact, substituted, give_height, variety) -> dict:
    cfg = engine.config
    road_err, road_missing = [], 0
    det_stats: dict[str, list[int]] = {}
    dist_det, dist_truth, pix = [], [], []
    scales, aligned = [], []  # per scene: median depth ratio (model / truth), and AbsRel after dividing it out
    focal = []  # per scene: log(the dense network's focal length reading / the truth), where it has a focal head
    unstated = {"focal": [], "road": [], "distance": []}  # the same photos with no focal length in their metadata
    trust = {"calibrated": {}, "miscalibrated": {}}
    for start in range(0, n, batch):
        samples = [sample(seed, i, width=cfg.input_width, height=cfg.input_height, variety=variety)
                   for i in range(start, min(n, start + batch))]
        if exact:
            outs = [exact_output(s.frame, cfg.max_depth_m) for s in samples]
        else:
            outs, _ = engine.infer([torch.from_numpy(s.rgb.copy()).permute(2, 0, 1) for s in samples])
            if substituted:
                outs = [substitute(o, s.frame, cfg.max_depth_m, substituted) for o, s in zip(outs, samples)]
        for s, out in zip(samples, outs):
            f = s.frame
            photo = photo_ref("heldout", f, "http://127.0.0.1")
            size = (cfg.input_width, cfg.input_height)
            image = s.rgb
            pm, _ = engine.measure(photo, size, out, camera_height_m=f.camera.height_m if give_height else None,
                                   image=image)
            trust["calibrated"][pm.scale_trust] = trust["calibrated"].get(pm.scale_trust, 0) + 1
            if out.focal_guess_px:
                focal.append(float(np.log(out.focal_guess_px / f.camera.fy)))
            for row, verdict in trust_variants(engine, photo, size, out, f.camera.fx, f.camera.height_m, image):
                _count(trust, row, verdict)
            true_w = f.scene.street.road_width_m
            if pm.road is not None and np.isfinite(pm.road.width_m):
                road_err.append((pm.road.width_m - true_w, true_w))
            else:
                road_missing += 1
            truth = [o for o in f.objects if o.label and o.bbox is not None]
            stats, pairs = match_detections(out.detections, truth, cfg.min_score)
            for k, v in stats.items():
                acc = det_stats.setdefault(k, [0, 0, 0])
                for j in range(3):
                    acc[j] += v[j]
            # A depth model trained for one focal length (``dense_focal``) is read at the scene's own, as
            # ``Engine.measure`` reads it with the EXIF focal length.
            depth, _ = depth_at_focal(out, f.camera.fy)
            dist_det += detected_distances(pm, pairs)
            bare, _ = engine.measure(without_focal(photo), size, out, image=image)
            unstated["focal"].append(float(np.log(bare.camera.fy / f.camera.fy)))
            if bare.road is not None and np.isfinite(bare.road.width_m):
                unstated["road"].append(100 * abs(bare.road.width_m - true_w) / true_w)
            unstated["distance"] += detected_distances(bare, pairs)
            gt = [o for o in truth if o.label in DISTANCE_LABELS and o.visible_fraction >= 0.5]
            for o, m in zip(gt, measure_objects(pm.camera, depth,
                                                [(o.label, o.bbox, 1.0) for o in gt],
                                                out.seg)):
                if np.isfinite(m.distance_m) and m.distance_m > 0:
                    dist_truth.append((m.distance_m, o.distance_m))
            ok = np.isfinite(f.depth) & (f.depth > 0.1) & (f.depth <= cfg.max_depth_m)
            pix.append((depth[ok], f.depth[ok]))
            if ok.any():
                k = float(np.median(depth[ok] / f.depth[ok]))
                scales.append(k)
                aligned.append(float(np.mean(np.abs(depth[ok] / k - f.depth[ok]) / f.depth[ok])))
            for _, fm, hm in MISCALIBRATIONS:
                wrong, _ = engine.measure(photo, size, out, focal_px=f.camera.fx * fm,
                                          camera_height_m=f.camera.height_m * hm if hm != 1.0 else None)
                trust["miscalibrated"][wrong.scale_trust] = trust["miscalibrated"].get(wrong.scale_trust, 0) + 1
    err = np.array(road_err) if road_err else np.zeros((0, 2))
    abs_m = np.abs(err[:, 0]) if len(err) else np.array([np.nan])
    pct = 100 * np.abs(err[:, 0]) / err[:, 1] if len(err) else np.array([np.nan])
    dp = np.concatenate([p[0] for p in pix]) if pix else np.zeros(0)
    dt = np.concatenate([p[1] for p in pix]) if pix else np.zeros(0)
    return {
        "scenes": n, "seed": seed,
        "road": {"n": len(road_err), "missing": road_missing, "median_m": float(np.median(abs_m)),
                 "p90_m": float(np.percentile(abs_m, 90)), "median_pct": float(np.median(pct)),
                 "p90_pct": float(np.percentile(pct, 90)),
                 "bias_pct": float(np.median(100 * err[:, 0] / err[:, 1])) if len(err) else float("nan")},
        "distance_detected": distance_stats(dist_det),
        "distance_truth_boxes": distance_stats(dist_truth),
        "pixel_depth": distance_stats(list(zip(dp, dt))) if len(dp) else distance_stats([]),
        "depth_scale": {"median_abs_pct": float(100 * np.median(np.abs(np.log(scales)))) if scales else float("nan"),
                        "aligned_absrel": float(np.mean(aligned)) if aligned else float("nan")},
        "detection": {k: {"tp": v[0], "fp": v[1], "fn": v[2]} for k, v in sorted(det_stats.items())},
        "focal_guess": focal_stats(focal),
        "no_focal_in_metadata": {"solved_focal": focal_stats(unstated["focal"]),
                                 "road_median_pct": float(np.median(unstated["road"] or [np.nan])),
                                 "road_reported": len(unstated["road"]),
                                 "distance_detected": distance_stats(unstated["distance"])},
        "scale_trust": trust,
    }


def without_focal(photo):
    """The photo as a provider that states no focal length lists it (no EXIF focal, sensor or camera model)."""
    return dataclasses.replace(photo, focal_mm=None, sensor_width_mm=None, camera_make=None, camera_model=None)


def detected_distances(pm, pairs) -> list[tuple[float, float]]:
    """(measured, true) distances of the detected objects matched to the truth (``match_detections``' pairs)."""
    out = []
    for (label, box, _), o in pairs:
        if label not in DISTANCE_LABELS:
            continue
        m = next((m for m in pm.objects if m.box == box and m.label == label), None)
        if m is not None and np.isfinite(m.distance_m):
            out.append((m.distance_m, o.distance_m))
    return out


def focal_stats(logs: list[float]) -> dict:
    """The dense network's focal length readings against the truth: |error| median and p90, and the signed
    median, in % (log units x 100); n 0 where the network has no focal head."""
    a = np.array(logs) if logs else np.array([np.nan])
    return {"n": len(logs), "median_pct": float(100 * np.median(np.abs(a))),
            "p90_pct": float(100 * np.percentile(np.abs(a), 90)), "bias_pct": float(100 * np.median(a))}


OUTCOME_TOLERANCE = 0.10  # log units: a solved focal length or camera height farther from the truth is a miscalibration


def _count(trust: dict, row: str, verdict: str) -> None:
    trust.setdefault(row, {})
    trust[row][verdict] = trust[row].get(verdict, 0) + 1


def measure_as(engine: Engine, photo, out: ModelOutput, focal_px: float | None, focal_basis: str,
               height_m: float | None, height_basis: str, image=None):
    """``Engine.measure`` with the focal length (photo pixels) and camera height given with the named basis:
    ``assumed`` values are priors the calibration may move, ``measured`` ones it keeps."""
    return engine.measure(photo, (photo.width, photo.height), out, camera_height_m=height_m, focal_px=focal_px,
                          image=image, focal_basis=focal_basis, height_basis=height_basis if height_m else "assumed")


def trust_variants(engine: Engine, photo, size, out: ModelOutput, true_focal: float, true_height: float,
                   image=None):
    """``(row, verdict)`` of one photo calibrated with true and wrong metadata, by metadata and by outcome.

    Rows: ``calibrated, height given`` (focal and height true, measured); ``miscalibrated, measured`` and
    ``miscalibrated, assumed`` (focal x0.7 / x1.4 with the true height measured, or height x0.7 / x1.4 with
    the true focal measured, the wrong value given as measured or as assumed); and, judged by outcome over
    every variant including the plain calibrated ones, ``outcome ok`` / ``outcome off`` (the solved focal
    length or camera height more than ``OUTCOME_TOLERANCE`` from the truth)."""
    variants = [("calibrated, height given", true_focal, "measured", true_height, "measured"),
                ("calibrated, height not given", true_focal, "measured", None, "assumed")]
    for basis in ("measured", "assumed"):
        for _, fm, hm in MISCALIBRATIONS:
            variants.append((f"miscalibrated, {basis}", true_focal * fm, basis if fm != 1.0 else "measured",
                             true_height * hm, basis if hm != 1.0 else "measured"))
    for row, focal, fb, height, hb in variants:
        pm, _ = measure_as(engine, photo, out, focal, fb, height, hb, image)
        yield row, pm.scale_trust
        scale = size[0] / photo.width
        off = max(abs(np.log(pm.camera.fx / (true_focal * scale))), abs(np.log(pm.camera.height_m / true_height)))
        yield ("outcome off" if off > OUTCOME_TOLERANCE else "outcome ok"), pm.scale_trust


def plain_photo(scene) -> schema.PhotoRef:
    """The independent renderer's scene as a provider would list it: heading and pitch, no EXIF focal."""
    return schema.PhotoRef(id=f"plain-{scene.seed}", lon=13.4, lat=52.5, heading=scene.yaw_deg % 360.0,
                           pitch=scene.pitch_deg, captured_at="2025-06-01T10:00:00Z", width=scene.width,
                           height=scene.height, url="http://127.0.0.1/plain.jpg", license="CC0-1.0",
                           provider="heldout")


def evaluate_plain(engine: Engine, seed: int, n: int, batch: int = 8, exact: bool = False) -> dict:
    """Road width and scaleTrust on the independent renderer's plain road scenes (``sweep_engine.heldout``).

    The road width is read as the issue posed it: focal length and camera height given, as measured
    (and, second row, with the height not given). With ``exact`` the scene's own depth and classes,
    rendered at the engine's input size, go through the same geometry."""
    cfg = engine.config
    size = (cfg.input_width, cfg.input_height)
    model_sigma = engine.depth_sigma
    if exact:
        engine.depth_sigma = None
    widths = {"height given": [], "height not given": []}
    trust: dict = {}
    focal = []
    try:
        for start in range(0, n, batch):
            scenes = [plain_road(seed * 100_000 + i) for i in range(start, min(n, start + batch))]
            if exact:
                small = [render_plain(dataclasses.replace(sc, width=size[0], height=size[1],
                                                          focal_px=sc.focal_px * size[0] / sc.width))
                         for sc in scenes]
                outs = [ModelOutput(depth=np.where(np.isfinite(fr.depth), np.minimum(fr.depth, cfg.max_depth_m),
                                                   cfg.max_depth_m).astype(np.float32), seg=fr.seg, detections=[])
                        for fr in small]
                images = [fr.rgb for fr in small]
            else:
                frames = [render_plain(sc) for sc in scenes]
                images = [fr.rgb for fr in frames]
                outs, _ = engine.infer([torch.from_numpy(fr.rgb.copy()).permute(2, 0, 1) for fr in frames])
            for sc, out, image in zip(scenes, outs, images):
                photo = plain_photo(sc)
                if out.focal_guess_px:
                    focal.append(float(np.log(out.focal_guess_px / (sc.focal_px * size[1] / sc.height))))
                for row, height, hb in (("height given", sc.camera_height_m, "measured"),
                                        ("height not given", None, "assumed")):
                    pm, _ = measure_as(engine, photo, out, sc.focal_px, "measured", height, hb, image)
                    ok = pm.road is not None and np.isfinite(pm.road.width_m)
                    widths[row].append((pm.road.width_m if ok else float("nan"), sc.road_width_m))
                for row, verdict in trust_variants(engine, photo, size, out, sc.focal_px,
                                                   sc.camera_height_m, image):
                    _count(trust, row, verdict)
    finally:
        engine.depth_sigma = model_sigma
    return {"scenes": n, "seed": seed, "road": {k: _road_stats(v) for k, v in widths.items()},
            "focal_guess": focal_stats(focal), "scale_trust": trust}


def _road_stats(pairs) -> dict:
    """Share reported, and |error| and signed error in % of the true width over the reported ones."""
    got = [(w, t) for w, t in pairs if np.isfinite(w)]
    pct = np.array([100 * (w - t) / t for w, t in got]) if got else np.array([np.nan])
    return {"n": len(got), "missing": len(pairs) - len(got), "reported_pct": 100 * len(got) / max(1, len(pairs)),
            "median_pct": float(np.median(np.abs(pct))), "p90_pct": float(np.percentile(np.abs(pct), 90)),
            "bias_pct": float(np.median(pct))}


def _share(counts: dict, verdict: str) -> float:
    return 100 * counts.get(verdict, 0) / sum(counts.values()) if counts and sum(counts.values()) else float("nan")


def side_by_side(own: dict, own_exact: dict | None, plain: dict, plain_exact: dict | None) -> str:
    """The issue's figures, the generator's own held-out set beside the independent renderer's."""
    road_own = own["road"]
    rows = [
        ("photos reporting a road width, %", 100 * road_own["n"] / max(1, road_own["n"] + road_own["missing"]),
         plain["road"]["height given"]["reported_pct"], ">= 90 (indep.)", ".0f"),
        ("road width |error| median, %", road_own["median_pct"], plain["road"]["height given"]["median_pct"],
         "<= 3 own, <= 5 indep.", ".1f"),
        ("road width |error| p90, %", road_own["p90_pct"], plain["road"]["height given"]["p90_pct"], "", ".1f"),
        ("road width signed error median, %", road_own["bias_pct"], plain["road"]["height given"]["bias_pct"], "",
         "+.1f"),
        ("indep., height not given: reporting, %", None, plain["road"]["height not given"]["reported_pct"], "", ".0f"),
        ("indep., height not given: |error| median, %", None, plain["road"]["height not given"]["median_pct"], "",
         ".1f"),
    ]
    if own.get("focal_guess", {}).get("n"):
        rows += [("network's focal length |error| median, %", own["focal_guess"]["median_pct"],
                  plain["focal_guess"]["median_pct"], "", ".1f"),
                 ("network's focal length |error| p90, %", own["focal_guess"]["p90_pct"],
                  plain["focal_guess"]["p90_pct"], "", ".1f"),
                 ("network's focal length signed error median, %", own["focal_guess"]["bias_pct"],
                  plain["focal_guess"]["bias_pct"], "", "+.1f")]
    for label, row, verdict, target in (
            ("calibrated, height not given: high, %", "calibrated, height not given", "high", ">= 60"),
            ("calibrated, height given: high, %", "calibrated, height given", "high", ">= 60"),
            ("miscalibrated, measured: low, %", "miscalibrated, measured", "low", ">= 95"),
            ("miscalibrated, assumed: low, %", "miscalibrated, assumed", "low", ""),
            ("outcome within 10 %: high, %", "outcome ok", "high", ""),
            ("outcome off by > 10 %: low, %", "outcome off", "low", ">= 95")):
        rows.append((label, _share(own["scale_trust"].get(row, {}), verdict),
                     _share(plain["scale_trust"].get(row, {}), verdict), target, ".1f"))
    lines = [f"own generator (seed {own['seed']}, {own['scenes']} scenes) beside the independent renderer "
             f"(sweep_engine.heldout, seed {plain['seed']}, {plain['scenes']} plain road scenes); "
             "road width on the independent set with focal and height given as measured", "",
             f"{'metric':<46} {'own':>8} {'indep.':>8} {'own ex.':>8} {'ind. ex.':>8}  target", "-" * 100]
    ex_rows = {}
    if own_exact is not None and plain_exact is not None:
        ex_rows = {r[0]: r for r in side_by_side_rows_exact(own_exact, plain_exact)}
    for label, a, b, target, spec in rows:
        ea, eb = ex_rows.get(label, (None, None, None))[1:3]
        lines.append(f"{label:<46} {_f(a, spec) if a is not None else '':>8} {_f(b, spec):>8} "
                     f"{_f(ea, spec) if ea is not None else '':>8} {_f(eb, spec) if eb is not None else '':>8}  {target}")
    counts = ["", "scaleTrust counts (high/low/unknown), own | indep.:"]
    for row in sorted(set(own["scale_trust"]) | set(plain["scale_trust"])):
        c1, c2 = own["scale_trust"].get(row, {}), plain["scale_trust"].get(row, {})
        fmt = lambda c: f"{c.get('high', 0)}/{c.get('low', 0)}/{c.get('unknown', 0)}"  # noqa: E731
        counts.append(f"  {row:<34} {fmt(c1):>14} | {fmt(c2)}")
    return "\n".join(lines + counts)


def side_by_side_rows_exact(own_exact: dict, plain_exact: dict):
    """The same rows' values with exact inputs (no networks): what the geometry alone gives."""
    r, p = own_exact["road"], plain_exact["road"]["height given"]
    yield ("photos reporting a road width, %", 100 * r["n"] / max(1, r["n"] + r["missing"]), p["reported_pct"])
    yield ("road width |error| median, %", r["median_pct"], p["median_pct"])
    yield ("road width |error| p90, %", r["p90_pct"], p["p90_pct"])


def _f(x, spec=".3f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and not np.isfinite(x)) else format(x, spec)


def headline(r: dict) -> dict:
    """The headline figures: name -> (value, format, (target text, test) or None)."""
    det = r["detection"]
    veh = [sum(det.get(k, {}).get(x, 0) for k in VEHICLES) for x in ("tp", "fp", "fn")]
    mis, cal = r["scale_trust"]["miscalibrated"], r["scale_trust"]["calibrated"]
    road, dd, dtb, px = r["road"], r["distance_detected"], r["distance_truth_boxes"], r["pixel_depth"]
    nan = float("nan")
    return {
        "road width |error| median, m": (road["median_m"], ".3f", None),
        "road width |error| p90, m": (road["p90_m"], ".3f", None),
        "road width |error| median, %": (road["median_pct"], ".1f", ("<= 3.0", lambda v: v <= 3.0)),
        "road width |error| p90, %": (road["p90_pct"], ".1f", None),
        "road width signed error median, %": (road["bias_pct"], "+.1f", None),
        "photos reporting a road width, %": (100 * road["n"] / max(1, road["n"] + road["missing"]), ".0f", None),
        "distance AbsRel, detected objects": (dd["absrel"], ".3f", ("<= 0.05", lambda v: v <= 0.05)),
        "distance delta1, detected objects": (dd["delta1"], ".3f", None),
        "distance |rel. error| median, detected objects": (dd["median"], ".3f", None),
        "distance |rel. error| p90, detected objects": (dd["p90"], ".3f", None),
        "objects matched (detected)": (dd["n"], "d", None),
        "distance AbsRel, truth boxes on model depth": (dtb["absrel"], ".3f", ("<= 0.05", lambda v: v <= 0.05)),
        "distance delta1, truth boxes on model depth": (dtb["delta1"], ".3f", None),
        "objects (truth boxes)": (dtb["n"], "d", None),
        "pixel depth AbsRel (<= 80 m)": (px["absrel"], ".3f", None),
        "pixel depth delta1": (px["delta1"], ".3f", None),
        "per-scene depth scale |log error| median, %": (r["depth_scale"]["median_abs_pct"], ".1f", None),
        "pixel depth AbsRel, per-scene scale removed": (r["depth_scale"]["aligned_absrel"], ".3f", None),
        "vehicle recall (car+truck+bus)": (veh[0] / (veh[0] + veh[2]) if veh[0] + veh[2] else nan, ".3f",
                                           (">= 0.9", lambda v: v >= 0.9)),
        "vehicle precision (car+truck+bus)": (veh[0] / (veh[0] + veh[1]) if veh[0] + veh[1] else nan, ".3f", None),
        "miscalibrated scenes read low, %": (100 * mis.get("low", 0) / max(1, sum(mis.values())), ".1f",
                                             (">= 95", lambda v: v >= 95)),
        "calibrated scenes read high, %": (100 * cal.get("high", 0) / max(1, sum(cal.values())), ".1f", None),
        "no focal length in metadata: solved focal |log error| median, %":
            (r["no_focal_in_metadata"]["solved_focal"]["median_pct"], ".1f", None),
        "no focal length in metadata: road width |error| median, %":
            (r["no_focal_in_metadata"]["road_median_pct"], ".1f", None),
        "no focal length in metadata: distance AbsRel, detected objects":
            (r["no_focal_in_metadata"]["distance_detected"]["absrel"], ".3f", None),
    }


def table(r: dict, exact: dict | None, manifest: str, cfg: EngineConfig, seconds: float) -> str:
    lines = []
    add = lines.append
    add(f"accuracy on {r['scenes']} held-out synthetic scenes (generator seed {r['seed']}, no roll), "
        f"weights {manifest}")
    add(f"models: {cfg.backbone} dense + {cfg.detector}, input {cfg.input_width}x{cfg.input_height}, "
        f"min_score {cfg.min_score}; {seconds:.0f} s")
    add("columns: 'weights' = the networks' outputs; 'exact in' = the scenes' exact depth, classes and boxes "
        "through the same geometry (its own floor)")
    add("")
    add(f"{'metric':<46} {'weights':>9} {'exact in':>9} {'target':>8}  verdict")
    add("-" * 86)
    h, hx = headline(r), headline(exact) if exact else {}
    for name, (value, spec, target) in h.items():
        ex = _f(hx[name][0], spec) if name in hx else ""
        verdict = "" if target is None else ("n/a" if not np.isfinite(value) else
                                             "MET" if target[1](value) else "MISSED")
        add(f"{name:<46} {_f(value, spec):>9} {ex:>9} {target[0] if target else '':>8}  {verdict}")
    add("")
    add(f"{'detection class':<16} {'truth':>6} {'dets':>6} {'TP':>5} {'precision':>10} {'recall':>8}")
    for k, v in r["detection"].items():
        n_truth, n_det = v["tp"] + v["fn"], v["tp"] + v["fp"]
        add(f"{k:<16} {n_truth:>6} {n_det:>6} {v['tp']:>5} "
            f"{_f(v['tp'] / n_det if n_det else float('nan')):>10} "
            f"{_f(v['tp'] / n_truth if n_truth else float('nan')):>8}")
    for title, res in (("weights", r), ("exact inputs", exact)):
        if res is None:
            continue
        add("")
        add(f"scaleTrust confusion, {title} (rows: scene metadata, columns: verdict)")
        add(f"{'':<32} {'high':>6} {'low':>6} {'unknown':>8}")
        for row, counts in res["scale_trust"].items():
            label = row + (f" ({len(MISCALIBRATIONS)} variants each)" if row == "miscalibrated" else "")
            add(f"{label:<32} {counts.get('high', 0):>6} {counts.get('low', 0):>6} {counts.get('unknown', 0):>8}")
    return "\n".join(lines)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--weights", default=None, help="weights manifest (default: the engine's default)")
    p.add_argument("--seed", type=int, default=1000, help="held-out generator seed (training used 0)")
    p.add_argument("--scenes", type=int, default=80)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None, help="also write the figures as JSON here")
    p.add_argument("--substitute", default="", help="comma-separated parts of the networks' output (depth, seg, "
                   "boxes) to replace with the exact ones in the 'weights' column: what each part costs")
    p.add_argument("--give-height", action="store_true", help="give the engine the true camera height as measured")
    p.add_argument("--no-exact", action="store_true", help="skip the exact-inputs column")
    p.add_argument("--detector", default=None, help="detector architecture of the weights (default: the engine's)")
    p.add_argument("--dense-focal", type=float, default=None,
                   help="the engine's dense_focal, for a dense network trained with --canonical-focal")
    p.add_argument("--min-score", type=float, default=None, help="detection score threshold (default: the engine's)")
    p.add_argument("--plain-scenes", type=int, default=40, help="plain road scenes from the independent renderer "
                   "(sweep_engine.heldout); 0: none")
    p.add_argument("--plain-seed", type=int, default=1000, help="the independent renderer's seed (2000 for tuning)")
    args = p.parse_args(argv)
    parts = tuple(x for x in args.substitute.split(",") if x)
    if any(x not in COMPONENTS for x in parts):
        p.error(f"--substitute takes {', '.join(COMPONENTS)}")
    torch.set_num_threads(args.threads)
    overrides = {"device": "cpu"}
    if args.weights:
        overrides["weights_manifest"] = args.weights
    if args.detector:
        overrides["detector"] = args.detector
    if args.min_score is not None:
        overrides["min_score"] = args.min_score
    if args.dense_focal is not None:
        overrides["dense_focal"] = args.dense_focal
    cfg = EngineConfig(**overrides)
    engine = Engine(cfg)
    t = time.perf_counter()
    r = evaluate(engine, args.seed, args.scenes, substituted=parts, give_height=args.give_height)
    exact = None if args.no_exact else evaluate(engine, args.seed, args.scenes, exact=True,
                                                  give_height=args.give_height)
    if parts or args.give_height:
        print(f"'weights' column: exact {', '.join(parts) or 'nothing'} substituted; camera height "
              f"{'given (true, measured)' if args.give_height else 'not given'}")
    print(table(r, exact, cfg.weights_manifest, cfg, time.perf_counter() - t))
    plain = plain_exact = None
    if args.plain_scenes:
        plain = evaluate_plain(engine, args.plain_seed, args.plain_scenes)
        plain_exact = None if args.no_exact else evaluate_plain(engine, args.plain_seed, args.plain_scenes, exact=True)
        print()
        print(side_by_side(r, exact, plain, plain_exact))
    if args.json:
        Path(args.json).write_text(json.dumps({"weights": r, "exact_inputs": exact, "plain": plain,
                                               "plain_exact_inputs": plain_exact}, indent=2))
    return r


if __name__ == "__main__":
    main()
