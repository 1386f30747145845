"""The wire schema: round trips, and every reason a document is refused."""
from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from sweep_engine import schema
from sweep_engine.schema import SchemaError


def photo(**over):
    d = {"id": "p1", "lon": 13.4, "lat": 52.5, "heading": 90.0, "pitch": 0.0,
         "capturedAt": "2025-06-01T10:00:00Z", "cameraMake": "Canon", "cameraModel": "EOS 80D",
         "focalMm": 18.0, "sensorWidthMm": 22.3, "width": 256, "height": 192,
         "url": "http://127.0.0.1:9/p1.jpg", "license": "CC-BY-SA-4.0", "provider": "fake"}
    d.update(over)
    return d


def job(**over):
    ring = [[13.39, 52.49], [13.41, 52.49], [13.41, 52.51], [13.39, 52.51], [13.39, 52.49]]
    d = {"schemaVersion": 1, "jobId": "j1", "sweepId": "s1",
         "area": {"type": "Polygon", "coordinates": [ring]},
         "centerLon": 13.4, "centerLat": 52.5, "radiusM": 450.0, "photos": [photo()],
         "params": {"cameraHeightM": 1.65}}
    d.update(over)
    return d


def fact(**over):
    d = {"kind": "roadway", "lon": 13.4, "lat": 52.5, "value": {"widthM": 7.4}, "unit": "m",
         "confidence": "high", "basis": "measured", "source": ["p1"], "timestamp": "2025-06-01T10:00:00Z",
         "spread": {"positionM": 0.4, "widthM": 0.1}}
    d.update(over)
    return d


def result(**over):
    d = {"schemaVersion": 1, "jobId": "j1", "nodeId": "n1", "engineVersion": "0.1.0",
         "engineBuild": "abc123", "facts": [fact()],
         "measurements": [{
             "photoId": "p1",
             "roadWidth": {"widthM": 7.4, "method": "road-mask rows", "spreadM": 0.1, "samples": 5},
             "calibration": {"scaleTrust": "high", "focalPx": 220.0, "focalBasis": "measured",
                             "cameraHeightM": 1.65, "pitchDeg": 0.0,
                             "evidence": {"vehiclesUsed": 2, "disagreement": 0.02}},
             "objects": [{"label": "pole", "distanceM": 12.0, "size": {"widthM": 0.3, "heightM": 8.0},
                          "bearingDeg": 95.0, "lon": 13.4001, "lat": 52.5, "heightIsLowerBound": True,
                          "widthIsLowerBound": False, "score": 0.9}]}],
         "timings": {"fetchS": 0.1, "inferS": 0.5, "totalS": 0.7}, "device": "cpu",
         "skipped": [{"photoId": "p2", "reason": "fetch failed: HTTP 404"}]}
    d.update(over)
    return d


def reasons(cls, data):
    with pytest.raises(SchemaError) as err:
        cls.from_dict(data)
    return err.value.reasons


def test_job_and_result_round_trip_through_json_unchanged():
    for cls, data in ((schema.Job, job()), (schema.Result, result())):
        obj = cls.from_json(json.dumps(data))
        assert json.loads(obj.to_json()) == data
        assert cls.from_json(obj.to_json()) == obj


def test_wire_names_are_camel_case():
    text = schema.Result.from_dict(result()).to_json()
    for name in ("heightIsLowerBound", "scaleTrust", "engineBuild", "schemaVersion", "photoId"):
        assert f'"{name}"' in text
    assert "_" not in "".join(k for k in json.loads(text))


def test_optional_camera_fields_may_be_null():
    p = schema.PhotoRef.from_dict(photo(heading=None, pitch=None, focalMm=None, sensorWidthMm=None,
                                        cameraMake=None, cameraModel=None))
    assert p.heading is None and p.focal_mm is None


def test_all_faults_are_reported_at_once_with_paths():
    bad = job(photos=[photo(lat=91), photo(id="p2", lon="east")])
    r = reasons(schema.Job, bad)
    assert "photos[0].lat: must be within [-90, 90]" in r
    assert "photos[1].lon: must be a finite number" in r


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d.pop("jobId"), "jobId: is required"),
    (lambda d: d.update(schemaVersion=2), "schemaVersion: is 2; this engine speaks version 1"),
    (lambda d: d.update(job_id="x"), "job_id: unknown field"),
    (lambda d: d.update(area={"type": "Point", "coordinates": [1, 2]}), "area: must be a GeoJSON Polygon"),
    (lambda d: d["area"]["coordinates"][0].pop(), "area: must be a GeoJSON Polygon"),
    (lambda d: d.update(radiusM=0), "radiusM: must be within [1, 50000]"),
    (lambda d: d.update(photos="p1"), "photos: must be a list"),
    (lambda d: d.update(photos=[photo(), photo()]), "photos: photo ids must be unique"),
    (lambda d: d["photos"][0].update(url="file:///etc/passwd"), "photos[0].url: must be an http(s) URL"),
    (lambda d: d["photos"][0].update(heading=361), "photos[0].heading: must be within [0, 360]"),
    (lambda d: d["photos"][0].update(width=0), "photos[0].width: must be an integer >= 1"),
    (lambda d: d["photos"][0].update(width=True), "photos[0].width: must be an integer >= 1"),
    (lambda d: d["photos"][0].update(capturedAt="yesterday"), "photos[0].capturedAt: must be an ISO 8601 time"),
    (lambda d: d["photos"][0].update(license=""), "photos[0].license: must be non-empty text"),
    (lambda d: d.update(params=[1]), "params: must be an object"),
])
def test_job_rejections(mutate, expected):
    data = job()
    mutate(data)
    assert any(r.startswith(expected) for r in reasons(schema.Job, data)), reasons(schema.Job, data)


