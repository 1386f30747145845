"""GET /public/v1/{cred}/air-quality: WAQI station feeds from the recorded sample: each reading
with its station, time, pollutant, value and the scale it is on; weather and forecasts left out;
the token's absence, WAQI's errors-with-200 and an offline station said plainly."""
from __future__ import annotations

import pytest

from coordinator.panels.air_quality import _utc
from tests.support import make_settings, start_coordinator, stop_coordinator

FEED = "/waqi/feed/jakarta"


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
                  "attributions": pm["attributions"], "license": "WAQI terms (non-commercial, attribution required)"}
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


def test_times_without_an_offset_are_unknown():
    assert _utc("2026-11-25T13:00:00+07:00") == "2026-11-25T06:00:00Z"
    assert _utc("2026-11-25T13:00:00") is None and _utc(None) is None
