"""GET /earth/w/{id} and /earth/widgets.json on a real coordinator, each adapter read from its
recorded sample served by the fake upstream: parameters validated by the widget's own record,
404 for an unknown id, the twin's route ahead of the widget pattern, keyed upstreams degraded
without their key, each adapter's cache lifetime, and the MCP face."""
from __future__ import annotations

import mcp
import pytest

from coordinator.demo.upstream import Canned
from coordinator.widgets.tools import per_adapter
from tests.support import make_settings, start_coordinator, stop_coordinator

FRED = "/earth/w/fred-unrate"


@pytest.fixture
async def c(sqlite_url, upstream):
    c = await start_coordinator(make_settings(sqlite_url, upstream, sources={"fred": {"api_key": "FREDKEY"}}))
    yield c
    await stop_coordinator(c)


async def read(c, path, status=200):
    r = await c.get(path)
    body = r.json()
    assert r.status == status, body
    return r, body


# ---- adapters, each against its recorded answer ------------------------------------------

async def test_fred_observations_newest_first_with_a_missing_value_unknown(c, upstream):
    _, body = await read(c, FRED + "?limit=6&units=lin")
    assert list(body)[0] == "caveats" and body["health"]["sourcesUsable"] == 1
    assert body["widget"]["source"] == "fred" and body["widget"]["upstreamIds"] == {"seriesId": "UNRATE"}
    first, second = body["data"][:2]
    assert first == {"date": "2026-10-01", "value": None, "confidence": "unknown", "license": body["widget"]["license"]}
    assert second["value"] == 4.4 and second["confidence"] == "high"
    assert any("Unconfirmed" in cv for cv in body["caveats"])          # the seed list is a third party's
    assert any("not zero" in cv for cv in body["caveats"])


async def test_a_fred_transformation_is_said_since_the_widgets_units_are_the_series_own(c):
    _, body = await read(c, "/earth/w/fred-unrate?units=pch")
    assert any("'pch' transformation of the series (percent change)" in cv for cv in body["caveats"])
    _, plain = await read(c, "/earth/w/fred-unrate")
    assert not any("transformation" in cv for cv in plain["caveats"])


async def test_fred_error_answer_is_degraded_with_its_message(c, upstream):
    upstream.set_json("/fred/series/observations", {"error_code": 400,
                                                    "error_message": "Bad Request.  The series does not exist."}, 400)
    r, body = await read(c, FRED)
    assert body["health"]["sources"][0]["error"].startswith("FRED said 400: Bad Request.")
    assert "FREDKEY" not in r.body.decode() and r.headers["Cache-Control"] == "no-store"


async def test_a_keyed_upstream_without_its_key_is_degraded_naming_the_setting(sqlite_url, upstream):
    c = await start_coordinator(make_settings(sqlite_url, upstream))
    try:
        r, body = await read(c, FRED)
        source = body["health"]["sources"][0]
        assert source["ok"] is False and "SIS_SOURCES__FRED__API_KEY" in source["error"]
        assert body["health"]["degraded"] is True and r.headers["Cache-Control"] == "no-store"
        assert upstream.hits.get("/fred/series/observations") is None     # never asked without a key
    finally:
        await stop_coordinator(c)


async def test_world_bank_indicator_for_a_country_and_an_unrecorded_one_degraded(c):
    _, body = await read(c, "/earth/w/wb-ny.gdp.mktp.cd?country=WLD&from_year=2020&to_year=2025")
    assert body["widget"]["upstreamIds"]["indicator"] == "NY.GDP.MKTP.CD" and body["widget"]["confirmed"]
    assert body["data"][0] == {"date": "2025", "value": None, "confidence": "unknown", "country": "World",
                               "countryCode": "WLD", "license": "CC-BY-4.0"}
    assert body["data"][1]["value"] == 111326370929034.1
    assert not any("Unconfirmed" in cv for cv in body["caveats"])
    r = await c.get("/earth/w/wb-ny.gdp.mktp.cd?country=WLD&from_year=2020&to_year=2031")
    assert r.status == 200, r.json()          # a year past the data's last is a question, not a bad one
    _, other = await read(c, "/earth/w/wb-ny.gdp.mktp.cd?country=IDN")
    assert other["health"]["degraded"] is True and other["data"] == []


