"""POST /earth/sweep-request and GET /earth/sweep-queue: the sweep state table of SPEC.md
(unswept -> queued -> covered; covered -> queued:false with a reason), merging, photo discovery."""
from __future__ import annotations

import asyncio

from sqlalchemy import func, select

from coordinator.core.db.models import CoverageCell, SweepJob, SweepRequest, SweepTransition
from coordinator.sweeps import coverage
from coordinator.sweeps.requests import requester_hash
from coordinator.sweeps.service import sweeps_of
from tests.test_error_shape import assert_error_shape
from tests.test_sweeps_kit import CENTRE, photos, request_sweep, sweeps_db, sweeps_sqlite  # noqa: F401


async def count(c, model) -> int:
    async with c.services.db.read() as s:
        return (await s.execute(select(func.count()).select_from(model))).scalar_one()


async def test_unswept_ground_is_queued_and_visible_in_the_public_queue(sweeps_db, photos):
    photos.scatter(*CENTRE, radius_m=400, n=30, seed=1)
    r = await request_sweep(sweeps_db)
    assert r.status == 200, r.body
    body = r.json()
    assert body["queued"] is True and body["merged"] is False
    assert body["caveats"] and list(body)[0] == "caveats"
    req = body["request"]
    assert req["state"] == "queued" and req["radiusM"] == 450
    assert req["center"] == {"type": "Point", "coordinates": [CENTRE[1], CENTRE[0]]}
    assert req["progress"] == {"jobsDone": 0, "jobsInReview": 0, "jobsTotal": body["jobs"], "jobsFailed": 0}
    assert body["photos"] == 30 and body["jobs"] >= 2

    q = await sweeps_db.get("/earth/sweep-queue")
    assert q.status == 200
    listed = q.json()["requests"]
    assert [x["id"] for x in listed] == [req["id"]]
    assert set(listed[0]) == {"id", "center", "radiusM", "state", "requestedAt", "updatedAt", "timesRequested",
                              "progress"}
    assert b"127.0.0.1" not in q.body and b"requester" not in q.body


    async with sweeps_db.services.db.read() as s:
        kept = (await s.execute(select(SweepRequest.requester_hash))).scalar_one()
    assert kept == requester_hash("127.0.0.1", sweeps_db.services.settings.requester_hash_key)


def test_the_requester_is_kept_as_a_keyed_hash_that_no_address_list_undoes():
    import hashlib

    ip = "203.0.113.7"
    unkeyed = {hashlib.sha256(x.encode()).hexdigest() for x in (ip, f"sis-requester:{ip}")}
    assert requester_hash(ip) not in unkeyed and len(requester_hash(ip)) == 64
    assert requester_hash(ip) == requester_hash(ip)                     # comparable within a run
    assert requester_hash(ip, "k1") == requester_hash(ip, "k1") != requester_hash(ip, "k2")
    assert requester_hash("203.0.113.8", "k1") != requester_hash(ip, "k1")
    assert requester_hash(None) is None and requester_hash("", "k1") is None


