"""Hostile nodes: every bad result is rejected whole, with its reasons recorded, and nothing
of it reaches review."""
from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
from sqlalchemy import select

from coordinator.core.db.models import SweepJob, SweepResult
from coordinator.demo.photos import DEV_ENGINE_BUILD, honest_result
from coordinator.sweeps import coverage
from coordinator.sweeps.validation import validate_result
from tests.support import stop_coordinator
from tests.test_error_shape import assert_error_shape
from tests.test_sweeps_kit import CENTRE, enrolled, node_row, photos, request_sweep, start, sweeps_db  # noqa: F401


def far_away(doc: dict) -> dict:
    doc["facts"][0]["lat"] += 0.01  # about 1.1 km north
    return doc


def absurd(doc: dict) -> dict:
    doc["facts"][0]["value"] = {"widthM": 400.0}
    doc["measurements"][0]["roadWidth"]["widthM"] = 0.2
    return doc


def foreign_photo(doc: dict) -> dict:
    doc["facts"][0]["source"] = ["not-a-job-photo"]
    doc["measurements"][0]["photoId"] = "someone-elses-photo"
    return doc


def unknown_build(doc: dict) -> dict:
    doc["engineBuild"] = "sha256:" + "e" * 64
    return doc


def slow_claim(doc: dict) -> dict:
    doc["timings"] = {"fetchS": 100.0, "inferS": 3000.0, "totalS": 3600.0}
    return doc


def bad_schema(doc: dict) -> dict:
    doc["facts"][0]["height_is_lower_bound"] = True
    doc["schemaVersion"] = 7
    return doc


HOSTILE = {
    "facts outside the area": (far_away, "outside the job's area"),
    "absurd values": (absurd, "outside the plausible"),
    "photo ids not in the job": (foreign_photo, "is not a photo of this job"),
    "an unknown engine hash": (unknown_build, "not among the published engine builds"),
    "implausible timings": (slow_claim, "longer than the lease has existed"),
    "a schema violation": (bad_schema, "schema: "),
}


@pytest.mark.parametrize("case", list(HOSTILE))
async def test_a_hostile_result_is_rejected_with_reasons_and_nothing_reaches_review(sweeps_db, photos, case):
    tamper, expected = HOSTILE[case]
    photos.scatter(*CENTRE, radius_m=300, n=5, seed=1)
    await request_sweep(sweeps_db, radius=300)
    (node,) = await enrolled(sweeps_db, trusted=True)
    doc = await node.lease()
    r = await node.submit(doc["lease"]["leaseId"], tamper(node.honest(doc)))
    assert r.status == 422, r.body
    assert_error_shape(r.json(), "invalid_result")
    details = r.json()["error"]["details"]
    assert details["accepted"] is False and details["resultState"] == "invalid"
    assert any(expected in reason for reason in details["reasons"]), details["reasons"]
    async with sweeps_db.services.db.read() as s:
        result = (await s.execute(select(SweepResult))).scalar_one()
        jobs = (await s.execute(select(SweepJob))).scalars().all()
    assert result.state == "invalid" and result.reasons == details["reasons"] and result.body is None
    assert not any(j.state == "in_review" for j in jobs)
    row = await node_row(sweeps_db, node.node_id)
    assert row.trusted is False and row.streak == 0 and row.invalid_total == 1
    assert await node.lease() is None        # never the same job twice to one node
    (other,) = await enrolled(sweeps_db)
    again = await other.lease()              # the job went back to the queue for another node
    assert again is not None and again["job"]["jobId"] == doc["job"]["jobId"]


def unread(doc: dict, job: dict) -> dict:
    """Every photo skipped: the node could not fetch one (a provider's outage)."""
    doc.update(facts=[], measurements=[],
               skipped=[{"photoId": p["id"], "reason": "fetch failed: Cannot connect to host 127.0.0.1:41433"}
                        for p in job["photos"]])
    doc["timings"]["inferS"] = 0.0
    return doc


