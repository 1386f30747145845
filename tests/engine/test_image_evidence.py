"""Image-space evidence on the per-photo measurement: each object's box and the rows the road width was
read on, in the photo's own pixels, so that a reviewer sees on the photo what the engine measured.

Fed with a synthetic frame's exact depth, masks and boxes, the evidence must be exactly the frame's
(scaled to the photo's listed size); the wire form must refuse malformed evidence and keep documents
without it unchanged.
"""
from __future__ import annotations

import copy
import functools
import json

import numpy as np
import pytest

from sweep_engine import schema
from sweep_engine.geometry import ROAD_ROWS_SENT, measure_photo, to_schema
from sweep_engine.labels import SEG, SIZE_PRIORS
from sweep_engine.measure import carriageway
from sweep_engine.synth import render, street_scene
from sweep_engine.schema import SchemaError
from tests.engine.test_schema import result


@functools.cache
def _photo(seed: int, cut: bool = False):
    """A synthetic photo measured from its exact depth, masks and boxes; with ``cut``, one more car
    detection cut by the frame's left edge."""
    f = render(street_scene(seed, width=256, height=192, n_vehicles=4))
    dets = f.detections()
    if cut:
        label, (x0, y0, x1, y1), score = next(d for d in dets if d[0] == "car")
        dets.append((label, (0.0, y0, x1, y1), score))
    pm, evidence = measure_photo("p1", "2025-06-01T10:00:00Z", f.camera, f.depth, f.seg, dets, image=f.rgb)
    return f, pm, evidence


def _measured(seed: int, size: tuple[int, int] | None, cut: bool = False):
    f, pm, evidence = _photo(seed, cut)
    return f, pm, to_schema(pm, evidence, image_size=size)


@pytest.mark.parametrize("size", [(256, 192), (1024, 768), (640, 480)])
def test_object_boxes_are_the_detections_in_the_photos_pixels(size):
    sx, sy = size[0] / 256, size[1] / 192
    seen = 0
    for seed in range(4):
        f, pm, m = _measured(seed, size)
        truth = {(o.label, round(o.distance_m, 3)): b for o, b in
                 ((o, o.box) for o in pm.objects)}
        assert m.objects
        for o in m.objects:
            x0, y0, x1, y1 = truth[(o.label, o.distance_m)]
            assert o.box == pytest.approx([x0 * sx, y0 * sy, x1 * sx, y1 * sy], abs=0.051)
            assert 0 <= o.box[0] <= o.box[2] <= size[0] and 0 <= o.box[1] <= o.box[3] <= size[1]
            seen += 1
        # and every detection the geometry measured is on the wire with its box
        assert sorted(tuple(o.box) for o in m.objects) == sorted(
            tuple(round(c * s, 1) for c, s in zip(b.box, (sx, sy, sx, sy))) for b in pm.objects)
    assert seen >= 8


def test_road_rows_lie_on_the_carriageway_edges_the_width_was_read_from():
    checked = 0
    for seed in range(4):
        f, pm, m = _measured(seed, (512, 384))
        if m.road_width is None:
            continue
        rows = m.road_width.rows
        assert rows and len(rows) == min(pm.road.samples, ROAD_ROWS_SENT) and m.road_width.samples == pm.road.samples
        road = carriageway(f.seg)
        for r in rows:
            y = int(r.v / 2)                      # the frame row (the photo is twice the frame)
            assert r.v == pytest.approx((y + 0.5) * 2)
            xs = np.flatnonzero(road[y])
            # the row's ends are where the carriageway ends: at a kerb, sidewalk or verge on at least one side
            # (the edge read on this row), at that or the frame's edge on the other
            assert r.u_left == pytest.approx(xs[0] * 2) and r.u_right == pytest.approx((xs[-1] + 1) * 2)
            ends = [xs[0] > 0 and f.seg[y, xs[0] - 1] != SEG["road"],
                    xs[-1] + 1 < road.shape[1] and f.seg[y, xs[-1] + 1] != SEG["road"]]
            assert any(ends) and all(e or x in (0, road.shape[1] - 1) for e, x in zip(ends, (xs[0], xs[-1])))
        vs = [r.v for r in rows]
        assert vs == sorted(vs) and vs[0] < vs[-1]     # from the farthest row measured to the nearest
        checked += 1
    assert checked >= 3


def test_the_calibrations_vehicles_are_marked_and_cut_ones_are_not():
    marked = cut = 0
    for seed in range(4):
        f, pm, m = _measured(seed, (256, 192), cut=True)
        for o in m.objects:
            if o.label not in SIZE_PRIORS:
                assert o.used_for_scale is None and "usedForScale" not in o.to_dict()
                continue
            assert o.used_for_scale is not None
            at_edge = o.box[0] <= 0.5 or o.box[1] <= 0.5 or o.box[2] >= 255.5 or o.box[3] >= 191.5
            if at_edge:               # a vehicle cut by the frame has no height to calibrate on
                assert o.used_for_scale is False
                cut += 1
            marked += o.used_for_scale
        assert sum(bool(o.used_for_scale) for o in m.objects) == len(pm.scale_boxes)
    assert marked >= 4 and cut >= 1


