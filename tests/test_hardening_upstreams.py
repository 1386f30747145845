"""Odd upstream answers (the degraded-answers audit): a value of one record that cannot be read
is unknown (null), never a 500, a zero, a default or the text passed on; an answer that cannot be
read at all degrades its source, named, and is not cached; a count of a source that did not
answer is null; a record listed twice is served once; a time far ahead of the clock has an
unknown age. Each against a real coordinator and the fake upstream serving the recorded sample
with one field changed."""
from __future__ import annotations

import copy
import logging
from datetime import datetime, timezone

import pytest

from coordinator.demo.upstream import Canned, sample
from coordinator.panels import air_quality, coral
from coordinator.sources import Query, Source
from tests.support import fixed_clock, make_settings, start_coordinator, stop_coordinator

GDACS = "/gdacs/events/geteventlist/EVENTS4APP"
USGS = "/usgs/4.5_week.geojson"
ISS = "/wheretheiss/satellites/25544"
CG = "/coingecko/api/v3/simple/price"
FRED = "/fred/series/observations"
MAGMA = "/magma/api/v1/gunung-api/tingkat-aktivitas"
CRW = "/crw/griddap/noaacrwbaa7dDaily"
WAQI = "/waqi/feed/jakarta"
KEYS = {"fred": {"api_key": "k"}, "magma": {"api_key": "k"}, "waqi": {"api_key": "k"}}


@pytest.fixture
async def c(sqlite_url, upstream):
    c = await start_coordinator(make_settings(sqlite_url, upstream, sources=KEYS))
    yield c
    await stop_coordinator(c)


def serve(upstream, path: str, doc) -> None:  # noqa: ANN001
    """``doc`` as the upstream's answer at ``path``, with and without its recorded extension
    (adapters ask for one or the other)."""
    for p in [q for q in upstream.routes if q == path or q.rsplit(".", 1)[0] == path]:
        upstream.set_json(p, doc)


def changed(source: str, path: str, edit) -> dict:  # noqa: ANN001
    """The recorded sample of ``source`` at ``path`` with ``edit`` applied."""
    doc = copy.deepcopy(sample(source, path))
    edit(doc)
    return doc


async def ok_json(c, path: str) -> dict:  # noqa: ANN001
    r = await c.get(path)
    assert r.status == 200, (path, r.body[:300])
    return r.json()


def report(body: dict, name: str) -> dict:
    return next(s for s in body["health"]["sources"] if s["name"] == name)


# ---- 1. a time past what Python's clock functions hold ---------------------------------------

@pytest.mark.parametrize("huge", [10 ** 20, 1e300])
async def test_a_usgs_time_past_what_the_clock_holds_is_unknown_not_a_500(c, upstream, huge):
    serve(upstream, USGS, changed("usgs", "4.5_week.geojson",
                                  lambda d: d["features"][0]["properties"].__setitem__("time", huge)))
    body = await ok_json(c, "/earth/events")
    assert report(body, "USGS")["ok"] and not body["health"]["degraded"]
    quake = next(e for e in body["events"] if e["id"] == "usgs:us7000r1a1")
    assert quake["from"] is None and quake["to"] is None           # unknown, and the quake still served
    # With its time unknown it is not matched to GDACS's quake: both are served.
    assert "alsoKnownAs" not in next(e for e in body["events"] if e["id"] == "gdacs:EQ:1569499")
    for path in ("/public/v1/anon/events", "/earth/w/twin_earth", "/public/v1/anon/twin?layers=quakes",
                 "/earth/w/feed-usgs", "/earth/event-brief?id=usgs:us7000r1a1"):
        await ok_json(c, path)


async def test_an_iss_timestamp_past_what_the_clock_holds_is_unknown_not_a_500(c, upstream):
    serve(upstream, ISS, changed("wheretheiss", "satellites/25544.json",
                                 lambda d: d.__setitem__("timestamp", 10 ** 20)))
    twin = await ok_json(c, "/public/v1/anon/twin?layers=iss")
    assert not twin["health"]["degraded"]
    feed = await ok_json(c, "/earth/w/feed-wheretheiss")
    assert feed["count"] == 1 and feed["data"][0]["properties"]["at"] is None
    await ok_json(c, "/earth/w/twin_earth")


async def test_a_coingecko_update_time_past_what_the_clock_holds_is_unknown_not_a_500(c, upstream):
    serve(upstream, CG, changed("coingecko", "api/v3/simple/price.json",
                                lambda d: d["bitcoin"].__setitem__("last_updated_at", 10 ** 20)))
    body = await ok_json(c, "/earth/w/cg-bitcoin")
    row = body["data"][0]
    assert row["lastUpdated"] is None and row["price"] == {"value": 91234.5, "confidence": "high"}


class Broken(Source[dict]):
    """An adapter (not registered) whose parser raises what ``raises`` names on a good answer."""

    name = "broken"
    label = "Broken upstream"
    raises: type[BaseException] = OverflowError

    async def fetch(self, query: Query) -> list[dict]:
        await self.get_json(USGS)
        raise self.raises("from the parser")