async def test_a_result_that_read_no_photo_goes_no_further_and_blames_no_node(sweeps_db, photos):
    """It says nothing of the ground: approved, it would have covered the job's cells as swept
    with imagery and no facts. Counted against the job as an invalid result is (by trust)."""
    photos.scatter(*CENTRE, radius_m=300, n=5, seed=1)
    await request_sweep(sweeps_db, radius=300)
    (node,) = await enrolled(sweeps_db, trusted=True)
    doc = await node.lease()
    r = await node.submit(doc["lease"]["leaseId"], unread(node.honest(doc), doc["job"]))
    assert r.status == 422, r.body
    details = r.json()["error"]["details"]
    assert details["accepted"] is False and details["resultState"] == "unread"
    assert "none of the job's 5 photos was read (the first: fetch failed" in details["reasons"][0]
    async with sweeps_db.services.db.read() as s:
        result = (await s.execute(select(SweepResult))).scalar_one()
        job = (await s.execute(select(SweepJob))).scalar_one()
    assert result.state == "unread" and job.state == "queued" and job.failures == 1
    row = await node_row(sweeps_db, node.node_id)
    assert row.trusted is True and row.invalid_total == 0          # a provider's outage is not the node's

    (fresh,) = await enrolled(sweeps_db)          # untrusted: its empty results do not park the job
    doc = await fresh.lease()
    r = await fresh.submit(doc["lease"]["leaseId"], unread(fresh.honest(doc), doc["job"]))
    assert r.status == 422 and r.json()["error"]["details"]["resultState"] == "unread"
    async with sweeps_db.services.db.read() as s:
        job = (await s.execute(select(SweepJob))).scalar_one()
    assert job.state == "queued" and job.failures == 1


async def test_an_oversized_body_is_refused_unkept_and_recorded(db_url, photos):
    photos.scatter(*CENTRE, radius_m=300, n=5, seed=1)
    c = await start(db_url, photos, result_max_bytes=4096)
    try:
        await request_sweep(c, radius=300)
        (node,) = await enrolled(c, trusted=True)
        doc = await node.lease()
        body = node.honest(doc)
        body["device"] = "x" * 1_000_000       # streams in many chunks; none past the limit is kept
        r = await node.submit(doc["lease"]["leaseId"], body)
        assert r.status == 413
        assert_error_shape(r.json(), "payload_too_large")
        assert "over the limit" in r.json()["error"]["details"]["reasons"][0]
        assert "body: 100" in r.json()["error"]["details"]["reasons"][0]   # its size as it arrived: ~1 MB
        async with c.services.db.read() as s:
            result = (await s.execute(select(SweepResult))).scalar_one()
        assert result.state == "invalid" and result.body is None
    finally:
        await stop_coordinator(c)


async def test_a_result_for_another_job_or_node_is_rejected(sweeps_db, photos):
    photos.scatter(*CENTRE, radius_m=300, n=60, seed=1)     # several jobs of at most 20 photos
    await request_sweep(sweeps_db, radius=300)
    a, b = await enrolled(sweeps_db, 2, trusted=True)
    doc_a = await a.lease()
    doc_b = await b.lease()
    forged = honest_result(doc_b["job"], b.node_id)      # b's job and b's id, sent on a's lease
    r = await a.submit(doc_a["lease"]["leaseId"], forged)
    reasons = r.json()["error"]["details"]["reasons"]
    assert r.status == 422
    assert any(x.startswith("jobId:") for x in reasons) and any(x.startswith("nodeId:") for x in reasons)
    r = await a.submit(doc_b["lease"]["leaseId"], forged)   # someone else's lease
    assert r.status == 404


# ---- the validator itself, without HTTP ------------------------------------

def job_row(n_photos: int = 3):
    cells = sorted(coverage.circle_cells(CENTRE[0], CENTRE[1], 150))
    from coordinator.sweeps.jobs import _plan
    from sweep_engine.schema import PhotoRef
    photos = []
    for i in range(n_photos):
        la, lo = coverage.offset(CENTRE[0], CENTRE[1], 10 * i, 5 * i)
        photos.append(PhotoRef(id=f"p{i}", lon=lo, lat=la, captured_at="2026-06-01T08:00:00+00:00", width=256,
                               height=192, url=f"http://127.0.0.1:9/p{i}.jpg", license="CC0-1.0",
                               provider="test"))
    plan = _plan(cells, photos)
    return SimpleNamespace(id=7, area=plan.area, center_lat=plan.center_lat, center_lon=plan.center_lon,
                           photos=[p.to_dict() for p in photos])


SETTINGS = SimpleNamespace(engine_builds=DEV_ENGINE_BUILD, fact_margin_m=25.0, object_margin_m=150.0, demo=False,
                           manifests_dir="")      # no published manifests: only the configured build
NOW = datetime(2026, 11, 22, tzinfo=timezone.utc)


def check(doc: dict, job=None) -> list[str]:
    job = job or job_row()
    _, reasons = validate_result(json.dumps(doc).encode(), job, "nd_x", NOW - timedelta(seconds=30), NOW, SETTINGS)
    return reasons


def wire_job(job) -> dict:
    return {"jobId": f"job-{job.id}", "photos": job.photos}


def test_an_honest_result_passes_every_check():
    job = job_row()
    assert check(honest_result(wire_job(job), "nd_x", elapsed_s=2.0), job) == []


