"""The twin's adapters against their upstreams' real formats and failures, served by the fake
upstream: a throttled or garbled answer takes its layer out with the reason (degraded), while a
source that is not configured is named as unavailable without degrading the answer."""
from __future__ import annotations

import json

import pytest

from coordinator.demo.upstream import Canned, sample
from coordinator.twin import feeds
from tests.support import make_settings, start_coordinator, stop_coordinator


@pytest.fixture(autouse=True)
def ask_again_at_once(monkeypatch):
    """These tests change an upstream's answer between requests: no back-off after a failure."""
    monkeypatch.setattr(feeds, "FAILED_BACKOFF_S", 0.0)


@pytest.fixture
async def c(sqlite_url, upstream):
    c = await start_coordinator(make_settings(sqlite_url, upstream, sources={"waqi_map": {"api_key": "k"}}))
    yield c
    await stop_coordinator(c)


async def twin(c, layers: str) -> dict:
    r = await c.get(f"/public/v1/anon/twin?layers={layers}")
    assert r.status == 200, r.body
    return r.json()


def reasons(body: dict) -> dict[str, str]:
    return {n["id"]: n["reason"] for n in body["notServed"]}


async def test_gdelt_throttle_text_and_empty_answer(c, upstream):
    upstream.set("/gdelt/doc/doc", Canned(429, b"Please limit requests to one every 5 seconds or contact us.",
                                          "text/plain"))
    body = await twin(c, "news,iss")
    assert "throttling" in reasons(body)["news"] and body["health"]["degraded"] is True
    assert "iss" in body["layers"]
    upstream.set("/gdelt/doc/doc", Canned(200, b"{}", "application/json"))
    body = await twin(c, "news")
    assert body["layers"]["news"]["count"] == 0 and body["health"]["degraded"] is False


async def test_open_meteo_must_answer_every_city(c, upstream):
    upstream.set_json("/open_meteo/forecast", sample("open_meteo", "forecast.json")[:3])
    assert "3 locations answered for 12 asked" in reasons(await twin(c, "weather"))["weather"]


async def test_open_meteo_weather_is_said_as_modelled_at_its_city(c):
    w = (await twin(c, "weather"))["layers"]["weather"]
    tokyo = w["features"][0]["properties"]
    assert w["count"] == 12 and tokyo["city"] == "Tokyo" and tokyo["time"] == "2025-09-22T06:15:00Z"
    assert tokyo["temperature"] == {"value": 21.4, "unit": "°C"} and tokyo["weather"] == "mainly clear"
    assert tokyo["modelled"] is True and tokyo["license"] == "CC-BY-4.0"


async def test_waqi_errors_arrive_with_http_200(c, upstream):
    upstream.set_json("/waqi_map/map/bounds", {"status": "error", "data": "Invalid key"})
    assert "WAQI said error (Invalid key)" in reasons(await twin(c, "air"))["air"]


async def test_an_unconfigured_key_is_unavailable_not_degraded(sqlite_url, upstream):
    c = await start_coordinator(make_settings(sqlite_url, upstream))
    try:
        body = await twin(c, "air,quakes")
        assert "SIS_SOURCES__WAQI_MAP__API_KEY" in reasons(body)["air"]
        assert body["health"]["degraded"] is False and "/waqi_map/map/bounds" not in upstream.hits
    finally:
        await stop_coordinator(c)


async def test_a_garbled_eonet_answer_takes_out_every_event_layer(c, upstream):
    upstream.set("/eonet/events", Canned(200, b"<html>maintenance</html>", "text/html"))
    body = await twin(c, "ev:wildfires,ev:volcanoes,quakes")
    assert set(reasons(body)) == {"ev:wildfires", "ev:volcanoes"} and "not JSON" in reasons(body)["ev:wildfires"]
    assert list(body["layers"]) == ["quakes"]
    assert [s["name"] for s in body["health"]["sources"] if not s["ok"]] == ["NASA EONET"]


async def test_rainviewer_without_a_past_frame(c, upstream):
    doc = sample("rainviewer", "public/weather-maps.json")
    doc["radar"]["past"] = []
    upstream.set_json("/rainviewer/public/weather-maps.json", doc)
    assert "no past radar frame" in reasons(await twin(c, "overlay:radar"))["overlay:radar"]


async def test_launches_without_a_pad_position_are_left_unplaced(c, upstream):
    doc = sample("launch_library", "launch/upcoming.json")
    doc["results"][0]["pad"]["latitude"] = 28.5                    # 2.3.0 gives numbers
    upstream.set("/launch_library/launch/upcoming", Canned(200, json.dumps(doc).encode()))
    launches = (await twin(c, "launches"))["layers"]["launches"]
    assert launches["count"] == 2 and launches["features"][0]["geometry"]["coordinates"][1] == 28.5
    assert launches["features"][1]["properties"]["status"] == "TBD"
