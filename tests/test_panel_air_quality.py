"""GET /public/v1/{cred}/air-quality: WAQI station feeds from the recorded sample: each reading
with its station, time, pollutant, value and the scale it is on; weather and forecasts left out;
the token's absence, WAQI's errors-with-200 and an offline station said plainly. Each reading's
time is read from ``time.s`` at ``time.tz`` and its age judged against a fixed clock: older than
3 h is stale, flagged and said."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from coordinator.panels import air_quality
from coordinator.panels.air_quality import _utc, parse_feed, station_time
from coordinator.panels.freshness import age
from tests.support import fixed_clock, make_settings, start_coordinator, stop_coordinator

FEED = "/waqi/feed/jakarta"
# An hour after the recorded reading (2026-11-25 13:00 +07:00, 06:00 UTC).
HOUR_LATER = datetime(2026, 11, 25, 7, 0, tzinfo=timezone.utc)
STATION = {"aqi": 152, "idx": 8294, "attributions": [], "city": {"name": "Jakarta Pusat, Indonesia"},
           "dominentpol": "pm25", "iaqi": {"pm25": {"v": 152}}}


@pytest.fixture(autouse=True)
def clock(monkeypatch):
    """The panel's clock at HOUR_LATER; a test moves it with ``clock(t)``."""
    return fixed_clock(monkeypatch, air_quality, HOUR_LATER)


@pytest.fixture
async def c(db_url, upstream):
    c = await start_coordinator(make_settings(db_url, upstream, sources={"waqi": {"api_key": "tok"}}))
    yield c
    await stop_coordinator(c)


async def test_station_readings_with_their_scale(c):
    r = await c.get("/public/v1/anon/air-quality")
    body = r.json()
    assert r.status == 200 and list(body)[0] == "caveats"
    assert [x["pollutant"] for x in body["readings"]] == ["PM2.5", "PM10", "O3", "NO2", "SO2", "CO"]
    pm = body["readings"][0]
    assert pm == {"station": "Jakarta Pusat, Indonesia", "stationId": 8294, "time": "2026-11-25T13:00:00+07:00",
                  "timeUtc": "2026-11-25T06:00:00Z", "pollutant": "PM2.5", "value": 152,
                  "scale": "US EPA AQI sub-index (0-500), not a concentration", "measured": True,
                  "ageS": 3600, "stale": False,
                  "attributions": pm["attributions"], "license": "WAQI terms (non-commercial, attribution required)"}
    assert body["asOf"] == "2026-11-25T07:00:00Z" and body["staleAfterS"] == 10800
    assert body["stations"][0]["ageS"] == 3600 and body["stations"][0]["stale"] is False
    assert not any("older than" in cv for cv in body["caveats"])
    assert {a["name"] for a in pm["attributions"]} >= {"World Air Quality Index Project"}
    assert body["stations"][0]["aqi"] == {"value": 152, "scale": "US EPA AQI (0-500)"}
    assert body["stations"][0]["dominantPollutant"] == "PM2.5"
    text = r.body.decode()
    assert "forecast" not in text and '"dew"' not in text and "geo" not in body["stations"][0]
    assert body["health"]["sources"][0]["ok"] is True


async def test_an_error_with_200_and_an_offline_station(c, upstream):
    upstream.set_json(FEED, {"status": "error", "data": "Invalid key"})
    body = (await c.get("/public/v1/anon/air-quality")).json()
    assert body["health"]["degraded"] and "Invalid key" in body["health"]["sources"][0]["error"]
    assert body["count"] is None and "tok" not in str(body)