async def test_world_bank_answer_for_another_indicator_is_refused(c, upstream):
    upstream.set_json("/worldbank/v2/country/WLD/indicator/SP.POP.TOTL",
                      [{"page": 1, "pages": 1, "per_page": 50, "total": 1},
                       [{"indicator": {"id": "NY.GDP.MKTP.CD", "value": "GDP"}, "country": {"id": "1W", "value": "World"},
                         "countryiso3code": "WLD", "date": "2024", "value": 1.0}]])
    _, body = await read(c, "/earth/w/wb-sp.pop.totl")
    assert "not SP.POP.TOTL" in body["health"]["sources"][0]["error"]


async def test_coingecko_price_and_an_id_it_does_not_know(c):
    _, body = await read(c, "/earth/w/cg-bitcoin?vs_currency=usd")
    row = body["data"][0]
    assert row["price"] == {"value": 91234.5, "confidence": "high"} and row["change24hPct"]["value"] == -1.2345
    assert row["lastUpdated"] == "2026-11-25T21:00:00Z"
    _, eth = await read(c, "/earth/w/cg-ethereum")          # the recorded answer holds bitcoin only
    assert "no usd price for 'ethereum'" in eth["health"]["sources"][0]["error"]


async def test_swpc_reads_both_table_shapes_newest_first(c):
    _, kp = await read(c, "/earth/w/swpc-noaa-planetary-k-index?limit=3")
    # Both of SWPC's forms of time_tag served as one, ISO 8601 in UTC (neither names its zone).
    assert [r["time_tag"] for r in kp["data"]] == ["2026-11-24T21:00:00Z", "2026-11-24T18:00:00Z",
                                                    "2026-11-24T15:00:00Z"]
    assert kp["data"][0]["Kp"] is None and kp["data"][1]["Kp"] == 4.67 and kp["data"][0]["license"] == "public-domain"
    _, plasma = await read(c, "/earth/w/swpc-solar-wind-plasma-1-day")
    assert plasma["data"][1] == {"time_tag": "2026-11-25T05:58:00Z", "density": 4.2, "speed": 415.0,
                                 "temperature": 60120.0, "license": "public-domain"}
    assert plasma["data"][0]["speed"] is None and plasma["widget"]["confirmed"] is False


async def test_cftc_positions_with_a_missing_column_unknown(c):
    _, body = await read(c, "/earth/w/cftc-13874a?limit=2")
    first, second = body["data"]
    assert first["reportDate"] == "2026-11-17" and first["nonCommercial"] == {
        "long": 312456, "short": 401234, "net": -88778, "confidence": "high"}
    assert second["nonCommercial"] == {"long": 305432, "short": None, "net": None, "confidence": "unknown"}
    assert any("not confirmed by a recorded answer" in cv for cv in body["caveats"])


async def test_open_meteo_current_and_daily_at_a_point(c):
    _, cur = await read(c, "/earth/w/wx-current?lat=-6.2&lon=106.8")
    row = cur["data"][0]
    assert row["time"] == "2026-11-25T06:00:00Z" and row["temperature_2m"] == {"value": 31.4, "unit": "°C",
                                                                               "confidence": "low"}
    _, daily = await read(c, "/earth/w/wx-daily?lat=-6.2&lon=106.8&days=3")
    assert [d["date"] for d in daily["data"]] == ["2026-11-25", "2026-11-26", "2026-11-27"]
    assert daily["data"][2]["temperature_2m_min"]["value"] is None
    assert daily["data"][2]["temperature_2m_min"]["confidence"] == "unknown"
    _, far = await read(c, "/earth/w/wx-current?lat=51.5&lon=-0.1")     # the recorded answer is Jakarta's
    assert "not near 51.5,-0.1" in far["health"]["sources"][0]["error"]


