"""GET /public/v1/{cred}/marine: BMKG sea-area and port forecasts from the recorded samples,
high-wave and the agency's own warnings picked out, NIHIL read as none, an area that does not
answer making the answer degraded, and a port feed that does not answer making the ports unknown
(degraded, naming the port feed) while the sea areas still answer. Validity is judged against a
fixed clock: warnings that have ended are dropped and counted, an area whose every period has
ended is outdated and its warnings unknown."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from coordinator.demo.upstream import Canned
from coordinator.panels import marine
from coordinator.panels.marine import number, utc, wave, wave_of_desc
from tests.support import fixed_clock, make_settings, start_coordinator, stop_coordinator

# An hour after the recorded forecasts were issued (2026-11-25 05:00 UTC): every period of the
# samples (2026-11-25 00:00 to 2026-11-27 00:00) is in force or still to come.
ISSUED = datetime(2026, 11, 25, 6, 0, tzinfo=timezone.utc)
# The audit's request time: every period of the samples has ended.
AUDIT = datetime(2026, 11, 27, 5, 11, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def clock(monkeypatch):
    """The panel's clock at ISSUED; a test moves it with ``clock(t)``."""
    return fixed_clock(monkeypatch, marine, ISSUED)

# BMKG names a sea area's file {code}_{name}.json, listed at /public_api/perairan_list; the
# adapter looks a code up there and asks the file with its name URL-quoted.
O1_PATH = "/bmkg_marine/public_api/perairan/O.01_Samudera%20Pasifik%20utara%20Halmahera%20bagian%20utara.json"
O2_PATH = "/bmkg_marine/public_api/perairan/O.02_Samudera%20Hindia%20selatan%20Jawa%20Timur.json"

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
    assert r.status == 200 and list(body)[0] == "caveats" and not body["health"]["degraded"]
    assert [s["name"] for s in body["health"]["sources"]] == ["BMKG marine forecasts sea area O.01",
                                                              "BMKG port forecasts port 0088_Sintete"]
    assert body["count"] == 2
    high, told = body["warnings"]
    assert high["highWave"] and high["wave"] == {"rank": 4, "name": "Tinggi", "range": "2.5-4.0 m"}
    assert high["warning"] is None and high["validFrom"] == "2026-11-26T00:00:00Z"
    assert told["highWave"] is False and told["warning"].startswith("Waspada potensi hujan")
    assert all(w["license"] == "BMKG (attribution required)" for w in body["warnings"])
    area = body["areas"][0]
    assert area["code"] == "O.01" and area["issued"] == "2026-11-25T05:00:00Z" and len(area["periods"]) == 3
    assert area["periods"][0]["warning"] is None and area["license"]


async def test_port_warnings_from_the_recorded_port_file(c):
    body = (await c.get("/public/v1/anon/marine")).json()
    port = body["ports"][0]
    assert (port["code"], port["portId"], port["name"], port["latitude"]) == ("0088_Sintete", "0088", "Sintete", 1.2)
    assert len(port["periods"]) == 3 and port["periods"][0]["warning"] is None
    assert port["periods"][0]["windSpeed"] == {"min": 4, "max": 12, "unit": "kt"}
    assert body["portCount"] == 2
    told, high = body["portWarnings"]
    assert told["port"] == "0088_Sintete" and told["portName"] == "Sintete" and not told["highWave"]
    assert told["warning"].startswith("Waspada hujan") and told["validFrom"] == "2026-11-25T12:00:00Z"
    assert high["highWave"] and high["wave"]["name"] == "Tinggi" and high["warning"] is None
    assert all(w["license"] == "BMKG (attribution required)" for w in body["portWarnings"])


CALM = (b'{"port_id": "0100", "name": "Danau", "latitude": NaN, "longitude": 99.0, "type": "utama", "data": ['
        b'{"valid_from": "2026-11-25 00:00 UTC", "valid_to": "2026-11-25 12:00 UTC", "weather": "Cerah",'
        b' "warning_desc": "NIHIL.", "wind_from": "Timur", "wind_to": "Utara", "wind_speed_min": NaN,'
        b' "wind_speed_max": 5, "wave_desc": "0.1 - 0.5 m"}]}')


