"""A sweep request over ground holding more photos than one listing takes: the provider's
listing is cut (``limit`` and ``next`` pages), so the search splits the circle's box into a
quadtree of smaller boxes, skips ground already known, and keeps the photos nearest the
centre. The fake provider here is the demo's (the real STAC format, pages cut at
``limit``), with its answers counted and timed, and its photos listed in the order it
was given them: one corner first, as a provider's own order may."""
from __future__ import annotations

import asyncio
import math
from collections import Counter
from typing import AsyncIterator

import pytest
import tornado.web
from sqlalchemy import func, select

from coordinator.core.db.models import CoverageCell, SweepJob, SweepRequest, SweepRequestCell, SweepTransition
from coordinator.demo.photos import FakePhoto, FakePhotoProvider, _Image, _Search
from coordinator.sweeps import coverage
from tests.support import stop_coordinator
from tests.test_sweeps_kit import CENTRE, request_sweep, start

CALLS, AT_ONCE = 32, 4          # the search's budget of provider calls and how many run at once
FIJI = (-16.78, 179.9996)       # the antimeridian is 43 m east of it


class _CountedSearch(_Search):
    async def get(self) -> None:
        fake: CountedPhotos = self.fake
        fake.in_search += 1
        fake.most_in_search = max(fake.most_in_search, fake.in_search)
        fake.boxes.append(tuple(float(x) for x in self.get_query_argument("bbox").split(",")))
        try:
            await asyncio.sleep(0.005)          # long enough for calls made at once to overlap
            if fake.fail_from and fake.searches + 1 >= fake.fail_from:
                fake.searches += 1
                self.set_status(502)
                self.finish("provider failure")
                return
            super().get()
        finally:
            fake.in_search -= 1


class CountedPhotos(FakePhotoProvider):
    """The demo's fake provider, recording each search's box and how many ran at once;
    ``fail_from``: the n-th search and every later one answer 502."""

    def __init__(self) -> None:
        super().__init__()
        self.in_search = self.most_in_search = 0
        self.boxes: list[tuple[float, ...]] = []
        self.fail_from = 0

    def app(self) -> tornado.web.Application:
        return tornado.web.Application([(r"/api/search", _CountedSearch, {"fake": self}),
                                        (r"/api/pictures/([^/]+)/hd\.jpg", _Image, {"fake": self})])


@pytest.fixture
async def dense() -> AsyncIterator[CountedPhotos]:
    fake = await CountedPhotos().start()
    yield fake
    await fake.stop()


def quadrant(centre: tuple[float, float], lat: float, lon: float) -> str:
    north = lat >= centre[0]
    east = coverage.unwrap_lon(lon, centre[1]) >= centre[1]
    return ("N" if north else "S") + ("E" if east else "W")


def corner_first(fake: FakePhotoProvider, centre: tuple[float, float], radius_m: float, n: int, seed: int,
                 order: str = "NE NW SW SE") -> list[FakePhoto]:
    """``n`` photos over the disc, listed by the provider one quadrant after the other
    (``order``), longitudes wrapped into [-180, 180] as a provider gives them."""
    shot = fake.scatter(*centre, radius_m=radius_m, n=n, seed=seed)
    for p in shot:
        p.lon = round(coverage.wrap_lon(p.lon), 7)
    rank = {q: i for i, q in enumerate(order.split())}
    fake.photos.sort(key=lambda p: rank[quadrant(centre, p.lat, p.lon)])
    return shot


def inside(shot, centre, radius_m):
    return [p for p in shot if coverage.distance_m(*centre, p.lat, p.lon) <= radius_m]


async def job_photos(c) -> list[dict]:
    async with c.services.db.read() as s:
        return [p for j in (await s.execute(select(SweepJob))).scalars() for p in j.photos]


async def ask_until_known(c, centre, radius_m, most: int = 40) -> tuple[list[dict], dict]:
    """The same circle asked again and again while each answer queues a new request: the
    answers that did, and the first that did not."""
    made = []
    for _ in range(most):
        r = await request_sweep(c, *centre, radius=radius_m)
        assert r.status == 200, r.body
        body = r.json()
        if not body["queued"] or body["merged"]:
            return made, body
        made.append(body)
    raise AssertionError(f"the same circle asked {most} times still queued new ground each time")


