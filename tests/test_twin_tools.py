"""twin_earth (/earth/w/twin_earth, /legacy/w/twin_earth, MCP), GET /public/v1/{cred}/twin and
GET /public/v1/{cred}/traffic-tiles on a real coordinator, every upstream answered by its
recorded sample from the fake upstream: the selection rules over HTTP, one layer source down
while the others answer, and the twin route winning over a widget pattern."""
from __future__ import annotations

import mcp
import pytest

from coordinator.demo.upstream import Canned
from coordinator.twin import feeds
from coordinator.twin.layers import LAYERS
from tests.support import make_settings, start_coordinator, stop_coordinator

USGS = "/usgs/4.5_week.geojson"
TOMTOM_KEY = "tt-test-key"


@pytest.fixture
async def c(db_url, upstream):
    c = await start_coordinator(make_settings(db_url, upstream, sources={"waqi_map": {"api_key": "waqi-test"}}))
    yield c
    await stop_coordinator(c)


async def test_twin_earth_serves_every_live_layer_and_names_the_rest(c):
    for family in ("earth", "legacy"):
        r = await c.get(f"/{family}/w/twin_earth")
        body = r.json()
        assert r.status == 200 and list(body)[0] == "caveats", body
        assert body["health"]["degraded"] is False, body["health"]
        layers, unavailable = body["layers"], {u["id"]: u["reason"] for u in body["unavailable"]}
        assert set(layers) | set(unavailable) == set(LAYERS)            # every known layer is accounted for
        assert not set(layers) & set(unavailable)
        for lid in ("quakes", "disasters", "cyclones", "air", "iss", "launches", "weather", "news",
                    "ev:wildfires", "ev:severeStorms", "overlay:radar", "overlay:satellite", "overlay:roads"):
            assert lid in layers, lid
        assert "withdrawn" in unavailable["flights"] and "data-licensing" in unavailable["flights"]
        assert "SIS_SOURCES__TOMTOM_TRAFFIC__API_KEY" in unavailable["overlay:traffic"]
        assert "sis ingest ourairports" in unavailable["airports"]
        for lid in ("radio", "cameras", "companies", "exchanges", "overlay:places", "overlay:towers"):
            assert unavailable[lid]
        assert body["caps"] == {"plan": "anon", "pointsPerLayer": 800, "twinPoints": 3000}
    assert r.headers["Cache-Control"].startswith("public")


async def test_layer_records_carry_their_source_and_license(c):
    body = (await c.get("/earth/w/twin_earth")).json()
    quakes = body["layers"]["quakes"]
    assert quakes["source"] == "USGS" and quakes["license"] == "public-domain" and quakes["type"] == "FeatureCollection"
    assert quakes["count"] == len(quakes["features"]) > 0
    for layer in body["layers"].values():
        for f in layer.get("features", []):
            assert f["properties"]["license"], (layer["id"], f)
    assert all(f["properties"]["eventType"] == "TC" for f in body["layers"]["cyclones"]["features"])
    assert all(f["properties"]["eventType"] != "TC" for f in body["layers"]["disasters"]["features"])
    storm = body["layers"]["ev:severeStorms"]["features"][0]
    assert storm["geometry"] == {"type": "Point", "coordinates": [-100.9, 14.8]} and storm["properties"]["trackFixes"] == 3
    assert body["layers"]["ev:drought"]["features"] == [] and body["layers"]["ev:drought"]["count"] == 0
    assert {f["id"] for f in body["layers"]["ev:floods"]["features"]} == {"EONET_15590"} == \
        {f["id"] for f in body["layers"]["ev:dustHaze"]["features"]}
    iss = body["layers"]["iss"]["features"][0]
    assert iss["geometry"]["coordinates"] == [-111.864, -24.1355] and iss["properties"]["at"] == "2022-08-03T06:55:44Z"
    launches = body["layers"]["launches"]["features"]
    assert len(launches) == 2 and launches[0]["geometry"]["coordinates"] == [-80.57735736, 28.56194122]
    assert all(f["geometry"] is None for f in body["layers"]["news"]["features"])
    air = {f["properties"]["station"]: f["properties"]["aqi"]["value"] for f in body["layers"]["air"]["features"]}
    assert air["London Marylebone Road, UK"] is None and air["Jakarta Central, Indonesia"] == 152
    radar = body["layers"]["overlay:radar"]
    assert radar["tiles"] == "https://tilecache.rainviewer.com/v2/radar/1609395600/256/{z}/{x}/{y}/2/1_1.png"
    assert radar["maxZoom"] == 7 and radar["license"] and radar["attribution"]
    assert body["layers"]["overlay:roads"]["license"] == "ODbL-1.0"