async def test_a_port_with_no_warning_and_nan_numbers(db_url, upstream):
    upstream.set("/bmkg_marine/public_api/pelabuhan/0100_Danau.json", Canned(200, CALM))
    c = await start_coordinator(make_settings(db_url, upstream, sources={"bmkg_marine": {"ports": "0088_Sintete,0100_Danau"}}))
    try:
        r = await c.get("/public/v1/anon/marine")
        body = r.json()
        assert r.status == 200 and not body["health"]["degraded"]
        calm = body["ports"][1]
        assert calm["code"] == "0100_Danau" and calm["latitude"] is None
        assert calm["periods"][0]["wave"]["name"] == "Tenang" and calm["periods"][0]["windSpeed"]["min"] is None
        assert {w["port"] for w in body["portWarnings"]} == {"0088_Sintete"} and body["portCount"] == 2
    finally:
        await stop_coordinator(c)


async def test_port_feed_down_is_unknown_while_sea_areas_answer(db_url, upstream):
    upstream.set("/bmkg_marine/public_api/pelabuhan/0088_Sintete.json", Canned(503, b"busy", "text/plain"))
    c = await start_coordinator(make_settings(db_url, upstream))
    try:
        body = (await c.get("/public/v1/anon/marine")).json()
        assert body["health"]["degraded"]
        ports = next(s for s in body["health"]["sources"] if s["name"] == "BMKG port forecasts")
        assert not ports["ok"] and ports["error"] == "port 0088_Sintete: HTTP 503"
        assert body["ports"] is None and body["portWarnings"] is None and body["portCount"] is None
        assert any("port forecasts did not answer" in cav for cav in body["caveats"])
        assert body["count"] == 2 and body["areas"][0]["code"] == "O.01"
    finally:
        await stop_coordinator(c)


async def test_no_ports_set_means_ports_unknown(db_url, upstream):
    c = await start_coordinator(make_settings(db_url, upstream, sources={"bmkg_marine": {"ports": ""}}))
    try:
        body = (await c.get("/public/v1/anon/marine")).json()
        assert body["ports"] is None and body["portCount"] is None and body["count"] == 2
        assert [s["name"] for s in body["health"]["sources"]] == ["BMKG marine forecasts sea area O.01"]
        assert any("No ports are set" in cav for cav in body["caveats"])
    finally:
        await stop_coordinator(c)


async def test_several_areas_and_one_that_fails(db_url, upstream):
    c = await start_coordinator(make_settings(db_url, upstream, sources={"bmkg_marine": {"areas": "O.01,O.02"}}))
    try:
        upstream.set_json(O2_PATH, AREA)
        body = (await c.get("/public/v1/anon/marine")).json()
        assert [a["code"] for a in body["areas"]] == ["O.01", "O.02"]
        assert body["warnings"][-1]["area"] == "O.02" and body["warnings"][-1]["wave"]["rank"] == 5
        upstream.set(O2_PATH, Canned(503, b"busy", "text/plain"))
    finally:
        await stop_coordinator(c)
    c = await start_coordinator(make_settings(db_url, upstream, sources={"bmkg_marine": {"areas": "O.01,O.02"}}))
    try:
        body = (await c.get("/public/v1/anon/marine")).json()
        # The area down is named and counted on its own; the one that answered is still served (one area
        # of several down emptied the whole panel).
        down = [s for s in body["health"]["sources"] if not s["ok"]]
        assert [s["name"] for s in down] == ["BMKG marine forecasts sea area O.02"] and "HTTP 503" in down[0]["error"]
        assert (body["health"]["sourcesQueried"], body["health"]["sourcesUsable"]) == (3, 2)
        assert [a["code"] for a in body["areas"]] == ["O.01"] and body["count"] == 2
        assert any(cav.startswith("No answer from sea area O.02") for cav in body["caveats"])
        upstream.set(O1_PATH, Canned(503, b"busy", "text/plain"))
        body = (await c.get("/public/v1/anon/marine")).json()       # every area down: the count is unknown
        assert body["count"] is None and "O.01" in body["health"]["sources"][0]["error"]
    finally:
        await stop_coordinator(c)


async def test_while_every_period_is_current_nothing_is_dropped(c):
    body = (await c.get("/public/v1/anon/marine")).json()
    assert body["asOf"] == "2026-11-25T06:00:00Z" and body["endedCount"] == 0 and body["portEndedCount"] == 0
    assert [p["ended"] for p in body["areas"][0]["periods"]] == [False, False, False]
    assert body["areas"][0]["outdated"] is False and body["ports"][0]["outdated"] is False
    assert not any("dropped" in cv or "outdated" in cv for cv in body["caveats"])