def _fact_mut(**over):
    return lambda d: d["facts"][0].update(**over)


def _obj_mut(**over):
    return lambda d: d["measurements"][0]["objects"][0].update(**over)


@pytest.mark.parametrize("mutate, expected", [
    (_fact_mut(kind="trees"), "facts[0].kind: must be one of roadway, kerbs, gates"),
    (_fact_mut(confidence="certain"), "facts[0].confidence: must be one of high, low, unknown"),
    (_fact_mut(basis="guessed"), "facts[0].basis: must be one of measured, modelled, assumed"),
    (_fact_mut(unit='m<img src="http://x/beacon">'), "facts[0].unit: must be one of m"),
    (_fact_mut(value=None), "facts[0].value: is null, so confidence must be 'unknown'"),
    (_fact_mut(confidence="unknown"), "facts[0].value: must be null when confidence is 'unknown'"),
    (_fact_mut(value={"depthM": 3}), "facts[0].value.depthM: unknown field"),
    (_fact_mut(value={}), "facts[0].value: must name at least one quantity"),
    (_fact_mut(value={"widthM": "wide"}), "facts[0].value.widthM: must be a finite number"),
    (_fact_mut(value="wide"), "facts[0].value: must be an object, a finite number or null"),
    (_fact_mut(source=[]), "facts[0].source: must list the photo ids"),
    (_fact_mut(timestamp="noon"), "facts[0].timestamp: must be an ISO 8601 time"),
    (lambda d: d["facts"][0].pop("value"), "facts[0].value: is required"),
    (_fact_mut(spread={"positionM": -1}), "facts[0].spread.positionM: must be within [0, inf]"),
    (_fact_mut(spread={"heightM": 1}), "facts[0].spread.heightM: unknown field"),
    (_obj_mut(heightIsLowerBound="yes"), "measurements[0].objects[0].heightIsLowerBound: must be true or false"),
    (_obj_mut(bearingDeg=400), "measurements[0].objects[0].bearingDeg: must be within [0, 360]"),
    (_obj_mut(size={"widthM": 1}), "measurements[0].objects[0].size.heightM: is required"),
    (lambda d: d["measurements"][0]["calibration"].update(scaleTrust="medium"),
     "measurements[0].calibration.scaleTrust: must be one of high, low, unknown"),
    (lambda d: d["measurements"][0].pop("calibration"), "measurements[0].calibration: is required"),
    (lambda d: d["measurements"][0]["roadWidth"].update(samples=0),
     "measurements[0].roadWidth.samples: must be an integer >= 1"),
    (lambda d: d["timings"].update(totalS=-1), "timings.totalS: must be within [0, inf]"),
    (lambda d: d.pop("engineBuild"), "engineBuild: is required"),
    (lambda d: d.update(timings=3), "timings: must be an object"),
    (lambda d: d["skipped"][0].pop("reason"), "skipped[0].reason: is required"),
])
def test_result_rejections(mutate, expected):
    data = copy.deepcopy(result())
    mutate(data)
    got = reasons(schema.Result, data)
    assert any(r.startswith(expected) for r in got), got


def test_unknown_fact_without_value_is_accepted():
    schema.Result.from_dict(result(facts=[fact(value=None, confidence="unknown")]))


def test_not_json_and_not_object_are_refused():
    with pytest.raises(SchemaError, match="not JSON"):
        schema.Result.from_json("{")
    assert reasons(schema.Result, [])[0] == "(document): must be an object"


def test_validate_checks_python_built_objects():
    r = schema.Result.from_dict(result())
    schema.validate(r)
    r.facts[0].kind = "trees"
    with pytest.raises(SchemaError, match="kind"):
        schema.validate(r)


def test_physical_bounds_cover_every_kind_and_flag_implausible_values():
    assert set(schema.PHYSICAL_BOUNDS) == set(schema.FACT_KINDS) == set(schema.PRIMARY_KEY)
    assert len(schema.FACT_KINDS) == 10
    assert schema.PHYSICAL_BOUNDS["roadway"]["widthM"] == (1.5, 60.0)
    assert schema.PHYSICAL_BOUNDS["poles"]["heightM"] == (0.5, 40.0)
    ok = schema.Fact.from_dict(fact())
    assert schema.bound_violations(ok) == []
    wide = schema.Fact.from_dict(fact(value={"widthM": 80.0}))
    assert schema.bound_violations(wide) == ["roadway.widthM = 80 is outside the plausible [1.5, 60]"]
    tall = schema.Fact.from_dict(fact(kind="poles", value=55.0))
    assert schema.bound_violations(tall) == ["poles.heightM = 55 is outside the plausible [0.5, 40]"]


def test_schema_module_imports_neither_torch_nor_numpy():
    code = ("import sys; import sweep_engine.schema; "
            "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