async def test_a_healthy_twin_is_cached_and_feeds_are_shared(c, upstream):
    for _ in range(3):
        assert (await c.get("/earth/w/twin_earth")).status == 200
    assert upstream.hits["/gdacs/events/geteventlist/EVENTS4APP"] == 1 and upstream.hits[USGS] == 1
    assert (await c.get("/public/v1/anon/twin?layers=quakes,cyclones")).status == 200
    assert upstream.hits[USGS] == 1                   # /twin reads the same kept feeds


async def test_one_source_down_degrades_its_layer_not_the_twin(c, upstream, monkeypatch):
    upstream.set(USGS, Canned(500, b"oops", "text/plain"))
    r = await c.get("/earth/w/twin_earth")
    body = r.json()
    assert r.status == 200 and body["health"]["degraded"] is True
    assert body["caveats"][0].startswith("Degraded") and r.headers["Cache-Control"] == "no-store"
    bad = [s for s in body["health"]["sources"] if not s["ok"]]
    assert [s["name"] for s in bad] == ["USGS"]
    assert "quakes" not in body["layers"]
    assert "USGS did not answer (HTTP 500)" in {u["id"]: u["reason"] for u in body["unavailable"]}["quakes"]
    assert body["layers"]["disasters"]["count"] > 0 and "iss" in body["layers"]
    await c.get("/earth/w/twin_earth")
    assert upstream.hits[USGS] == 1                   # a refusing upstream is not asked on every request...
    monkeypatch.setattr(feeds, "FAILED_BACKOFF_S", 0.0)
    c.services.extras["twin.failed"].clear()
    await c.get("/earth/w/twin_earth")
    assert upstream.hits[USGS] == 2                   # ...but a degraded answer is never kept
    r = await c.get("/public/v1/anon/twin")
    body = r.json()
    assert set(body["layers"]) == {"disasters", "cyclones"} and body["notServed"][0]["id"] == "quakes"


async def test_the_mcp_faces_answer_the_same_twin(c):
    rest = (await c.get("/earth/w/twin_earth")).json()
    for path in ("/mcp", "/legacy/mcp"):
        async with mcp.Client(c.base_url + path, mode="auto") as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert "twin_earth" in names and "twin" not in names and "traffic_tiles" not in names
            result = await client.call_tool("twin_earth", {})
        assert result.structured_content == rest


async def test_twin_selection_rules_over_http(c):
    body = (await c.get("/public/v1/anon/twin")).json()
    assert list(body["layers"]) == ["quakes", "disasters", "cyclones"]
    assert body["rejected"] == [] and body["notServed"] == []
    r = await c.get("/public/v1/anon/twin?layers=iss,bogus,flights,radio,ev:volcanoes,overlay:traffic")
    body = r.json()
    assert r.status == 200 and list(body["layers"]) == ["iss", "ev:volcanoes"]
    assert body["rejected"] == ["bogus"]
    assert [n["id"] for n in body["notServed"]] == ["flights", "radio", "overlay:traffic"]
    r = await c.get("/public/v1/anon/twin?layers=flights")
    assert r.status == 410
    err = r.json()["error"]
    assert err["code"] == "gone" and err["details"]["rejected"] == [] and err["details"]["notServed"][0]["id"] == "flights"
    r = await c.get("/public/v1/anon/twin?layers=nothing-known")
    assert r.status == 200 and r.json()["layers"] == {} and r.json()["rejected"] == ["nothing-known"]
    r = await c.get("/public/v1/anon/twin?layers=")
    assert r.status == 400 and r.json()["error"]["details"]["parameter"] == "layers"
    r = await c.get("/public/v1/anon/twin?layers=" + "q" * 501)
    assert r.status == 400 and r.json()["error"]["details"]["maxLength"] == 500
    r = await c.get("/public/v1/anon/twin?layers=" + ",".join(f"x{i}" for i in range(65)))
    assert r.status == 400 and r.json()["error"]["details"]["maxIds"] == 64