async def test_a_feed_widget_serves_the_registered_sources_records(c):
    _, body = await read(c, "/earth/w/feed-usgs?limit=2")
    assert body["widget"]["category"] == "Earth" and body["count"] == 2
    assert all(r["license"] == "public-domain" and "eventType" in r for r in body["data"])


async def test_a_widget_over_a_twin_feed_reads_it_once_whatever_its_limit_and_waits_after_a_failure(c, upstream):
    """Each limit asked was one more upstream call: 15 requests spent Launch Library's hour."""
    path = "/launch_library/launch/upcoming"
    counts = []
    for n in (1, 2, 50):
        _, body = await read(c, f"/earth/w/feed-launch_library?limit={n}")
        assert body["health"]["degraded"] is False
        counts.append(body["count"])
    assert counts[:2] == [1, 2] and counts[2] >= 2 and upstream.hits[path] == 1
    upstream.set_json("/gdelt/doc/doc", {"error": "throttled"}, status=429)
    for n in (1, 2):
        _, body = await read(c, f"/earth/w/feed-gdelt?limit={n}")
        assert body["health"]["degraded"] is True
    assert upstream.hits["/gdelt/doc/doc"] == 1          # the failed read is not asked again at once


# ---- parameters from the catalogue, unknown ids, routing ----------------------------------

@pytest.mark.parametrize("query, parameter", [
    ("/earth/w/fred-unrate?limit=0", "limit"),
    ("/earth/w/fred-unrate?limit=1001", "limit"),
    ("/earth/w/fred-unrate?units=percent", "units"),
    ("/earth/w/fred-unrate?start=2020-1-1", "start"),
    ("/earth/w/fred-unrate?start=2020-13-01", "start"),               # the pattern's shape, no such date
    ("/earth/w/fred-unrate?end=2023-02-29", "end"),
    ("/earth/w/fred-unrate?start=2021-01-01&end=2020-01-01", "start"),
    ("/earth/w/fred-unrate?country=IDN", "country"),                 # a World Bank widget's, not FRED's
    ("/earth/w/wb-ny.gdp.mktp.cd?from_year=1959", "from_year"),
    ("/earth/w/wb-ny.gdp.mktp.cd?from_year=2020&to_year=2010", "from_year"),
    ("/earth/w/wb-ny.gdp.mktp.cd?to_year=2101", "to_year"),
    ("/earth/w/wb-ny.gdp.mktp.cd?country=INDONESIA", "country"),
    ("/earth/w/cg-bitcoin?vs_currency=doge", "vs_currency"),
    ("/earth/w/wx-current?lat=-6.2", "lon"),
    ("/earth/w/wx-daily?lat=-6.2&lon=106.8&days=17", "days"),
    ("/earth/w/swpc-noaa-planetary-k-index?limit=", "limit"),
])
async def test_a_bad_parameter_is_400_naming_it(c, query, parameter):
    r = await c.get(query)
    body = r.json()
    assert r.status == 400 and body["error"]["code"] == "bad_parameter", body
    assert body["error"]["details"]["parameter"] == parameter


async def test_an_unknown_widget_is_404_in_the_one_error_shape(c):
    r = await c.get("/earth/w/fred-nosuchseries")
    body = r.json()
    assert r.status == 404 and body["error"]["code"] == "not_found"
    assert body["error"]["details"] == {"id": "fred-nosuchseries", "widgets": "/earth/widgets.json", "didYouMean": []}


async def test_twin_earth_is_the_twins_route_not_a_widget(c):
    r = await c.get("/earth/w/twin_earth")
    assert r.status == 200 and "unavailable" in r.json()


# ---- the manifest ------------------------------------------------------------------------