@pytest.mark.parametrize("exc", [OverflowError, OSError, ZeroDivisionError, IndexError, NameError])
async def test_any_parse_failure_degrades_its_source_named_and_logs_the_traceback(upstream, caplog, exc):
    src = type("B", (Broken,), {"raises": exc}).at(upstream.base_url)
    with caplog.at_level(logging.WARNING, logger="sis.sources"):
        got = await src.read()
    assert not got.report.ok and got.records == [] and got.report.name == "Broken upstream"
    assert exc.__name__ in got.report.error
    logged = [r for r in caplog.records if r.exc_info]
    assert logged and logged[0].exc_info[0] is exc                   # the traceback is kept, not swallowed


# ---- 2. a text value or an unreadable date ---------------------------------------------------

@pytest.mark.parametrize("source, edit", [
    ("usgs", lambda d: d["features"][0]["properties"].__setitem__("mag", "big")),
    ("gdacs", lambda d: d["features"][0]["properties"].__setitem__(
        "severitydata", {"severity": "n/a", "severitytext": "", "severityunit": "M"})),
    ("gdacs", lambda d: d["features"][0]["properties"].__setitem__("fromdate", "26/10/2026")),
    ("gdacs", lambda d: d["features"][0]["properties"].__setitem__("episodealertscore", "high")),
], ids=["usgs-mag-text", "gdacs-severity-text", "gdacs-date-unreadable", "gdacs-score-text"])
async def test_a_text_value_or_unreadable_date_is_unknown_not_a_500(c, upstream, source, edit):
    path, name = (USGS, "4.5_week.geojson") if source == "usgs" else (GDACS, "events/geteventlist/EVENTS4APP")
    serve(upstream, path, changed(source, name, edit))
    body = await ok_json(c, "/earth/events")
    assert not body["health"]["degraded"]
    assert "gdacs:EQ:1569499" in [e["id"] for e in body["events"]]
    first = "usgs:us7000r1a1" if source == "usgs" else "gdacs:EQ:1569499"
    feed = await ok_json(c, f"/earth/w/feed-{source}")
    ev = next(e for e in feed["data"] if e["id"] == first)
    for value in ((ev.get("severity") or {}).get("value"), (ev.get("extra") or {}).get("magnitude")):
        assert value is None or isinstance(value, float)             # never "big" or "n/a"
    assert ev.get("fromTime") is None or ev["fromTime"].endswith("Z")
    assert ev.get("alertScore") is None or isinstance(ev["alertScore"], float)
    await ok_json(c, "/public/v1/anon/events")
    await ok_json(c, "/earth/event-brief?id=gdacs:EQ:1569499")


# ---- 3. GDACS answering JSON null ------------------------------------------------------------

async def test_gdacs_answering_null_is_degraded_not_no_events_and_not_cached(c, upstream):
    upstream.set(GDACS, Canned(200, b"null"))
    r = await c.get("/earth/events")
    body = r.json()
    gdacs = report(body, "GDACS")
    assert not gdacs["ok"] and "null" in gdacs["error"] and body["health"]["degraded"]
    assert r.headers["Cache-Control"] == "no-store"
    upstream.set_json(GDACS, sample("gdacs", "events/geteventlist/EVENTS4APP"))
    body = await ok_json(c, "/earth/events")
    assert report(body, "GDACS")["ok"] and any(e["id"] == "gdacs:EQ:1569499" for e in body["events"])
    await ok_json(c, "/earth/event-brief?id=gdacs:EQ:1569499")


async def test_gdacs_204_is_still_no_events(c, upstream):
    upstream.set(GDACS, Canned(204, b""))
    body = await ok_json(c, "/earth/events")
    assert report(body, "GDACS") == {"name": "GDACS", "ok": True, "license": "GDACS-terms-attribution",
                                     "records": 0}


# ---- 4. a widget whose source failed counts null, not 0 --------------------------------------

@pytest.mark.parametrize("path, widget", [(USGS, "/earth/w/feed-usgs"),
                                          ("/open_meteo_point/v1/forecast",
                                           "/earth/w/wx-current?lat=-6.25&lon=106.87")])
async def test_a_widget_whose_source_failed_has_an_unknown_count(c, upstream, path, widget):
    for p in [q for q in upstream.routes if q == path or q.rsplit(".", 1)[0] == path]:
        upstream.set(p, Canned(500, b'{"error":"boom"}'))
    body = await ok_json(c, widget)
    assert body["health"]["degraded"] and body["count"] is None and body["data"] == []
    assert "None" not in body["health"]["sources"][0]["error"]          # Open-Meteo's error without a reason


async def test_a_widget_of_a_source_not_configured_has_an_unknown_count(c):
    c.services.sources.pop("fred")
    body = await ok_json(c, "/earth/w/fred-unrate")
    assert body["health"]["degraded"] and body["count"] is None and body["data"] == []


# ---- 5. a figure that is not a finite number -------------------------------------------------

@pytest.mark.parametrize("raw", ["NaN", "1e999", "-inf", "n/a"])
async def test_a_fred_value_that_is_not_a_finite_number_is_unknown(c, upstream, raw):
    serve(upstream, FRED, changed("fred", "series/observations.json",
                                  lambda d: d["observations"][1].__setitem__("value", raw)))
    body = await ok_json(c, "/earth/w/fred-unrate?limit=6&units=lin")
    assert body["data"][1]["value"] is None and body["data"][1]["confidence"] == "unknown"