async def test_the_openapi_document_lists_the_410(c):
    doc = (await c.get("/openapi.json")).json()
    assert "410" in doc["paths"]["/public/v1/{cred}/twin"]["get"]["responses"]
    assert "410" not in doc["paths"]["/earth/w/twin_earth"]["get"]["responses"]


async def test_traffic_tiles_without_a_key_say_which_setting(c):
    r = await c.get("/public/v1/anon/traffic-tiles?bbox=106.8,-6.25,107,-6.1")
    body = r.json()
    assert r.status == 200 and body["available"] is False and body["template"] is None
    assert "SIS_SOURCES__TOMTOM_TRAFFIC__API_KEY" in body["reason"] and body["health"]["degraded"] is True
    assert r.headers["Cache-Control"] == "no-store"


async def test_traffic_tiles_with_a_key_and_the_bbox_ceiling(db_url, upstream):
    from tests.test_access_support import key
    c = await start_coordinator(make_settings(db_url, upstream, sources={"tomtom_traffic": {"api_key": TOMTOM_KEY}}))
    try:
        body = (await c.get("/public/v1/anon/traffic-tiles?bbox=106.8,-6.25,107,-6.1&zoom=10")).json()
        assert body["available"] is True and body["health"]["degraded"] is False
        assert body["template"]["tiles"].startswith(
            f"http://127.0.0.1:{upstream.port}/tomtom_traffic/relative0/{{z}}/{{x}}/{{y}}.png?key={TOMTOM_KEY}")
        assert body["tiles"] == {"z": 10, "x": [815, 816], "y": [529, 529], "count": 2}
        pro, _ = await key(c, "Pro")
        r = await c.get(f"/public/v1/{pro}/traffic-tiles?bbox=106.3,-6.8,107,-6.1")     # 0.7 deg: over 0.6
        assert r.status == 400 and r.json()["error"]["details"]["cap"] == "perEndpointBbox"
        assert (await c.get(f"/public/v1/{pro}/traffic-tiles?bbox=106.5,-6.7,107,-6.2")).status == 200
        assert (await c.get("/public/v1/anon/traffic-tiles?bbox=106.5,-6.7,107,-6.2")).json()["error"][
            "details"]["cap"] == "bboxDeg"                                                # anon: 0.25
        body = (await c.get("/earth/w/twin_earth")).json()
        assert TOMTOM_KEY in body["layers"]["overlay:traffic"]["tiles"]
    finally:
        await stop_coordinator(c)


async def test_twin_earth_wins_over_the_widget_pattern(coordinator):
    """/earth/w/{id} (widgets) and /earth/w/twin_earth share a prefix; Tornado takes the first
    route that matches, so every /w/{...} pattern must come after the twin's declared route."""
    tools = list(coordinator.services.registry)
    twin_at = next(i for i, t in enumerate(tools) if t.name == "twin_earth")
    patterns = [i for i, t in enumerate(tools) if t.routes.get("earth", "").startswith("/w/{")]
    assert all(i > twin_at for i in patterns), [tools[i].name for i in patterns]
    body = (await coordinator.get("/earth/w/twin_earth")).json()
    assert "layers" in body and "unavailable" in body
    assert set((await coordinator.get("/legacy/w/twin_earth")).json()["layers"]) == set(body["layers"])
