"""GET /public/v1/{cred}/fires: FIRMS CSV read from its recorded sample, the 24 h window from
acq_date/acq_time in UTC (unpadded times, rows either side of the edge), the bbox filter and
cap, and the MAP_KEY: without it the answer is degraded naming the setting."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from coordinator.demo.upstream import Canned
from coordinator.panels import fires
from tests.support import make_settings, start_coordinator, stop_coordinator

BBOX = "113.75,-2.5,114,-2.25"
PATH = f"/firms/DEMO_MAP_KEY/VIIRS_SNPP_NRT/{BBOX}/2"
NOW = datetime(2026, 11, 25, 6, 0, tzinfo=timezone.utc)


@pytest.fixture
async def c(db_url, upstream, monkeypatch):
    monkeypatch.setattr(fires, "utc_now", lambda: NOW)
    c = await start_coordinator(make_settings(db_url, upstream, sources={"firms": {"api_key": "DEMO_MAP_KEY"}}))
    yield c
    await stop_coordinator(c)


async def test_the_24h_window_is_computed_from_acq_date_and_time(c):
    r = await c.get(f"/public/v1/anon/fires?bbox={BBOX}")
    body = r.json()
    assert r.status == 200, body
    assert list(body)[0] == "caveats"
    times = [d["detectedAt"] for d in body["detections"]]
    # 2026-11-24 0559 is 24 h 1 min old: out; 0600 is exactly 24 h: in; 0601: in.
    assert "2026-11-24T05:59:00Z" not in times
    assert times == ["2026-11-25T05:12:00Z", "2026-11-25T00:45:00Z", "2026-11-25T00:05:00Z",
                     "2026-11-24T18:05:00Z", "2026-11-24T06:01:00Z", "2026-11-24T06:00:00Z"]
    assert body["count"] == 6 and body["window"] == {"from": "2026-11-24T06:00:00Z", "to": "2026-11-25T06:00:00Z"}
    first = body["detections"][0]
    assert first["confidence"] == {"scale": "class (VIIRS: low, nominal, high)", "value": "high"}
    assert first["frpMW"] == 15.03 and first["brightnessK"] == 346.2 and first["dayNight"] == "day"
    assert all(d["license"] == "public-domain" for d in body["detections"])
    assert body["health"]["sources"] == [{"name": "NASA FIRMS", "ok": True, "license": "public-domain",
                                          "records": 7}]


@pytest.mark.parametrize("acq_time, expected", [("5", (0, 5)), ("45", (0, 45)), ("230", (2, 30)),
                                                ("0050", (0, 50)), ("1405", (14, 5)), ("0", (0, 0))])
def test_unpadded_acq_time_reads_as_hhmm(acq_time, expected):
    t = fires.acquired_at("2026-11-25", acq_time)
    assert (t.hour, t.minute) == expected and t.tzinfo is timezone.utc


@pytest.mark.parametrize("acq_time", ["2400", "1260", "12:30", "", "12345"])
def test_a_time_that_is_not_hhmm_is_refused(acq_time):
    with pytest.raises(ValueError):
        fires.acquired_at("2026-11-25", acq_time)


async def test_the_edge_moves_with_the_clock_and_modis_rows_parse(c, upstream, monkeypatch):
    monkeypatch.setattr(fires, "utc_now", lambda: datetime(2026, 11, 25, 0, 30, tzinfo=timezone.utc))
    csv = ("latitude,longitude,brightness,scan,track,acq_date,acq_time,satellite,instrument,confidence,version,"
           "bright_t31,frp,daynight\n"
           "-2.4,113.8,331.3,1.3,1.1,2026-11-24,29,Terra,MODIS,48,6.1NRT,307.5,22.5,D\n"      # 24 h 1 min: out
           "-2.4,113.8,331.3,1.3,1.1,2026-11-24,30,Aqua,MODIS,77,6.1NRT,307.5,22.5,N\n"       # exactly 24 h: in
           "-2.4,113.8,331.3,1.3,1.1,2026-11-25,31,Aqua,MODIS,90,6.1NRT,307.5,22.5,N\n"       # a minute ahead: in
           "-2.4,113.8,331.3,1.3,1.1,2026-11-25,45,Aqua,MODIS,90,6.1NRT,307.5,22.5,N\n"       # past the skew: out
           "-2.4,114.2,331.3,1.3,1.1,2026-11-25,10,Aqua,MODIS,90,6.1NRT,307.5,22.5,N\n")      # outside bbox: out
    upstream.set(PATH, Canned(200, csv.encode(), "text/csv"))
    body = (await c.get(f"/public/v1/anon/fires?bbox={BBOX}")).json()
    # A detection a minute after this answer's clock is one of its window (clocks differ by minutes; it was
    # dropped unsaid); one past the 10-minute skew is left out and said.
    assert [d["detectedAt"] for d in body["detections"]] == ["2026-11-25T00:31:00Z", "2026-11-24T00:30:00Z"]
    assert any(cv.startswith("1 detections timed more than 10 minutes after") for cv in body["caveats"])
    assert body["detections"][1]["confidence"] == {"scale": "percent (MODIS, 0-100)", "value": 77}
    assert body["detections"][1]["satellite"] == "Aqua"


async def test_the_demo_sample_answers_any_area_with_the_rows_inside_it(c, upstream):
    """The recorded sample is one area's answer; under ``--demo`` any other area is answered from it, as
    the real service answers an area (not 404, which left every demo brief degraded): the rows inside."""
    part = (await c.get("/public/v1/anon/fires?bbox=113.9,-2.32,114,-2.25")).json()
    assert part["health"]["degraded"] is False and 0 < part["count"] < 6
    assert all(113.9 <= d["longitude"] <= 114 and -2.32 <= d["latitude"] <= -2.25 for d in part["detections"])
    away = (await c.get("/public/v1/anon/fires?bbox=107.5,-7.0,107.7,-6.8")).json()
    assert away["health"]["degraded"] is False and away["count"] == 0
    assert upstream.hits["/firms/DEMO_MAP_KEY/VIIRS_SNPP_NRT/107.5,-7,107.7,-6.8/2"] == 1


async def test_the_plan_bbox_cap_applies(c):
    r = await c.get("/public/v1/anon/fires?bbox=113.7,-2.5,114,-2.25")          # 0.3 deg > anon 0.25
    assert r.status == 400 and r.json()["error"]["details"]["cap"] == "bboxDeg"


async def test_an_invalid_key_and_a_broken_answer_are_degraded_and_not_cached(c, upstream):
    upstream.set(PATH, Canned(200, b"Invalid MAP_KEY.", "text/plain"))
    body = (await c.get(f"/public/v1/anon/fires?bbox={BBOX}")).json()
    assert body["health"]["degraded"] and "refused the MAP_KEY" in body["health"]["sources"][0]["error"]
    assert body["count"] is None and body["detections"] == []
    assert "DEMO_MAP_KEY" not in str(body)
    upstream.set(PATH, Canned(200, b"<html>maintenance</html>", "text/html"))
    body = (await c.get(f"/public/v1/anon/fires?bbox={BBOX}")).json()
    assert body["health"]["degraded"] and "not FIRMS CSV" in body["health"]["sources"][0]["error"]


async def test_a_cut_or_garbled_csv_is_degraded_not_detections_with_null_fields(c, upstream):
    # the header of the recorded sample, then one row cut short after acq_time
    header = "latitude,longitude,bright_ti4,scan,track,acq_date,acq_time,satellite,instrument,confidence," \
             "version,bright_ti5,frp,daynight\n"
    upstream.set(PATH, Canned(200, (header + "-2.3,113.9,333.5,0.42,0.37,2026-11-24,55\n").encode(), "text/csv"))
    body = (await c.get(f"/public/v1/anon/fires?bbox={BBOX}")).json()
    assert body["health"]["degraded"] and "do not have the header's 14 columns" in body["health"]["sources"][0]["error"]
    assert body["count"] is None and body["detections"] == []


async def test_a_healthy_answer_is_cached(c, upstream):
    for _ in range(3):
        assert (await c.get(f"/public/v1/anon/fires?bbox={BBOX}")).status == 200
    assert upstream.hits[PATH] == 1


async def test_without_its_key_firms_answers_degraded_naming_the_setting(db_url, upstream):
    c = await start_coordinator(make_settings(db_url, upstream))
    try:
        r = await c.get(f"/public/v1/anon/fires?bbox={BBOX}")
        body = r.json()
        assert r.status == 200 and body["health"]["degraded"] is True
        assert "SIS_SOURCES__FIRMS__API_KEY" in body["health"]["sources"][0]["error"]
        assert body["caveats"][0].startswith("Degraded") and body["count"] is None
        assert r.headers.get("Cache-Control", "").startswith("no-store")
        assert PATH not in upstream.hits
    finally:
        await stop_coordinator(c)


async def test_fires_is_on_the_credentialed_family_only(c):
    assert (await c.get(f"/earth/fires?bbox={BBOX}")).status == 404


async def test_a_csv_with_a_byte_order_mark_is_read(c, upstream):
    """A BOM (what a CSV saved by some tools starts with) made the header's first column
    "\\ufefflatitude": the whole answer read as "not FIRMS CSV"."""
    from pathlib import Path
    sample = Path(fires.__file__).parent / "samples" / "firms" / PATH.removeprefix("/firms/")
    upstream.set(PATH, Canned(200, "\ufeff".encode() + sample.with_suffix(".csv").read_bytes(), "text/csv"))
    body = (await c.get(f"/public/v1/anon/fires?bbox={BBOX}")).json()
    assert body["health"]["sources"][0]["ok"] is True and body["count"] == 6, body["health"]