def on_ground(shot, centre, radius_m):
    """The photos in the circle standing on its ground (``coverage.circle_cells``). One in an
    edge cell, whose centre is outside the circle, is swept with a request that lists it, but
    that cell is the ground of the circles beside it, and nothing goes looking for it."""
    ground = coverage.circle_cells(*centre, radius_m)
    return [p for p in inside(shot, centre, radius_m) if coverage.point_cell(p.lat, p.lon) in ground]


async def assert_every_cell_with_photos_queued_once(c, shot, centre, radius_m) -> None:
    """Every cell of the circle's ground with photos is queued, once, with all its photos."""
    want = {coverage.point_cell(p.lat, p.lon) for p in on_ground(shot, centre, radius_m)}
    async with c.services.db.read() as s:
        states = dict((await s.execute(select(CoverageCell.cell, CoverageCell.state))).all())
        queued_logs = Counter((await s.execute(select(SweepTransition.subject_id).where(
            SweepTransition.subject == "cell", SweepTransition.to_state == "queued"))).scalars())
        by_request: dict[int, set[str]] = {}
        for j in (await s.execute(select(SweepJob))).scalars():
            for cell in j.cells:
                by_request.setdefault(int(cell, 16), set()).add(j.sweep_id)
    missing = want - {cell for cell, st in states.items() if st == "queued"}
    assert not missing, f"{len(missing)} of {len(want)} cells with photos never queued"
    assert all(n == 1 for n in queued_logs.values()), [k for k, n in queued_logs.items() if n > 1]
    assert all(len(ids) == 1 for ids in by_request.values())        # each cell's jobs are one request's
    ids = [p["id"] for p in await job_photos(c)]
    assert len(ids) == len(set(ids))                                  # each photo in one job
    assert {p.id for p in on_ground(shot, centre, radius_m)} <= set(ids)


