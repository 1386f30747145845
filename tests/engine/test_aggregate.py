"""Aggregation across a drive along a synthetic street, fed with exact depth, masks and boxes."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from sweep_engine import schema
from sweep_engine.aggregate import aggregate
from sweep_engine.camera import lonlat_offset
from sweep_engine.geometry import measure_photo, to_schema
from sweep_engine.synth import drive, render, street_scene

T0 = "2025-06-01T10:00:{:02d}Z"


@functools.cache
def drive_frames(seed=3, n=5):
    scene = street_scene(seed, width=320, height=240, road_azimuth_deg=30.0)
    return tuple(render(s) for s in drive(scene, n, spacing_m=3.0))


def measured(frames, assumed_focal=False):
    out = []
    for i, f in enumerate(frames):
        cam = f.camera.with_(focal_basis="assumed") if assumed_focal else f.camera
        pm, ev = measure_photo(f"p{i}", T0.format(i), cam, f.depth, f.seg, f.detections())
        out.append((pm, ev))
    return out


def distance_m(fact, lon, lat):
    e, n = lonlat_offset(lon, lat, fact.lon, fact.lat)
    return float(np.hypot(e, n))


def test_a_pole_seen_from_several_photos_is_one_fact_at_its_place():
    frames = drive_frames()
    facts = aggregate([pm for pm, _ in measured(frames)])
    street = frames[0].scene.street
    poles = [b for b in frames[0].scene.boxes if b.det == "pole"]
    pole_facts = [f for f in facts if f.kind == "poles"]
    assert len(pole_facts) == len(poles)
    for box in poles:
        lon, lat = street.to_lonlat(*box.centre)
        near = min(pole_facts, key=lambda f: distance_m(f, lon, lat))
        assert distance_m(near, lon, lat) < 0.5
        assert len(near.source) >= 2 and near.confidence == "high" and near.basis == "measured"
        assert near.spread["positionM"] < 0.5 and near.spread["widthM"] < 0.2


def test_roadway_fact_carries_the_width_within_one_percent():
    frames = drive_frames()
    facts = aggregate([pm for pm, _ in measured(frames)])
    road = [f for f in facts if f.kind == "roadway"]
    assert road, "the road was measured"
    for f in road:
        assert f.value["widthM"] == pytest.approx(frames[0].scene.street.road_width_m, rel=0.01)
        assert f.unit == "m"


def test_facts_are_valid_wire_facts_within_physical_bounds_and_sourced_from_the_photos():
    facts = aggregate([pm for pm, _ in measured(drive_frames())])
    kinds = {f.kind for f in facts}
    assert {"roadway", "poles", "signage", "kerbs"} <= kinds
    for f in facts:
        schema.validate(f)
        assert schema.bound_violations(f) == []
        assert set(f.source) <= {f"p{i}" for i in range(5)}
        assert f.timestamp == max(T0.format(int(s[1:])) for s in f.source)


def test_a_height_cut_in_every_view_is_not_reported():
    frames = drive_frames()
    pms = [pm for pm, _ in measured(frames)]
    for pm in pms:
        for o in pm.objects:
            if o.label == "pole":
                o.height_is_lower_bound = True
    for f in aggregate(pms):
        if f.kind == "poles":
            assert "heightM" not in (f.value or {})


def test_without_a_scale_to_trust_facts_carry_no_value():
    pms = [pm for pm, _ in measured(drive_frames())]
    for pm in pms:
        pm.scale_trust = "unknown"
    facts = aggregate(pms)
    assert facts and all(f.value is None and f.confidence == "unknown" for f in facts)


def test_a_single_sighting_is_low_confidence():
    pms = [pm for pm, _ in measured(drive_frames()[:1])]
    facts = aggregate(pms)
    assert facts and all(f.confidence in ("low", "unknown") for f in facts)


def test_measurements_convert_to_valid_wire_measurements():
    for pm, ev in measured(drive_frames()[:2], assumed_focal=True):
        m = to_schema(pm, ev)
        schema.Measurement.from_json(m.to_json())
        assert m.calibration.scale_trust in ("high", "low")
        assert m.calibration.evidence["vehiclesUsed"] >= 1


def test_capture_times_with_and_without_an_offset_make_one_utc_timestamp():
    """The wire schema admits a capture time without an offset, read as UTC as the coordinator
    reads it; a drive mixing the two made the engine raise (naive against aware) on every node,
    and a time without one was served as it came, with no Z."""
    frames = drive_frames()
    times = ["2025-06-01T18:00:00", "2025-06-01T10:00:00Z", "2025-06-01T12:00:00+05:00", "2025-06-01T10:00:03Z",
             "2025-06-01T09:00:00"]
    photos = []
    for i, (f, t) in enumerate(zip(frames, times)):
        pm, _ = measure_photo(f"p{i}", t, f.camera, f.depth, f.seg, f.detections())
        photos.append(pm)
    facts = aggregate(photos)
    assert facts and all(f.timestamp.endswith("Z") for f in facts)
    assert any(f.timestamp == "2025-06-01T18:00:00Z" for f in facts)      # the latest, read as UTC