async def test_a_coingecko_price_that_is_not_a_number_is_unknown(c, upstream):
    serve(upstream, CG, changed("coingecko", "api/v3/simple/price.json",
                                lambda d: d["bitcoin"].__setitem__("usd", "n/a")))
    body = await ok_json(c, "/earth/w/cg-bitcoin")
    assert body["data"][0]["price"] == {"value": None, "confidence": "unknown"}


# ---- 6. a data time far ahead of the clock ---------------------------------------------------

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)


async def test_a_coral_product_dated_far_ahead_has_an_unknown_age(c, upstream, monkeypatch):
    fixed_clock(monkeypatch, coral, NOW)
    serve(upstream, CRW, changed("crw", "griddap/noaacrwbaa7dDaily.json",
                                 lambda d: [r.__setitem__(0, "2099-01-01T12:00:00Z") for r in d["table"]["rows"]]))
    body = await ok_json(c, "/public/v1/anon/coral?bbox=115,-8.25,115.25,-8")
    assert body["ageS"] is None and body["stale"] is None
    assert any("2099-01-01T12:00:00Z" in cv and "unknown" in cv for cv in body["caveats"])


async def test_an_air_quality_reading_timed_far_ahead_has_an_unknown_age(c, upstream, monkeypatch):
    fixed_clock(monkeypatch, air_quality, NOW)
    serve(upstream, WAQI, changed("waqi", "feed/jakarta.json",
                                  lambda d: d["data"]["time"].__setitem__("s", "2099-01-01 13:00:00")))
    body = await ok_json(c, "/public/v1/anon/air-quality")
    assert all(s["ageS"] is None and s["stale"] is None for s in body["stations"])
    assert all(r["ageS"] is None and r["stale"] is None for r in body["readings"])
    assert any("cannot be right" in cv and "stale: null" in cv for cv in body["caveats"])


# (7, event changes with no poll counting null: tests/test_event_changes.py)


# ---- 8. a record listed twice ----------------------------------------------------------------

@pytest.mark.parametrize("source, index, eid", [("gdacs", 1, "gdacs:TC:1001214"), ("usgs", 1, "usgs:us7000r1b7")])
async def test_a_record_listed_twice_is_served_once(c, upstream, source, index, eid):
    path, name = (USGS, "4.5_week.geojson") if source == "usgs" else (GDACS, "events/geteventlist/EVENTS4APP")
    serve(upstream, path, changed(source, name, lambda d: d["features"].append(copy.deepcopy(d["features"][index]))))
    body = await ok_json(c, "/earth/events")
    ids = [e["id"] for e in body["events"]]
    assert ids.count(eid) == 1 and body["count"] == len(ids) == 9
    assert report(body, source.upper())["records"] == (6 if source == "gdacs" else 4)
    feed = await ok_json(c, f"/earth/w/feed-{source}")
    assert [d["id"] for d in feed["data"]].count(eid) == 1


# ---- 9. an empty MAGMA list ------------------------------------------------------------------

async def test_an_empty_magma_list_is_no_answer(c, upstream):
    serve(upstream, MAGMA, [])
    body = await ok_json(c, "/public/v1/anon/volcano-alerts")
    assert body["health"]["degraded"] and body["count"] is None and body["byLevel"] is None
    feed = await ok_json(c, "/earth/w/feed-magma")
    assert feed["count"] is None


def test_a_gdacs_time_with_an_offset_is_served_in_utc_and_sorts_as_a_time():
    """GDACS writes naive UTC times; one with an offset was served as ``…-05:00Z``, which no reader
    parses (so the event no longer merged with its USGS record), and sorted among the others as text."""
    from coordinator.sources.gdacs import _utc
    assert _utc("2026-10-04T15:27:25") == "2026-10-04T15:27:25Z"
    assert _utc("2026-10-04T15:27:25-05:00") == "2026-10-04T20:27:25Z"
    assert _utc("2026-10-04T15:27:25+07:00") == "2026-10-04T08:27:25Z"
    assert _utc("26/10/2026") is None and _utc(None) is None


def test_a_quake_without_a_depth_says_so_and_a_station_time_is_served_in_utc():
    from coordinator.sources.usgs import parse_feature
    from coordinator.twin.air import parse_station
    quake = parse_feature({"id": "us1", "geometry": {"type": "Point", "coordinates": [107.6, -6.9]},
                           "properties": {"mag": 5.1, "magType": "mww", "time": 1764000000000, "place": "Java"}})
    assert quake.severity["text"] == "Magnitude 5.1 mww, depth unknown"        # it read "depth None km"
    station = parse_station({"uid": 1, "lat": -6.2, "lon": 106.8, "aqi": "57",
                             "station": {"name": "Jakarta", "time": "2026-11-25T13:00:00+07:00"}})
    assert station["properties"]["time"] == "2026-11-25T06:00:00Z"             # the station's offset was passed on