async def test_an_offline_station_is_unknown(db_url, upstream):
    upstream.set_json(FEED, {"status": "ok", "data": {"aqi": "-", "idx": 8294, "attributions": [],
                                                       "city": {"name": "Jakarta Pusat, Indonesia"}, "dominentpol": "",
                                                       "iaqi": {"pm25": {"v": "-"}, "t": {"v": 30}},
                                                       "time": {"s": "2026-11-25 13:00:00", "tz": "+07:00",
                                                                "iso": "2026-11-25T13:00:00+07:00"}}})
    c = await start_coordinator(make_settings(db_url, upstream, sources={"waqi": {"api_key": "tok"}}))
    try:
        body = (await c.get("/public/v1/anon/air-quality")).json()
        assert body["readings"] == [] and body["stations"][0]["aqi"]["value"] is None
        assert any("offline" in cv and "unknown" in cv for cv in body["caveats"])
    finally:
        await stop_coordinator(c)


async def test_without_its_token_the_answer_is_degraded_naming_the_setting(db_url, upstream):
    c = await start_coordinator(make_settings(db_url, upstream))
    try:
        body = (await c.get("/public/v1/anon/air-quality")).json()
        assert body["health"]["degraded"] and "SIS_SOURCES__WAQI__API_KEY" in body["health"]["sources"][0]["error"]
        assert FEED not in upstream.hits
    finally:
        await stop_coordinator(c)


async def test_two_day_old_readings_are_flagged_stale(c, clock):
    clock(datetime(2026, 11, 27, 6, 0, tzinfo=timezone.utc))
    body = (await c.get("/public/v1/anon/air-quality")).json()
    assert body["count"] == 6 and all(r["stale"] is True and r["ageS"] == 2 * 86400 for r in body["readings"])
    assert body["stations"][0]["stale"] is True and body["stations"][0]["timeUtc"] == "2026-11-25T06:00:00Z"
    assert any(cv.startswith("The readings of Jakarta Pusat, Indonesia are older than 3 h at 2026-11-27T06:00:00Z")
               for cv in body["caveats"])


def test_the_stale_edge_is_3_hours():
    at = datetime(2026, 11, 25, 6, 0, tzinfo=timezone.utc)
    assert air_quality.STALE_AFTER.total_seconds() == 3 * 3600
    assert age(at, datetime(2026, 11, 25, 9, 0, tzinfo=timezone.utc), air_quality.STALE_AFTER) == \
        {"ageS": 10800, "stale": False}
    assert age(at, datetime(2026, 11, 25, 9, 0, 1, tzinfo=timezone.utc), air_quality.STALE_AFTER) == \
        {"ageS": 10801, "stale": True}
    assert age(None, at, air_quality.STALE_AFTER) == {"ageS": None, "stale": None}


async def test_the_time_is_read_from_s_at_tz_without_iso(db_url, upstream):
    # time.v is the local clock counted as UTC (13:00 here, a year off in the sample): never read
    upstream.set_json(FEED, {"status": "ok", "data": {**STATION, "time": {"s": "2026-11-25 13:00:00", "tz": "+07:00",
                                                                          "v": 1764075600}}})
    c = await start_coordinator(make_settings(db_url, upstream, sources={"waqi": {"api_key": "tok"}}))
    try:
        body = (await c.get("/public/v1/anon/air-quality")).json()
        assert body["stations"][0]["time"] == "2026-11-25T13:00:00+07:00"
        assert body["stations"][0]["timeUtc"] == "2026-11-25T06:00:00Z" and body["readings"][0]["ageS"] == 3600
    finally:
        await stop_coordinator(c)


async def test_a_reading_of_unknown_time_is_of_unknown_age(db_url, upstream):
    no_tz = {"s": "2026-11-25 13:00:00", "v": 1764075600}          # no tz and no iso: the time cannot be placed
    upstream.set_json(FEED, {"status": "ok", "data": {**STATION, "time": no_tz}})
    c = await start_coordinator(make_settings(db_url, upstream, sources={"waqi": {"api_key": "tok"}}))
    try:
        body = (await c.get("/public/v1/anon/air-quality")).json()
        assert body["readings"][0]["timeUtc"] is None
        assert body["readings"][0]["ageS"] is None and body["readings"][0]["stale"] is None
        assert any("could not be read" in cv and "stale: null" in cv for cv in body["caveats"])
    finally:
        await stop_coordinator(c)