def test_without_the_photos_size_no_image_evidence_is_sent():
    _, _, m = _measured(1, None)
    d = m.to_dict()
    assert all("box" not in o for o in d["objects"])
    assert d["roadWidth"] is None or "rows" not in d["roadWidth"]


def with_evidence() -> dict:
    d = result()
    m = d["measurements"][0]
    m["roadWidth"]["rows"] = [{"v": 120.5, "uLeft": 10.0, "uRight": 240.0}, {"v": 150.5, "uLeft": 0.0, "uRight": 256.0}]
    m["objects"][0]["box"] = [100.0, 20.0, 104.5, 130.0]
    m["objects"].append({**m["objects"][0], "label": "car", "box": [10, 90, 60, 130], "usedForScale": True})
    return d


def test_evidence_round_trips_and_a_document_without_it_is_unchanged():
    d = with_evidence()
    obj = schema.Result.from_json(json.dumps(d))
    assert json.loads(obj.to_json()) == d
    assert obj.measurements[0].road_width.rows[1] == schema.RoadRow(v=150.5, u_left=0.0, u_right=256.0)
    assert obj.measurements[0].objects[1].used_for_scale is True
    old = result()
    assert json.loads(schema.Result.from_dict(old).to_json()) == old       # no null keys added to old documents
    nulls = copy.deepcopy(old)
    nulls["measurements"][0]["objects"][0].update(box=None, usedForScale=None)
    nulls["measurements"][0]["roadWidth"]["rows"] = None
    assert json.loads(schema.Result.from_dict(nulls).to_json()) == old


@pytest.mark.parametrize("mutate, expected", [
    (lambda m: m["objects"][0].update(box=[1, 2, 3]), "measurements[0].objects[0].box: must be [u0, v0, u1, v1]"),
    (lambda m: m["objects"][0].update(box=[-1, 2, 3, 4]), "measurements[0].objects[0].box: must be [u0, v0, u1, v1]"),
    (lambda m: m["objects"][0].update(box=[1, 2, 3, "4"]), "measurements[0].objects[0].box: must be [u0, v0, u1, v1]"),
    (lambda m: m["objects"][0].update(box=[1, 2, 3, True]), "measurements[0].objects[0].box: must be [u0, v0, u1, v1]"),
    (lambda m: m["objects"][0].update(box=[5, 2, 3, 4]), "measurements[0].objects[0].box: must have u0 <= u1"),
    (lambda m: m["objects"][0].update(box={"u0": 1}), "measurements[0].objects[0].box: must be [u0, v0, u1, v1]"),
    (lambda m: m["objects"][1].update(usedForScale="yes"), "measurements[0].objects[1].usedForScale: must be true or false"),
    (lambda m: m["roadWidth"].update(rows="all"), "measurements[0].roadWidth.rows: must be a list"),
    (lambda m: m["roadWidth"]["rows"][0].update(uLeft=300), "measurements[0].roadWidth.rows[0].uLeft: must not lie right"),
    (lambda m: m["roadWidth"]["rows"][0].update(v=-1), "measurements[0].roadWidth.rows[0].v: must be within [0, inf]"),
    (lambda m: m["roadWidth"]["rows"][1].update(v=True), "measurements[0].roadWidth.rows[1].v: must be a finite number"),
    (lambda m: m["roadWidth"]["rows"][1].update(uRight=float("inf")),
     "measurements[0].roadWidth.rows[1].uRight: must be a finite number"),
    (lambda m: m["roadWidth"]["rows"][1].update(uLeft=float("nan")),
     "measurements[0].roadWidth.rows[1].uLeft: must be a finite number"),
    (lambda m: m["roadWidth"]["rows"].append([1, 2, 3]), "measurements[0].roadWidth.rows[2]: must be an object"),
    (lambda m: m["roadWidth"]["rows"][0].pop("uRight"), "measurements[0].roadWidth.rows[0].uRight: is required"),
    (lambda m: m["roadWidth"]["rows"][0].update(u_left=3), "measurements[0].roadWidth.rows[0].u_left: unknown field"),
    (lambda m: m["roadWidth"].update(rows=[{"v": 1, "uLeft": 1, "uRight": 2}] * (schema.ROAD_ROWS_MAX + 1)),
     f"measurements[0].roadWidth.rows: must hold at most {schema.ROAD_ROWS_MAX} entries"),
])
def test_malformed_evidence_is_refused_with_its_path(mutate, expected):
    d = with_evidence()
    mutate(d["measurements"][0])
    with pytest.raises(SchemaError) as err:
        schema.Result.from_dict(d)
    assert any(r.startswith(expected) for r in err.value.reasons), err.value.reasons