async def test_widgets_json_lists_every_widget_with_its_parameters_and_lists(c):
    r, body = await read(c, "/earth/widgets.json")
    assert body["count"] == 1679 and len(body["widgets"]) == 1679
    assert body["categories"]["Macro"] == 961 and body["categories"]["Earth"] == 1
    w = next(x for x in body["widgets"] if x["id"] == "fred-unrate")
    assert {p["name"] for p in w["params"]} == {"start", "end", "limit", "units"}
    assert all(v["how"] for v in body["lists"].values())
    assert r.headers["Cache-Control"] == "public, max-age=3600"
    _, crypto = await read(c, "/earth/widgets.json?category=Crypto")
    assert crypto["count"] == 17 and {x["category"] for x in crypto["widgets"]} == {"Crypto"}
    _, gdp = await read(c, "/earth/widgets.json?q=GDP%20current%20US$&category=Macro")
    assert "wb-ny.gdp.mktp.cd" in {x["id"] for x in gdp["widgets"]} and gdp["count"] < 20


# ---- caching per adapter -----------------------------------------------------------------

async def test_reads_are_cached_per_adapter_lifetime_and_degraded_ones_are_not(c, upstream):
    assert per_adapter("coingecko").cache_ttl_s == 60 and per_adapter("worldbank").cache_ttl_s == 86400
    assert per_adapter("usgs").cache_ttl_s == 300
    for _ in range(3):
        await read(c, "/earth/w/cg-bitcoin")
    assert upstream.hits["/coingecko/api/v3/simple/price"] == 1
    await read(c, "/earth/w/cg-bitcoin?vs_currency=eur")              # other parameters, other entry
    assert upstream.hits["/coingecko/api/v3/simple/price"] == 2
    upstream.set("/swpc/products/10cm-flux-30-day.json", Canned(503))
    for _ in range(2):
        await read(c, "/earth/w/swpc-10cm-flux-30-day")
    assert upstream.hits["/swpc/products/10cm-flux-30-day.json"] == 2


# ---- the MCP face ------------------------------------------------------------------------

async def test_mcp_has_one_widget_tool_taking_the_id(c):
    async with mcp.Client(c.base_url + "/mcp", mode="auto") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool("widget", {"id": "swpc-noaa-planetary-k-index", "limit": 2})
        missing = await client.call_tool("widget", {"id": "no-such-widget"})
    assert sum(1 for n in tools if "widget" in n) == 2            # widget, widget_manifest
    schema = tools["widget"].input_schema
    assert schema["required"] == ["id"] and "enum" not in schema["properties"]["id"]     # a pattern: 36 KB less
    assert {"limit", "country", "units", "lat"} <= set(schema["properties"])
    # Patterns are matched whole by the server; published anchored, a client's validator agrees.
    assert schema["properties"]["country"]["pattern"] == "^(?:[A-Za-z0-9]{2,3})$"
    assert schema["properties"]["start"]["pattern"] == r"^(?:\d{4}-\d{2}-\d{2})$"
    assert result.is_error is False
    rest = (await c.get("/earth/w/swpc-noaa-planetary-k-index?limit=2")).json()
    assert result.structured_content == rest and len(rest["data"]) == 2
    assert missing.is_error is True and "no widget with id" in missing.content[0].text


async def test_declared_routes_win_over_the_widget_pattern_whatever_the_declaration_order(sqlite_url, upstream):
    from coordinator.core.registry import ToolRegistry
    from coordinator.twin.tools import TOOLS as TWIN
    from coordinator.widgets.tools import TOOLS as WIDGETS

    c = await start_coordinator(make_settings(sqlite_url, upstream), ToolRegistry([*WIDGETS, *TWIN]))
    try:
        r = await c.get("/earth/w/twin_earth")
        assert r.status == 200 and "unavailable" in r.json()
    finally:
        await stop_coordinator(c)


async def test_demo_fred_answers_only_the_series_it_recorded(upstream):
    from coordinator.sources.base import Query, SourceConfig
    from coordinator.widgets.fred import DEMO_SERIES, Fred
    fred = Fred(SourceConfig(f"{upstream.base_url}/fred", 5.0, api_key="demo"), demo=True)
    other = await fred.read(Query(ids=("GDP",)))
    assert other.report.ok is False and "UNRATE only" in other.report.error and other.records == []
    own = await fred.read(Query(ids=(DEMO_SERIES,)))
    assert own.report.ok is True and own.records
