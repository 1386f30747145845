"""GET /public/v1/{cred}/marine: BMKG sea-area forecasts from the recorded sample, high-wave and
the agency's own warnings picked out, NIHIL read as none, port warnings said as unknown, and an
area that does not answer making the answer degraded."""
from __future__ import annotations

import pytest

from coordinator.demo.upstream import Canned
from coordinator.panels.marine import utc, wave
from tests.support import make_settings, start_coordinator, stop_coordinator

AREA = {"code": "O.02", "name": "Samudera Hindia selatan Jawa Timur", "issued": "2026-11-25 05:00 UTC",
        "data": [{"valid_from": "2026-11-25 12:00 UTC", "valid_to": "2026-11-26 00:00 UTC", "time_desc": "Hari ini",
                  "weather": "Cerah Berawan", "warning_desc": "NIHIL", "wave_cat": "Sangat Tinggi",
                  "wave_desc": "4.0 - 6.0 m", "wind_from": "Tenggara", "wind_to": "Selatan",
                  "wind_speed_min": 15, "wind_speed_max": 30}]}


@pytest.fixture
async def c(db_url, upstream):
    c = await start_coordinator(make_settings(db_url, upstream))
    yield c
    await stop_coordinator(c)


async def test_warnings_from_the_recorded_forecast(c):
    r = await c.get("/public/v1/anon/marine")
    body = r.json()
    assert r.status == 200 and list(body)[0] == "caveats" and "Port warnings are not served" in body["caveats"][0]
    assert body["ports"] is None and body["count"] == 2
    high, told = body["warnings"]
    assert high["highWave"] and high["wave"] == {"rank": 4, "name": "Tinggi", "range": "2.5-4.0 m"}
    assert high["warning"] is None and high["validFrom"] == "2026-11-26T00:00:00Z"
    assert told["highWave"] is False and told["warning"].startswith("Waspada potensi hujan")
    assert all(w["license"] == "BMKG (attribution required)" for w in body["warnings"])
    area = body["areas"][0]
    assert area["code"] == "O.01" and area["issued"] == "2026-11-25T05:00:00Z" and len(area["periods"]) == 3
    assert area["periods"][0]["warning"] is None and area["license"]


async def test_several_areas_and_one_that_fails(db_url, upstream):
    c = await start_coordinator(make_settings(db_url, upstream, sources={"bmkg_marine": {"areas": "O.01,O.02"}}))
    try:
        upstream.set_json("/bmkg_marine/public_api/perairan/O.02.json", AREA)
        body = (await c.get("/public/v1/anon/marine")).json()
        assert [a["code"] for a in body["areas"]] == ["O.01", "O.02"]
        assert body["warnings"][-1]["area"] == "O.02" and body["warnings"][-1]["wave"]["rank"] == 5
        upstream.set("/bmkg_marine/public_api/perairan/O.02.json", Canned(503, b"busy", "text/plain"))
    finally:
        await stop_coordinator(c)
    c = await start_coordinator(make_settings(db_url, upstream, sources={"bmkg_marine": {"areas": "O.01,O.02"}}))
    try:
        body = (await c.get("/public/v1/anon/marine")).json()
        assert body["health"]["degraded"] and "sea area O.02: HTTP 503" in body["health"]["sources"][0]["error"]
        assert body["count"] is None
    finally:
        await stop_coordinator(c)


@pytest.mark.parametrize("cat, rank", [("Tenang", 1), ("rendah", 2), ("Sedang", 3), ("Tinggi", 4),
                                       ("Sangat  Tinggi", 5), ("Ekstrem", 6), ("Sangat Ekstrem", 7), ("?", None)])
def test_wave_categories(cat, rank):
    assert wave(cat)["rank"] == rank


def test_times_read_as_utc():
    assert utc("2023-05-31 12:00 UTC") == "2023-05-31T12:00:00Z" and utc("") is None and utc("soon") is None