@pytest.mark.parametrize("time, utc", [({"s": "2023-12-25 09:00:00", "tz": "+05:30"}, "2023-12-25T03:30:00Z"),
                                       ({"s": "2024-09-25 16:00:00", "tz": "-06:00"}, "2024-09-25T22:00:00Z"),
                                       ({"iso": "2023-12-25T09:00:00+05:30"}, "2023-12-25T03:30:00Z"),
                                       ({"s": "2023-12-25 09:00:00", "v": 1703494800}, None),
                                       ({"v": 1703494800}, None), (None, None)])
def test_station_time_is_local_at_its_offset_never_v(time, utc):
    t = station_time(time)
    assert (t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if t else None) == utc


def test_times_without_an_offset_are_unknown():
    assert _utc("2026-11-25T13:00:00+07:00") == "2026-11-25T06:00:00Z"
    assert _utc("2026-11-25T13:00:00") is None and _utc(None) is None


async def test_one_feed_of_several_down_is_named_and_the_others_still_answer(db_url, upstream):
    """Feeds are read one by one (``Source.read_parts``): one down emptied the whole panel."""
    upstream.set_json("/waqi/feed/@1234", {"status": "error", "data": "Unknown station"})
    c = await start_coordinator(make_settings(db_url, upstream, sources={"waqi": {"api_key": "tok",
                                                                              "stations": "jakarta,@1234"}}))
    try:
        body = (await c.get("/public/v1/anon/air-quality")).json()
        assert [s["station"] for s in body["stations"]] == ["Jakarta Pusat, Indonesia"] and body["count"] >= 1
        sources = body["health"]["sources"]
        assert [(s["name"], s["ok"]) for s in sources] == [("WAQI feed jakarta", True), ("WAQI feed @1234", False)]
        assert "Unknown station" in sources[1]["error"] and body["health"]["degraded"] is True
        assert body["caveats"][0].startswith("Degraded: 1 of 2 sources did not answer (WAQI feed @1234)")
    finally:
        await stop_coordinator(c)


async def test_an_unknown_station_id_in_an_ok_envelope_is_named_not_unparseable(db_url, upstream):
    """WAQI answers an unknown ``@uid`` with ``status: ok`` and the error inside ``data``
    (joostlek/python-waqi tests/fixtures/station_number_feed_@123946.json): the feed fails with
    WAQI's words, not as an unparseable answer (a KeyError on ``city``)."""
    upstream.set_json("/waqi/feed/@123946", {"status": "ok", "data": {"status": "error", "msg": "Unknown ID"}})
    c = await start_coordinator(make_settings(db_url, upstream, sources={"waqi": {"api_key": "tok",
                                                                              "stations": "jakarta,@123946"}}))
    try:
        body = (await c.get("/public/v1/anon/air-quality")).json()
        sources = body["health"]["sources"]
        assert [(s["name"], s["ok"]) for s in sources] == [("WAQI feed jakarta", True), ("WAQI feed @123946", False)]
        assert "Unknown ID" in sources[1]["error"] and "unparseable" not in sources[1]["error"]
    finally:
        await stop_coordinator(c)


def test_a_feed_with_only_tz_and_v_has_an_unknown_time_and_an_empty_dominant_pollutant():
    """A real offline station's feed (python-waqi tests/fixtures/station_number_feed_10002.json):
    ``aqi`` "-", ``dominentpol`` "", ``time`` {"tz", "v": 0}."""
    doc = {"status": "ok", "data": {"aqi": "-", "idx": 10002, "attributions": [], "dominentpol": "",
                                    "city": {"geo": [60.9, 25.9], "name": "Station", "url": "", "location": ""},
                                    "iaqi": {"t": {"v": 5}}, "time": {"tz": "+03:00", "v": 0}}}
    rec = parse_feed(doc, "@10002")
    assert rec["aqi"]["value"] is None and rec["dominantPollutant"] is None
    assert rec["time"] is None and rec["timeUtc"] is None and rec["readings"] == []