async def test_ended_warnings_are_dropped_and_counted(c, clock):
    clock(datetime(2026, 11, 26, 6, 0, tzinfo=timezone.utc))
    body = (await c.get("/public/v1/anon/marine")).json()
    assert body["asOf"] == "2026-11-26T06:00:00Z" and not body["health"]["degraded"]
    # sea area: the high-wave period (26 00:00-12:00) is in force, the told one (26 12:00-27 00:00) to come
    assert body["count"] == 2 and body["endedCount"] == 0
    assert [p["ended"] for p in body["areas"][0]["periods"]] == [True, False, False]
    # port: the told period (25 12:00-26 00:00) has ended, the high-wave one (26 00:00-12:00) is in force
    assert body["portCount"] == 1 and body["portEndedCount"] == 1
    assert [w["validTo"] for w in body["portWarnings"]] == ["2026-11-26T12:00:00Z"]
    assert body["portWarnings"][0]["highWave"] and body["ports"][0]["outdated"] is False
    assert any(cv.startswith("1 port warning whose validity had ended by 2026-11-26T06:00:00Z was dropped")
               for cv in body["caveats"])


async def test_at_the_audited_time_every_warning_has_ended_and_whether_any_holds_is_unknown(c, clock):
    clock(AUDIT)
    body = (await c.get("/public/v1/anon/marine")).json()
    assert body["asOf"] == "2026-11-27T05:11:00Z"
    assert body["warnings"] == [] and body["endedCount"] == 2 and body["count"] is None
    assert body["portWarnings"] == [] and body["portEndedCount"] == 2 and body["portCount"] is None
    assert body["areas"][0]["outdated"] is True and all(p["ended"] for p in body["areas"][0]["periods"])
    assert body["ports"][0]["outdated"] is True
    text = " ".join(body["caveats"])
    assert "2 sea-area warnings whose validity had ended by 2026-11-27T05:11:00Z were dropped" in text
    assert "2 port warnings whose validity had ended" in text
    assert "sea-area forecast of O.01 has no period still valid" in text and "unknown, not none" in text
    assert "port forecast of 0088_Sintete has no period still valid" in text


async def test_an_outdated_area_beside_a_current_one(db_url, upstream, clock):
    clock(datetime(2026, 11, 26, 6, 0, tzinfo=timezone.utc))       # O.02's only period ended at 26 00:00
    upstream.set_json(O2_PATH, AREA)
    c = await start_coordinator(make_settings(db_url, upstream, sources={"bmkg_marine": {"areas": "O.01,O.02"}}))
    try:
        body = (await c.get("/public/v1/anon/marine")).json()
        assert [a["outdated"] for a in body["areas"]] == [False, True]
        assert {w["area"] for w in body["warnings"]} == {"O.01"} and body["count"] == 2
        assert body["endedCount"] == 1
        assert any("sea-area forecast of O.02 has no period still valid" in cv for cv in body["caveats"])
    finally:
        await stop_coordinator(c)


async def test_a_warning_whose_end_cannot_be_read_is_kept_and_said_unknown(db_url, upstream):
    doc = {**AREA, "data": [{**AREA["data"][0], "valid_to": "besok"}]}
    upstream.set_json(O2_PATH, doc)
    c = await start_coordinator(make_settings(db_url, upstream, sources={"bmkg_marine": {"areas": "O.02"}}))
    try:
        body = (await c.get("/public/v1/anon/marine")).json()
        # Listed, but whether it holds now is unknown, so the count of warnings in force is too.
        assert body["count"] is None and body["warnings"][0]["validTo"] is None
        assert body["areas"][0]["periods"][0]["ended"] is None and body["areas"][0]["outdated"] is True
        assert any("no readable end (validTo null)" in cv for cv in body["caveats"])
    finally:
        await stop_coordinator(c)


@pytest.mark.parametrize("data", [[], [{"valid_to": "2019-01-02T00:00:00Z", "warning_desc": "NIHIL.",
                                        "wave_cat": "Rendah"}]], ids=["no periods", "an unreadable end, no warning"])
async def test_a_forecast_that_says_nothing_of_now_is_not_no_warning(db_url, upstream, data):
    """An area with no period, or none whose end can be read, was counted as 0 warnings."""
    upstream.set_json(O2_PATH, {**AREA, "data": data})
    c = await start_coordinator(make_settings(db_url, upstream, sources={"bmkg_marine": {"areas": "O.02"}}))
    try:
        body = (await c.get("/public/v1/anon/marine")).json()
        assert body["count"] is None and body["areas"][0]["outdated"] is True
        assert any("O.02 has no period still valid" in cv for cv in body["caveats"])
    finally:
        await stop_coordinator(c)