def test_a_fact_just_outside_the_area_passes_within_the_margin_and_fails_beyond_it():
    job = job_row()
    doc = honest_result(wire_job(job), "nd_x", elapsed_s=2.0)
    from shapely.geometry import shape
    west = min(x for x, _ in shape(job.area).exterior.coords)
    lat = CENTRE[0]
    doc["facts"][0]["lon"], doc["facts"][0]["lat"] = west - 10 / 73_000, lat   # ~10 m outside
    assert check(copy.deepcopy(doc), job) == []
    doc["facts"][0]["lon"] = west - 60 / 73_000                                 # ~60 m outside
    assert any("outside the job's area" in r for r in check(doc, job))


def test_every_job_photo_must_be_accounted_for_once():
    job = job_row()
    doc = honest_result(wire_job(job), "nd_x", elapsed_s=2.0)
    doc["measurements"].pop()
    assert any("neither measured nor skipped" in r for r in check(copy.deepcopy(doc), job))
    doc["skipped"] = [{"photoId": "p2", "reason": "fetch failed: HTTP 404"}]
    assert check(copy.deepcopy(doc), job) == []
    doc["skipped"].append({"photoId": "p0", "reason": "twice"})
    assert any("more than once" in r for r in check(doc, job))


def test_all_reasons_are_given_at_once():
    job = job_row()
    doc = absurd(foreign_photo(unknown_build(honest_result(wire_job(job), "nd_x", elapsed_s=2.0))))
    reasons = check(doc, job)
    assert len(reasons) >= 4


def test_measured_photos_need_inference_time():
    job = job_row()
    doc = honest_result(wire_job(job), "nd_x", elapsed_s=2.0)
    doc["timings"] = {"fetchS": 1.0, "inferS": 0.0, "totalS": 1.0}
    assert any("no inference time" in r for r in check(doc, job))
    doc["timings"] = {"fetchS": 1.0, "inferS": 2.0, "totalS": 1.5}
    assert any("shorter than a stage" in r for r in check(doc, job))


def test_the_distance_outside_a_job_area_is_shapelys():
    """Validation measures how far a result's points lie outside a job's area in one
    vectorised call; it gives what ``Polygon.distance`` does point by point, inside, on the
    edge and beyond."""
    import random
    from shapely.geometry import Point, Polygon
    from coordinator.sweeps.validation import _Local, _outside_m
    rnd = random.Random(3)
    for n_cells in (1, 4, 12):
        cells = sorted(coverage.circle_cells(CENTRE[0], CENTRE[1], 400))[:n_cells]
        from coordinator.sweeps.jobs import _plan
        plan = _plan(cells, [])
        local = _Local(plan.center_lat, plan.center_lon)
        ring = [local.xy(x, y) for x, y in plan.area["coordinates"][0]]
        theirs = Polygon(ring)
        points = ring + [((a[0] + b[0]) / 2, (a[1] + b[1]) / 2) for a, b in zip(ring, ring[1:])]
        points += [(rnd.uniform(-600, 600), rnd.uniform(-600, 600)) for _ in range(500)]
        ours = _outside_m(theirs, points)
        for (x, y), d in zip(points, ours, strict=True):
            assert d == pytest.approx(theirs.distance(Point(x, y)), abs=1e-6)
        assert _outside_m(Polygon(ring[:-1]), [ring[0]]) == [0.0]   # an open ring is closed
        assert _outside_m(theirs, []) == []



@pytest.mark.parametrize("text", ["NaN", "1e400", "123456789012345678901234567890", '"\\ud800"'])
def test_a_body_orjson_would_read_differently_is_judged_as_the_json_module_judges_it(text, monkeypatch):
    """Validation reads bodies with orjson where it agrees with the standard library, and
    with ``json`` otherwise: a huge integer, NaN or a lone surrogate gets the same verdict."""
    from coordinator.sweeps import validation
    from sweep_engine.schema import Result
    job = job_row()
    doc = json.dumps(honest_result(wire_job(job), "nd_x", elapsed_s=2.0))
    bodies = [doc.replace('"device": "cpu (simulated)"', f'"device": {text}'),
              doc.replace('"fetchS": 1.0', f'"fetchS": {text}'),
              doc.replace('"evidence": {}', f'"evidence": {{"n": {text}}}')]
    for body in bodies:
        assert body != doc
        raw = body.encode("utf-8", "surrogatepass")
        ours = validate_result(raw, job, "nd_x", NOW - timedelta(seconds=30), NOW, SETTINGS)
        with monkeypatch.context() as m:
            m.setattr(validation, "_parse", Result.from_json)
            theirs = validate_result(raw, job, "nd_x", NOW - timedelta(seconds=30), NOW, SETTINGS)
        assert repr(ours) == repr(theirs)
