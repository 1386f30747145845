"""Event briefs (issue 24): one hazard event's exposure, lifelines, condition and observation
over its modelled square, from the recorded GDACS and USGS feeds, the synthetic town laid
under the GDACS flood of the sample (gdacs:FL:1103377, at 112.75 E 7.25 S), a population grid,
a FIRMS CSV and swept seen-layer cells; on both databases. Unknown is never zero; a brief with
a source down is degraded and not cached; a healthy one is cached with single flight; an
unknown id is 404 in the one error shape."""
from __future__ import annotations

import asyncio
import copy
from collections import Counter
from datetime import datetime, timezone

import pytest
from h3.api import basic_int as h3i

from coordinator.core.db.models import CoverageCell
from coordinator.datasets import ingest
from coordinator.demo.upstream import Canned, sample
from coordinator.features import synthetic
from coordinator.hazards import history
from coordinator.panels import fires
from tests.support import make_settings, start_coordinator, stop_coordinator
from tests.test_sites import PER_CELL, write_population

EVENT = "gdacs:FL:1103377"
LAT, LON = -7.25, 112.75
SIDE = 0.02
BOX = "112.74,-7.26,112.76,-7.24"
FIRMS_PATH = f"/firms/DEMO_MAP_KEY/VIIRS_SNPP_NRT/{BOX}/2"
GDACS_PATH = "/gdacs/events/geteventlist/EVENTS4APP"
NOW = datetime(2026, 10, 5, 12, 0, tzinfo=timezone.utc)
PLACES = 600
FIRMS_CSV = ("latitude,longitude,bright_ti4,scan,track,acq_date,acq_time,satellite,instrument,confidence,version,"
             "bright_ti5,frp,daynight\n"
             "-7.2450,112.7450,331.2,0.39,0.36,2026-10-05,815,N,VIIRS,n,2.0NRT,290.1,4.5,D\n"
             "-7.2550,112.7550,340.8,0.41,0.37,2026-10-05,230,N,VIIRS,h,2.0NRT,291.0,9.25,N\n"
             "-7.2500,112.7500,320.0,0.40,0.36,2026-10-04,1100,N,VIIRS,l,2.0NRT,288.0,1.0,D\n")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("brief")
    out = {"osm": d / "flood.osm.pbf", "places": d / "flood-places.geojsonl", "pop": d / "pop.asc"}
    out["counts"] = synthetic.write_extract(out["osm"], (LAT, LON), half_deg=SIDE / 2)
    # Places over a wider square than the event's, so the dataset covers it; those inside are counted.
    synthetic.write_geojsonseq(out["places"], synthetic.places((LAT, LON), PLACES, half_deg=0.012))
    write_population(out["pop"], (LAT, LON), half=0.012)
    inside = [f for f in synthetic.places((LAT, LON), PLACES, half_deg=0.012)
              if abs(f["geometry"]["coordinates"][0] - LON) <= SIDE / 2
              and abs(f["geometry"]["coordinates"][1] - LAT) <= SIDE / 2]
    out["categories"] = Counter(f["properties"]["categories"]["primary"] for f in inside)
    return out


def settings(db_url, upstream, tmp_path, **kw):
    return make_settings(db_url, upstream, data_dir=str(tmp_path / "data"), event_square_deg=SIDE,
                         sources={"firms": {"api_key": "DEMO_MAP_KEY"}}, **kw)


@pytest.fixture
async def c(db_url, upstream, tmp_path, monkeypatch):
    monkeypatch.setattr(fires, "utc_now", lambda: NOW)
    upstream.set(FIRMS_PATH, Canned(200, FIRMS_CSV.encode(), "text/csv"))
    c = await start_coordinator(settings(db_url, upstream, tmp_path))
    yield c
    await stop_coordinator(c)


async def load(c, files) -> None:
    for kind, f in (("osm", "osm"), ("places", "places"), ("population", "pop")):
        await ingest.run(c.services.db, kind, files[f], data_dir=c.services.settings.data_dir)


async def sweep(c, points: list[tuple[float, float]]) -> None:
    """Mark the resolution-10 cells of these points swept and approved."""
    now = datetime.now(timezone.utc)
    async with c.services.db.write() as s:
        for lat, lon in points:
            s.add(CoverageCell(cell=h3i.latlng_to_cell(lat, lon, 10), state="covered", updated_at=now, covered_at=now))


def flood_escalated() -> dict:
    doc = copy.deepcopy(sample("gdacs", "events/geteventlist/EVENTS4APP"))
    for f in doc["features"]:
        if f["properties"]["eventid"] == 1103377:
            f["properties"].update(alertlevel="Orange", episodealertlevel="Orange", episodeid=3,
                                   datemodified="2026-10-05T06:00:00")
    return doc