async def test_a_sea_area_without_a_category_reads_it_from_the_height_range(db_url, upstream):
    doc = {**AREA, "data": [{**AREA["data"][0], "wave_cat": None, "wave_desc": "2.50 - 4.00 m",
                             "warning_desc": "NIHIL."}]}
    upstream.set_json(O2_PATH, doc)
    c = await start_coordinator(make_settings(db_url, upstream, sources={"bmkg_marine": {"areas": "O.02"}}))
    try:
        body = (await c.get("/public/v1/anon/marine")).json()
        assert body["areas"][0]["periods"][0]["wave"]["name"] == "Tinggi" and body["warnings"][0]["highWave"]
    finally:
        await stop_coordinator(c)


@pytest.mark.parametrize("cat, rank", [("Tenang", 1), ("rendah", 2), ("Sedang", 3), ("Tinggi", 4),
                                       ("Sangat  Tinggi", 5), ("Ekstrem", 6), ("Sangat Ekstrem", 7), ("?", None)])
def test_wave_categories(cat, rank):
    assert wave(cat)["rank"] == rank


@pytest.mark.parametrize("desc, name", [("0.5 - 1.25 m", "Rendah"), ("1.25 - 2.5 m", "Sedang"),
                                        ("1.25 - 2.50 m", "Sedang"), ("2.5 - 4.0 m", "Tinggi"),
                                        ("> 9.0 m", "Sangat Ekstrem"), ("4,0 - 6,0 m", "Sangat Tinggi"),
                                        ("", None), ("NaN", None)])
def test_wave_category_of_a_height_range(desc, name):
    assert wave_of_desc(desc)["name"] == name


def test_numbers_nan_and_text_are_unknown():
    assert number(float("nan")) is None and number("5") is None and number(True) is None and number(7) == 7


def test_times_read_as_utc():
    assert utc("2023-05-31 12:00 UTC") == "2023-05-31T12:00:00Z" and utc("") is None and utc("soon") is None


async def test_a_sea_area_is_asked_by_its_listed_file_name_not_its_code_alone(c, upstream):
    """BMKG's sea-area files are named {code}_{name}.json and listed at /public_api/perairan_list
    (public clients read them so); the code alone (perairan/O.01.json), asked before, names no
    file. The list is asked, then the file it names, its name URL-quoted."""
    body = (await c.get("/public/v1/anon/marine")).json()
    assert body["areas"][0]["code"] == "O.01" and not body["health"]["degraded"]
    assert upstream.hits.get("/bmkg_marine/public_api/perairan_list") == 1
    assert upstream.hits.get(O1_PATH) == 1 and "/bmkg_marine/public_api/perairan/O.01.json" not in upstream.hits


async def test_a_code_missing_from_the_list_fails_that_area_alone_and_a_file_name_is_asked_as_given(db_url, upstream):
    upstream.set_json("/bmkg_marine/public_api/perairan/X.99_Laut%20Contoh.json", {**AREA, "code": "X.99"})
    c = await start_coordinator(make_settings(db_url, upstream, sources={
        "bmkg_marine": {"areas": "O.01,Z.42,X.99_Laut Contoh", "ports": ""}}))
    try:
        body = (await c.get("/public/v1/anon/marine")).json()
        sources = {s["name"]: s for s in body["health"]["sources"]}
        assert sources["BMKG marine forecasts sea area O.01"]["ok"]
        assert sources["BMKG marine forecasts sea area X.99_Laut Contoh"]["ok"]
        bad = sources["BMKG marine forecasts sea area Z.42"]
        assert not bad["ok"] and "not in BMKG's list of sea areas" in bad["error"]
        assert [a["code"] for a in body["areas"]] == ["O.01", "X.99"]
    finally:
        await stop_coordinator(c)


async def test_the_list_unreadable_fails_every_area_asked_by_code(db_url, upstream):
    upstream.set("/bmkg_marine/public_api/perairan_list", Canned(503, b"busy", "text/plain"))
    c = await start_coordinator(make_settings(db_url, upstream, sources={"bmkg_marine": {"ports": ""}}))
    try:
        body = (await c.get("/public/v1/anon/marine")).json()
        assert body["count"] is None and body["health"]["degraded"]
        assert "503" in body["health"]["sources"][0]["error"]
    finally:
        await stop_coordinator(c)