async def test_queued_ground_becomes_covered_through_mark_cells_covered(sweeps_db, photos):
    """queued -> covered is driven here through coverage.mark_cells_covered, the function the
    review workflow calls when it approves results."""
    photos.scatter(*CENTRE, radius_m=400, n=20, seed=2)
    req = (await request_sweep(sweeps_db)).json()["request"]
    sw = sweeps_of(sweeps_db.services)
    async with sw.db.read() as s:
        job_cells = [c for j in (await s.execute(select(SweepJob))).scalars() for c in j.cells]
    half = job_cells[: len(job_cells) // 2]
    async with sw.db.write() as s:
        moved = await coverage.mark_cells_covered(s, [int(c, 16) for c in half], actor="reviewer:test",
                                                  reason="approved job")
    assert moved == []  # half the ground is not enough
    async with sw.db.write() as s:
        moved = await coverage.mark_cells_covered(s, [int(c, 16) for c in job_cells], actor="reviewer:test",
                                                  reason="approved job")
    assert moved == [req["id"]]
    q = (await sweeps_db.get("/earth/sweep-queue?state=covered")).json()
    assert [x["id"] for x in q["requests"]] == [req["id"]] and q["requests"][0]["state"] == "covered"
    assert (await sweeps_db.get("/earth/sweep-queue")).json()["requests"] == []
    async with sw.db.read() as s:
        log = (await s.execute(select(SweepTransition).where(SweepTransition.subject == "request",
                                                             SweepTransition.subject_id == req["id"])
                               .order_by(SweepTransition.id))).scalars().all()
    assert [(t.from_state, t.to_state) for t in log] == [(None, "queued"), ("queued", "covered")]
    assert log[-1].actor == "reviewer:test"

    again = await request_sweep(sweeps_db)
    assert again.status == 200
    body = again.json()
    assert body["queued"] is False and body["reasonCode"] == "covered" and "covered" in body["reason"]
    assert await count(sweeps_db, SweepRequest) == 1


async def test_covered_ground_answers_queued_false_with_a_reason_without_asking_the_provider(sweeps_db, photos):
    sw = sweeps_of(sweeps_db.services)
    cells = coverage.circle_cells(CENTRE[0], CENTRE[1], 300)
    async with sw.db.write() as s:
        await coverage.mark_cells_covered(s, cells, actor="reviewer:test", reason="approved")
    r = await request_sweep(sweeps_db, radius=300)
    body = r.json()
    assert body["queued"] is False and body["reasonCode"] == "covered"
    assert body["request"] is None and body["ground"]["coveredCells"] == body["ground"]["cells"] == len(cells)
    assert photos.searches == 0
    assert await count(sweeps_db, SweepRequest) == 0


async def test_a_request_over_queued_ground_merges_instead_of_doubling_work(sweeps_db, photos):
    photos.scatter(*CENTRE, radius_m=500, n=40, seed=3)
    first = (await request_sweep(sweeps_db, radius=500)).json()
    jobs = await count(sweeps_db, SweepJob)
    second = (await request_sweep(sweeps_db, radius=300)).json()
    assert second["queued"] is True and second["merged"] is True
    assert second["request"]["id"] == first["request"]["id"]
    assert second["request"]["timesRequested"] == 2
    assert await count(sweeps_db, SweepJob) == jobs and await count(sweeps_db, SweepRequest) == 1


async def test_overlapping_ground_queues_only_its_new_cells(sweeps_db, photos):
    photos.scatter(*CENTRE, radius_m=900, n=150, seed=4)
    first = (await request_sweep(sweeps_db, radius=300)).json()
    east = coverage.offset(CENTRE[0], CENTRE[1], 400, 0)
    second = (await request_sweep(sweeps_db, east[0], east[1], 300)).json()
    assert second["queued"] is True and second["merged"] is False
    assert second["request"]["id"] != first["request"]["id"]
    async with sweeps_db.services.db.read() as s:
        owners = (await s.execute(select(CoverageCell.cell, CoverageCell.request_id))).all()
    assert len({cell for cell, _ in owners}) == len(owners)  # each cell queued once
    assert any("already queued" in c for c in second["caveats"])


async def test_concurrent_requests_for_the_same_ground_make_one_request(sweeps_db, photos):
    photos.scatter(*CENTRE, radius_m=450, n=40, seed=5)
    answers = await asyncio.gather(*(request_sweep(sweeps_db) for _ in range(6)))
    bodies = [a.json() for a in answers]
    assert all(a.status == 200 for a in answers)
    assert all(b["queued"] for b in bodies)
    assert len({b["request"]["id"] for b in bodies}) == 1
    assert sum(not b["merged"] for b in bodies) == 1
    assert await count(sweeps_db, SweepRequest) == 1


async def test_parameters_travel_in_the_query_or_a_json_body(sweeps_sqlite, photos):
    photos.scatter(*CENTRE, radius_m=450, n=10, seed=6)
    r = await sweeps_sqlite.post(f"/earth/sweep-request?lat={CENTRE[0]}&lon={CENTRE[1]}")
    assert r.status == 200 and r.json()["request"]["radiusM"] == 450  # the default
    r2 = await sweeps_sqlite.post("/earth/sweep-request", {"lat": CENTRE[0], "lon": CENTRE[1], "radius": 450})
    assert r2.status == 200 and r2.json()["merged"] is True
    for bad in (199, 1001):
        r3 = await sweeps_sqlite.post("/earth/sweep-request", {"lat": 1, "lon": 1, "radius": bad})
        assert r3.status == 400
        assert_error_shape(r3.json(), "bad_parameter")
    r4 = await sweeps_sqlite.get(f"/earth/sweep-request?lat={CENTRE[0]}&lon={CENTRE[1]}")
    assert r4.status == 405


async def test_ground_with_no_photos_is_not_queued_and_says_why(sweeps_db, photos):
    r = (await request_sweep(sweeps_db, 10.0, 10.0)).json()
    assert r["queued"] is False and r["reasonCode"] == "no_photos"
    assert await count(sweeps_db, SweepRequest) == 0


async def test_an_unreachable_provider_gives_a_degraded_answer_and_queues_nothing(sweeps_sqlite, photos):
    photos.scatter(*CENTRE, radius_m=450, n=10, seed=7)
    photos.fail_status = 502
    r = await request_sweep(sweeps_sqlite)
    assert r.status == 200 and r.headers["Cache-Control"] == "no-store"
    body = r.json()
    assert body["queued"] is False and body["reasonCode"] == "provider_unavailable"
    assert body["health"]["sourcesQueried"] == 1 and body["health"]["sourcesUsable"] == 0
    assert body["health"]["sources"][0]["error"] == "HTTP 502"
    assert body["caveats"][0].startswith("Degraded")
    assert await count(sweeps_sqlite, SweepRequest) == 0
    photos.fail_status = 0
    again = (await request_sweep(sweeps_sqlite)).json()
    assert again["queued"] is True and again["health"]["sourcesUsable"] == 1


async def test_jobs_hold_a_bounded_number_of_photos_each_photo_once_inside_its_area(sqlite_url, photos):
    from shapely.geometry import Point, shape

    from tests.support import stop_coordinator
    from tests.test_sweeps_kit import start
    photos.scatter(*CENTRE, radius_m=700, n=200, seed=8)
    c = await start(sqlite_url, photos, job_max_photos=7)
    try:
        body = (await request_sweep(c, radius=700)).json()
        async with c.services.db.read() as s:
            jobs = list((await s.execute(select(SweepJob))).scalars())
        ids = [p["id"] for j in jobs for p in j.photos]
        assert len(ids) == len(set(ids)) == body["photos"] == 200
        assert all(1 <= len(j.photos) <= 7 for j in jobs)
        for j in jobs:
            area = shape(j.area)
            assert all(area.contains(Point(p["lon"], p["lat"])) for p in j.photos)
    finally:
        await stop_coordinator(c)


async def test_the_provider_adapter_reads_stac_pages_and_skips_what_cannot_be_measured(photos):
    from coordinator.sources.panoramax import PhotoProvider
    good = photos.scatter(*CENTRE, radius_m=200, n=12, seed=9)
    photos.photos[0].panorama = True
    photos.photos[1].license = None
    found = await PhotoProvider.at(photos.api_url, 5).search((2.3, 48.8, 2.4, 48.9), max_photos=100)
    assert len(found.photos) == 10 and found.skipped == {"360° panorama": 1, "no license": 1}
    ref = found.photos[0]
    src = next(p for p in good if p.id == ref.id)
    assert (ref.lat, ref.lon, ref.heading, ref.license) == (src.lat, src.lon, src.heading, "CC-BY-SA-4.0")
    assert (ref.camera_make, ref.camera_model, ref.focal_mm) == ("GoPro", "HERO7 Black", 4.936)
    assert ref.url.endswith(f"/{ref.id}/hd.jpg") and ref.sensor_width_mm is None   # Panoramax does not say
    # pages: a small page size makes the adapter follow `next` links
    from coordinator.sources import panoramax as mod
    old, mod.PAGE_LIMIT = mod.PAGE_LIMIT, 3
    try:
        paged = await PhotoProvider.at(photos.api_url, 5).search((2.3, 48.8, 2.4, 48.9), max_photos=100)
        capped = await PhotoProvider.at(photos.api_url, 5).search((2.3, 48.8, 2.4, 48.9), max_photos=4)
    finally:
        mod.PAGE_LIMIT = old
    assert [p.id for p in paged.photos] == [p.id for p in found.photos]
    assert len(capped.photos) == 4 and capped.truncated


async def test_ground_swept_with_no_imagery_is_queued_again_when_photos_appear_and_logged(sweeps_db, photos):
    """A covered request's photo-less cell is no_imagery; a photo appears there and a wider request finds
    nothing else new: that ground is queued again (it was a 500: the insert of no fresh cells failed), and the
    cell's log says no_imagery -> queued, as its creation as queued is logged too."""
    import h3

    from coordinator.demo.photos import FakePhoto
    from tests.test_review_kit import reviewer
    from tests.test_sweeps_kit import enrolled

    c = sweeps_db
    cells = sorted(coverage.circle_cells(*CENTRE, 200))
    centre = coverage.point_cell(*CENTRE)
    bare = next(x for x in cells if x != centre)

    def photo_in(cell: int, pid: str) -> None:
        la, lo = h3.cell_to_latlng(coverage.cell_text(cell))
        photos.add(FakePhoto(id=pid, lat=round(la, 7), lon=round(lo, 7), heading=90.0,
                             captured_at="2026-06-01T08:00:00+00:00", road_width_m=7.0, seed=len(pid)))

    photo_in(centre, "p0")
    assert (await request_sweep(c, radius=200)).json()["queued"] is True
    a, b = await enrolled(c, 2)
    la, lb = await a.lease(), await b.lease()
    await a.submit(la["lease"]["leaseId"], a.honest(la))
    await b.submit(lb["lease"]["leaseId"], b.honest(lb))
    assert (await c.post(f"/review/v1/jobs/{la['job']['jobId']}/approve", {}, headers=await reviewer(c))).status == 200
    async with c.services.db.read() as s:
        assert (await s.get(CoverageCell, bare)).state == "no_imagery"
    again = (await request_sweep(c, radius=200)).json()            # all swept: the provider is not asked
    assert again["queued"] is False and again["reasonCode"] == "covered"
    assert f"{len(cells) - 1} of its {len(cells)} cells had no usable street photo when swept" in again["reason"]
    photo_in(bare, "p1")
    r = await request_sweep(c, radius=400)
    assert r.status == 200 and r.json()["queued"] is True, r.body
    async with c.services.db.read() as s:
        assert (await s.get(CoverageCell, bare)).state == "queued"
        log = (await s.execute(select(SweepTransition).where(SweepTransition.subject == "cell",
               SweepTransition.subject_id == str(bare)).order_by(SweepTransition.id))).scalars().all()
        centre_log = (await s.execute(select(SweepTransition.from_state, SweepTransition.to_state).where(
            SweepTransition.subject == "cell", SweepTransition.subject_id == str(centre))
            .order_by(SweepTransition.id))).all()
    assert [(t.from_state, t.to_state) for t in log][-1] == ("no_imagery", "queued")
    assert [tuple(x) for x in centre_log] == [(None, "queued"), ("queued", "covered")]


async def test_one_requester_has_a_bounded_number_of_requests_queued(sqlite_url, photos):
    """Each queued request is work for the volunteers' GPUs: one address may hold
    SIS_SWEEP_MAX_QUEUED_PER_REQUESTER of them. One more over new ground is a 429 that says
    why; a request over its own queued ground still merges."""
    from tests.support import stop_coordinator
    from tests.test_sweeps_kit import start
    places = [(CENTRE[0] + 0.05 * i, CENTRE[1]) for i in range(3)]
    for i, (la, lo) in enumerate(places):
        photos.scatter(la, lo, radius_m=300, n=5, seed=20 + i)
    c = await start(sqlite_url, photos, sweep_max_queued_per_requester=2)
    try:
        for la, lo in places[:2]:
            assert (await request_sweep(c, la, lo, radius=300)).json()["queued"] is True
        jobs, cells = await count(c, SweepJob), await count(c, CoverageCell)
        r = await request_sweep(c, *places[2], radius=300)
        assert r.status == 429, r.body
        assert_error_shape(r.json(), "rate_limited")
        assert r.json()["error"]["details"] == {"queued": 2, "limit": 2}
        assert "SIS_SWEEP_MAX_QUEUED_PER_REQUESTER" in r.json()["error"]["message"]
        assert (await count(c, SweepRequest), await count(c, SweepJob), await count(c, CoverageCell)) == (2, jobs, cells)
        merged = (await request_sweep(c, *places[0], radius=300)).json()
        assert merged["queued"] is True and merged["merged"] is True
        async with c.services.db.write() as s:                 # one of theirs is swept: room for one more
            first = (await s.execute(select(SweepRequest).order_by(SweepRequest.requested_at))).scalars().first()
            first.state = "covered"
        assert (await request_sweep(c, *places[2], radius=300)).json()["queued"] is True
    finally:
        await stop_coordinator(c)


async def test_a_cut_listing_never_calls_the_ground_it_did_not_list_swept_without_imagery(sqlite_url, photos):
    """A listing cut at SIS_SWEEP_MAX_PHOTOS says nothing of the cells it did not list completely: once the
    request was swept they were marked no_imagery ("the provider listed no usable photo here"), though
    photos stand there, and the provider was never asked of them again. Only ground a box listed
    completely without a photo is (``sweeps.search``); the rest waits for the same circle asked again."""
    from tests.support import stop_coordinator
    from tests.test_review_kit import reviewer, rich_result
    from tests.test_sweeps_kit import enrolled, start
    shot = photos.scatter(*CENTRE, radius_m=400, n=40, seed=5)
    c = await start(sqlite_url, photos, sweep_max_photos=6)
    try:
        body = (await request_sweep(c, radius=450)).json()
        assert body["queued"] is True and body["photos"] <= 6
        # The caveat once promised the rest to "a later request", then (rightly, for a listing that always
        # listed the same photos) sent the requester to smaller circles: the same circle asked again goes on now.
        assert any("at most 6, SIS_SWEEP_MAX_PHOTOS" in cv and "asked again goes on" in cv
                   for cv in body["caveats"]), body["caveats"]
        truth = {p.id: p for p in shot}
        (node,) = await enrolled(c, 1, trusted=True)
        while (lease := await node.lease()) is not None:
            assert (await node.submit(lease["lease"]["leaseId"], rich_result(node, lease, truth))).status == 200
        auth = await reviewer(c)
        for p in (await c.get("/review/v1/pending", headers=auth)).json()["pending"]:
            assert (await c.post(f"/review/v1/jobs/{p['jobId']}/approve", {}, headers=auth)).status == 200
        async with c.services.db.read() as s:
            states = dict((await s.execute(select(CoverageCell.cell, CoverageCell.state))).all())
            request = (await s.execute(select(SweepRequest))).scalar_one()
        assert request.state == "covered"
        listed = {coverage.point_cell(p.lat, p.lon) for p in shot}
        assert not {cell for cell, st in states.items() if st == "no_imagery"} & listed
        assert len(listed) > sum(st == "covered" for st in states.values())   # ground with photos left for later
    finally:
        await stop_coordinator(c)