@pytest.fixture
async def ready(c, files, upstream):
    await load(c, files)
    await sweep(c, [(LAT, LON), (LAT + 0.005, LON + 0.005), (LAT - 0.008, LON - 0.002), (LAT + 0.1, LON)])
    await history.poll_once(c.services.db, c.services.sources)
    upstream.set_json(GDACS_PATH, flood_escalated())
    await history.poll_once(c.services.db, c.services.sources)
    return c


async def test_a_brief_joins_exposure_lifelines_condition_and_observation(ready, files):
    r = await ready.get(f"/earth/event-brief?id={EVENT}")
    body = r.json()
    assert r.status == 200, body
    assert list(body)[0] == "caveats" and body["health"]["degraded"] is False, body["health"]
    assert {s["name"] for s in body["health"]["sources"]} == {
        "GDACS", "USGS", "event-history", "dataset:osm", "dataset:places", "dataset:population", "NASA FIRMS",
        "seen-layer"}
    assert body["event"]["area"] == {"bbox": [112.74, -7.26, 112.76, -7.24], "kind": "fixed-square",
                                     "sideDeg": SIDE, "posQuality": "modeled-bbox"}
    ex, ll, cond, obs = body["exposure"], body["lifelines"], body["condition"], body["observation"]
    assert ex["population"]["value"] == pytest.approx(400 * PER_CELL) and ex["population"]["confidence"] == "high"
    assert ex["population"]["source"] == "dataset:population"
    assert ex["places"]["total"]["value"] == sum(files["categories"].values()) > 300
    assert ex["places"]["byCategory"]["value"] == dict(files["categories"])
    counts = files["counts"]
    assert ll["communication"]["value"] == counts["comm_tower"] and ll["communication"]["confidence"] == "low"
    assert ll["power"]["byClass"] == {"power_line": 1, "power_pole": counts["power_pole"],
                                      "power_tower": counts["power_tower"], "substation": 1}
    assert {"residential", "secondary", "primary", "trunk", "service"} <= set(ll["roads"]["byClass"])
    assert ll["health"]["byCategory"] == {k: files["categories"][k] for k in ("hospital", "pharmacy")}
    assert ll["education"]["value"] == files["categories"]["school"]
    assert cond["alertLevel"] == {"value": "orange", "confidence": "high", "source": "GDACS"}
    assert cond["episode"]["value"] == "3" and cond["active"]["value"] is True
    kinds = [(h["kind"], h["fromLevel"], h["toLevel"]) for h in cond["history"]["value"]]
    assert kinds == [("new", None, "green"), ("escalated", "green", "orange")]
    assert obs["upstreamUpdated"]["value"] == "2026-10-05T06:00:00Z"
    assert obs["fires"]["value"] == 2 and obs["fires"]["newest"] == "2026-10-05T08:15:00Z"
    assert obs["fires"]["maxFrpMW"] == 9.25
    assert obs["seenCoverage"]["value"] == 3 and obs["seenCoverage"]["confidence"] == "high"
    for section in (ex["places"], ll, cond, obs, {"p": ex["population"]}):
        for fig in section.values():
            assert {"value", "confidence", "source"} <= set(fig)
    legacy = (await ready.get(f"/legacy/event-brief?id={EVENT}")).json()
    assert legacy["exposure"] == body["exposure"] and legacy["event"]["area"] == body["event"]["area"]


async def test_nothing_loaded_is_unknown_never_zero(c):
    body = (await c.get(f"/earth/event-brief?id={EVENT}")).json()
    assert body["health"]["degraded"] is True and body["caveats"][0].startswith("Degraded")
    for fig in (body["exposure"]["population"], body["exposure"]["places"]["total"], body["lifelines"]["roads"],
                body["lifelines"]["power"], body["lifelines"]["health"], body["condition"]["history"]):
        assert fig["value"] is None and fig["confidence"] == "unknown"
    assert body["observation"]["seenCoverage"]["value"] == 0        # the seen layer answered: none swept
    assert body["observation"]["fires"]["value"] == 2                # FIRMS answered


async def test_an_unknown_event_is_404_in_the_one_error_shape(c):
    r = await c.get("/earth/event-brief?id=gdacs:FL:999")
    assert r.status == 404 and r.json() == {"error": {"code": "not_found", "message": r.json()["error"]["message"],
                                                      "details": {"id": "gdacs:FL:999"}}}
    for bad in ("", "x", "gdacs:FL:12a", "usgs:" + "a" * 40):
        r = await c.get(f"/earth/event-brief?id={bad}")
        assert r.status == 400 and r.json()["error"]["code"] == "bad_parameter", bad
    assert (await c.get("/earth/event-brief")).status == 400
    assert (await c.get("/legacy/event-brief?id=usgs:nosuchquake")).status == 404


async def test_an_unknown_id_whose_source_is_down_is_503_not_404(c, upstream):
    upstream.set_json(GDACS_PATH, {"error": "down"}, status=500)
    r = await c.get("/earth/event-brief?id=gdacs:FL:999")
    assert r.status == 503 and r.json()["error"]["details"]["source"] == "GDACS" and r.headers["Retry-After"]
    assert (await c.get("/earth/event-brief?id=usgs:us7000r1b7")).status == 200    # USGS answered