async def test_a_cut_listing_keeps_photos_spread_over_the_circle_not_the_providers_first(sqlite_url, dense):
    """(a) The provider lists the north-east quarter first: the first 120 it lists all stand
    there. The photos kept are the ground nearest the centre, in every quarter."""
    shot = corner_first(dense, CENTRE, 450, 400, seed=31)
    c = await start(sqlite_url, dense, sweep_max_photos=120)
    try:
        body = (await request_sweep(c, radius=450)).json()
        assert body["queued"] is True and 0 < body["photos"] <= 120, body
        kept = await job_photos(c)
        by_quarter = Counter(quadrant(CENTRE, k["lat"], k["lon"]) for k in kept)
        assert set(by_quarter) == {"NE", "NW", "SW", "SE"} and min(by_quarter.values()) >= 0.15 * len(kept), by_quarter
        # nearest first: the kept photos stand nearer the centre than the circle's photos at large
        dist = sorted(coverage.distance_m(*CENTRE, k["lat"], k["lon"]) for k in kept)
        every = sorted(coverage.distance_m(*CENTRE, p.lat, p.lon) for p in inside(shot, CENTRE, 450))
        assert dist[len(dist) // 2] < every[len(every) // 2]
        assert any("nearest the centre" in cv for cv in body["caveats"]), body["caveats"]
        assert dense.searches <= CALLS
    finally:
        await stop_coordinator(c)


async def test_a_listing_that_is_not_cut_is_one_call_as_before(sqlite_url, dense):
    corner_first(dense, CENTRE, 400, 60, seed=30)
    c = await start(sqlite_url, dense)
    try:
        body = (await request_sweep(c, radius=450)).json()
        assert body["queued"] is True and body["photos"] == 60
        assert dense.searches == 1 and not any("more photos" in cv for cv in body["caveats"])
    finally:
        await stop_coordinator(c)


async def test_the_same_circle_asked_again_goes_on_until_all_its_ground_is_known(db_url, dense):
    """(b) Each request keeps at most 60 photos of the 400: asked again, the same circle lists the
    ground not yet known and queues it as a new request, until every cell with photos is queued
    once; then it is merged, as any request over queued ground is. A band of the ground has no
    photo: once listed completely by a queued request it is known too, and the last ask lists
    the circle's own box alone (every part of it is known) to merge."""
    shot = corner_first(dense, CENTRE, 450, 400, seed=32)
    west = [p for p in shot if -260 < (coverage.unwrap_lon(p.lon, CENTRE[1]) - CENTRE[1]) * coverage.M_PER_DEG
            * math.cos(math.radians(CENTRE[0])) < -60]
    dense.photos = [p for p in dense.photos if p not in west]
    shot = [p for p in shot if p not in west]
    c = await start(db_url, dense, sweep_max_photos=60, sweep_max_queued_per_requester=100)
    try:
        made, last = await ask_until_known(c, CENTRE, 450)
        assert len(made) >= len(on_ground(shot, CENTRE, 450)) // 60 >= 4, len(made)
        assert all(b["photos"] <= 60 for b in made)
        assert any("asked again goes on" in cv for cv in made[0]["caveats"]), made[0]["caveats"]
        assert last["queued"] is True and last["merged"] is True, last
        assert not any("more photos" in cv for cv in last["caveats"]), last["caveats"]
        await assert_every_cell_with_photos_queued_once(c, shot, CENTRE, 450)
        async with c.services.db.read() as s:
            requests = (await s.execute(select(func.count()).select_from(SweepRequest))).scalar_one()
        assert requests == len(made)
        jobs, calls = len(await job_photos(c)), dense.searches
        again = (await request_sweep(c, radius=450)).json()
        assert again["merged"] is True and len(await job_photos(c)) == jobs
        assert dense.searches == calls + 1 and not any("more photos" in cv for cv in again["caveats"])
        async with c.services.db.read() as s:
            empty = set((await s.execute(select(SweepRequestCell.cell).where(
                SweepRequestCell.sweepable.is_(False)))).scalars())
        band = {cell for cell in coverage.circle_cells(*CENTRE, 450)
                if -200 < (coverage.cell_polygon(cell).centroid.x - CENTRE[1]) * coverage.M_PER_DEG
                * math.cos(math.radians(CENTRE[0])) < -120}
        assert band and band <= empty          # the band's cells, listed completely with no photo, are known
    finally:
        await stop_coordinator(c)


async def test_no_cell_under_a_cut_box_is_called_swept_without_imagery(sqlite_url, dense):
    """(c) 200 photos stand within 40 m of one spot, more than any box a cell wide lists, and a few
    stand elsewhere. The boxes listed completely are known: their cells without photos are
    swept without imagery once the request is covered. The cut box's are not."""
    from tests.test_review_kit import reviewer, rich_result
    from tests.test_sweeps_kit import enrolled

    spot = coverage.offset(*CENTRE, 180, 150)
    cluster = dense.scatter(*spot, radius_m=40, n=200, seed=33)
    few = (dense.scatter(*coverage.offset(*CENTRE, -250, -200), radius_m=20, n=1, seed=34)
           + dense.scatter(*coverage.offset(*CENTRE, 200, -250), radius_m=20, n=1, seed=35))
    shot = cluster + few
    c = await start(sqlite_url, dense, sweep_max_photos=10)
    try:
        body = (await request_sweep(c, radius=450)).json()
        assert body["queued"] is True and body["photos"] <= 10, body
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
        bare = {cell for cell, st in states.items() if st == "no_imagery"}
        with_photos = {coverage.point_cell(p.lat, p.lon) for p in shot}
        assert bare and not bare & with_photos            # ground listed completely is known; no photo hidden
        near_spot = {cell for cell in coverage.circle_cells(*spot, 140) if cell not in with_photos}
        assert near_spot and not bare & near_spot, "ground under the cut box was called swept without imagery"
        assert len(bare) >= len(coverage.circle_cells(*CENTRE, 450)) // 2   # most of the empty ground is known
        assert any("about a cell wide" in cv for cv in body["caveats"]), body["caveats"]   # and it says so
    finally:
        await stop_coordinator(c)


async def test_the_provider_calls_are_bounded_and_a_few_at_once(sqlite_url, dense, monkeypatch):
    """(d) Pages of 5 photos over 600 photos: the old listing paged through all of them one page
    after the other (120 calls). The search makes at most 32 calls, at most 4 at once, never on a
    box narrower than a cell, and its answer says the rest waits for the same circle asked again."""
    from coordinator.sources import panoramax
    monkeypatch.setattr(panoramax, "PAGE_LIMIT", 5)
    corner_first(dense, CENTRE, 450, 600, seed=37)
    c = await start(sqlite_url, dense)
    try:
        body = (await request_sweep(c, radius=450)).json()
        assert body["queued"] is True, body
        assert dense.searches <= CALLS, dense.searches
        assert 1 < dense.most_in_search <= AT_ONCE, dense.most_in_search
        for w, s, e, n in dense.boxes:
            assert (n - s) * coverage.M_PER_DEG >= coverage.SPACING_M * 0.999
            widest = math.cos(math.radians(min(abs(s), abs(n))))
            assert (e - w) * coverage.M_PER_DEG * widest >= coverage.SPACING_M * 0.999
        assert any(f"{CALLS} searches" in cv and "asked again goes on" in cv for cv in body["caveats"]), body["caveats"]
    finally:
        await stop_coordinator(c)


async def test_across_the_antimeridian_the_search_reaches_both_sides(sqlite_url, dense):
    """(e) A circle across 180: two boxes, one each side, each split where cut; the photos kept
    stand on both sides, and asked again the circle goes on until every cell with photos is queued."""
    shot = corner_first(dense, FIJI, 450, 300, seed=38, order="NE SE NW SW")
    assert {p.lon < 0 for p in shot} == {True, False}
    c = await start(sqlite_url, dense, sweep_max_photos=50, sweep_max_queued_per_requester=100)
    try:
        made, last = await ask_until_known(c, FIJI, 450)
        first = made[0]
        assert first["photos"] <= 50
        async with c.services.db.read() as s:
            jobs = list((await s.execute(select(SweepJob).where(SweepJob.sweep_id == first["request"]["id"])))
                        .scalars())
        sides = Counter(p["lon"] < 0 for j in jobs for p in j.photos)
        assert sides[True] and sides[False], sides
        assert last["merged"] is True, last
        await assert_every_cell_with_photos_queued_once(c, shot, FIJI, 450)
    finally:
        await stop_coordinator(c)


async def test_one_failing_sub_box_fails_the_request_and_queues_nothing(sqlite_url, dense):
    """A provider that answers the first search and fails a later one: no partial listing is
    queued as if it were the circle's; the answer is the degraded provider_unavailable one."""
    corner_first(dense, CENTRE, 450, 400, seed=39)
    dense.fail_from = 3
    c = await start(sqlite_url, dense, sweep_max_photos=100)
    try:
        body = (await request_sweep(c, radius=450)).json()
        assert body["queued"] is False and body["reasonCode"] == "provider_unavailable", body
        assert body["health"]["sourcesUsable"] == 0
        async with c.services.db.read() as s:
            assert (await s.execute(select(func.count()).select_from(SweepRequest))).scalar_one() == 0
            assert (await s.execute(select(func.count()).select_from(SweepRequestCell))).scalar_one() == 0
        dense.fail_from = 0
        assert (await request_sweep(c, radius=450)).json()["queued"] is True
    finally:
        await stop_coordinator(c)


async def test_the_search_budget_is_the_operators_settings(sqlite_url, dense, monkeypatch):
    """SIS_SWEEP_MAX_SEARCHES and SIS_SWEEP_SEARCHES_AT_ONCE bound the search (they were module
    constants, 32 and 4, that no deployment could change): 6 searches, 2 at a time, over the
    600 photos of the test above; the answer names the budget it was given."""
    from pydantic import ValidationError

    from coordinator.core.settings import Settings
    from coordinator.sources import panoramax
    assert (Settings().sweep_max_searches, Settings().sweep_searches_at_once) == (CALLS, AT_ONCE)
    for bad in ({"sweep_max_searches": 0}, {"sweep_searches_at_once": 0}, {"sweep_max_searches": 257}):
        with pytest.raises(ValidationError):
            Settings(**bad)
    monkeypatch.setattr(panoramax, "PAGE_LIMIT", 5)
    corner_first(dense, CENTRE, 450, 600, seed=37)
    c = await start(sqlite_url, dense, sweep_max_searches=6, sweep_searches_at_once=2)
    try:
        body = (await request_sweep(c, radius=450)).json()
        assert body["queued"] is True, body
        assert dense.searches == 6, dense.searches
        assert dense.most_in_search == 2, dense.most_in_search
        assert any("at most 6 searches" in cv and "SIS_SWEEP_MAX_SEARCHES" in cv for cv in body["caveats"]), \
            body["caveats"]
    finally:
        await stop_coordinator(c)