async def test_a_brief_with_one_source_down_is_degraded_and_not_cached(ready, upstream):
    upstream.set_json("/usgs/4.5_week.geojson", {"error": "down"}, status=503)
    path = f"/earth/event-brief?id={EVENT}"
    before = upstream.hits.get(GDACS_PATH, 0)
    for _ in range(2):
        r = await ready.get(path)
        body = r.json()
        assert r.status == 200 and body["health"]["sourcesUsable"] == body["health"]["sourcesQueried"] - 1
        assert "USGS" in body["caveats"][0] and r.headers["Cache-Control"].startswith("no-store")
    assert upstream.hits[GDACS_PATH] == before + 2                   # computed twice: never cached
    upstream.load_recorded()                                         # USGS back (and the sample GDACS list)
    healthy = [(await ready.get(path)).json() for _ in range(3)]
    assert healthy[0]["health"]["degraded"] is False and healthy[0] == healthy[2]
    assert upstream.hits[GDACS_PATH] == before + 3                   # computed once, then from the cache


async def test_concurrent_cold_briefs_share_one_computation(ready, upstream):
    upstream.set_json(GDACS_PATH, flood_escalated(), delay_s=0.3)
    before = upstream.hits.get(GDACS_PATH, 0)
    bodies = await asyncio.gather(*(ready.get(f"/earth/event-brief?id={EVENT}") for _ in range(6)))
    assert {b.status for b in bodies} == {200} and len({b.body for b in bodies}) == 1
    assert upstream.hits[GDACS_PATH] == before + 1
    assert (await ready.get(f"/earth/event-brief?id={EVENT}")).body == bodies[0].body
    assert upstream.hits[GDACS_PATH] == before + 1
    ttl = ready.services.registry.get("event_brief").ttl_for(ready.services.settings)
    assert ttl == 1800 and ready.services.registry.get("event_brief").cold_bound_s == 60


async def test_a_resolved_event_is_briefed_from_the_history(ready, upstream):
    doc = flood_escalated()
    doc["features"] = [f for f in doc["features"] if f["properties"]["eventid"] != 1103377]
    upstream.set_json(GDACS_PATH, doc)
    await history.poll_once(ready.services.db, ready.services.sources)
    body = (await ready.get(f"/earth/event-brief?id={EVENT}")).json()
    assert body["condition"]["active"] == {"value": False, "confidence": "low", "source": "event-history"}
    assert [h["kind"] for h in body["condition"]["history"]["value"]][-1] == "resolved"
    assert body["observation"]["upstreamUpdated"]["value"] is None
    assert "no longer list" in body["caveats"][0]


async def test_an_alias_reads_the_merged_event(c):
    body = (await c.get("/earth/event-brief?id=usgs:us7000r1a1")).json()
    assert body["event"]["id"] == "gdacs:EQ:1569499" and body["event"]["requestedId"] == "usgs:us7000r1a1"


def test_the_briefs_fires_figure_reads_the_window_as_the_fires_panel_does(monkeypatch):
    """Over the same FIRMS rows and the same clock, the brief counted fewer detections than the
    panel: the panel keeps one timed up to the clock skew after its clock, the brief dropped it
    unsaid (the time audit: 6 against 7, the newest row 5 minutes ahead)."""
    import asyncio
    from datetime import datetime, timezone
    from pathlib import Path
    from types import SimpleNamespace

    from coordinator.briefs import tools as brief
    from coordinator.core.honesty import SourceReport
    from coordinator.panels import fires as panel
    from coordinator.sources.base import SourceRead

    box = (113.75, -2.5, 114, -2.25)
    csv = (Path(panel.__file__).parent / "samples/firms/DEMO_MAP_KEY/VIIRS_SNPP_NRT/113.75,-2.5,114,-2.25/2.csv")

    class Firms:
        def option(self, name):  # noqa: ANN001, ANN202
            return "VIIRS_SNPP_NRT"

        async def read(self, query):  # noqa: ANN001, ANN202
            rows = panel.parse_csv(csv.read_text())
            return SourceRead(rows, SourceReport("NASA FIRMS", panel.LICENSE, ok=True, records=len(rows)))

    monkeypatch.setattr(panel, "utc_now", lambda: datetime(2026, 11, 25, 5, 7, tzinfo=timezone.utc))
    ctx = SimpleNamespace(services=SimpleNamespace(sources={"firms": Firms()}))
    answer = asyncio.run(panel.fires(ctx, {"bbox": box}))
    fig, _ = asyncio.run(brief._fires(ctx, box))
    assert answer.data["detections"][0]["detectedAt"] == "2026-11-25T05:12:00Z"     # ahead of the clock
    assert fig["value"] == answer.data["count"] == 7 and fig["newest"] == "2026-11-25T05:12:00Z"
