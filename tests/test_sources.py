"""Sources take a query, are registered by name, get nested settings with secrets by
indirection, and have their recorded samples served by convention."""
from __future__ import annotations

from typing import Any

import pytest
import tornado.web

from coordinator.demo.upstream import FakeUpstream, recorded
from coordinator.core.settings import Settings, load
from coordinator.sources import Query, Source, build_sources
from coordinator.sources.registry import SourceSettingsError, config_for, load_adapters, make_source
from tests.support import free_port


class KeyedEcho(Source[dict]):
    """A keyed upstream (not registered): answers what it was asked, with the key it got."""

    name = "keyed_echo"
    license = "CC0-1.0"
    default_base_url = "http://127.0.0.1:9"
    needs_key = True
    options = {"unit": "m"}

    async def fetch(self, query: Query) -> list[dict]:
        doc = await self.get_json("/echo", {"bbox": ",".join(map(str, query.bbox or ())), "key": self.api_key,
                                            "unit": self.option("unit")})
        return [doc]


class Echo(tornado.web.RequestHandler):
    def get(self) -> None:
        self.finish({k: self.get_argument(k) for k in ("bbox", "key", "unit")})


@pytest.fixture
async def echo_url():
    port = free_port()
    server = tornado.web.Application([(r"/echo", Echo)]).listen(port, "127.0.0.1")
    yield f"http://127.0.0.1:{port}"
    server.stop()


def settings(**sources: Any) -> Settings:
    return Settings(database_url="sqlite+aiosqlite:///:memory:", sources=sources)


async def test_a_sources_secret_is_read_from_a_file_and_the_query_reaches_the_upstream(tmp_path, echo_url):
    secret = tmp_path / "key"
    secret.write_text("s3cret\n")
    src = make_source(KeyedEcho, settings(keyed_echo={"base_url": echo_url, "api_key_file": str(secret),
                                                      "unit": "ft"}))
    got = await src.read(Query(bbox=(1.0, 2.0, 3.0, 4.0)))
    assert got.report.ok and got.records == [{"bbox": "1.0,2.0,3.0,4.0", "key": "s3cret", "unit": "ft"}]


async def test_a_keyed_source_without_its_key_answers_degraded_naming_the_setting(echo_url):
    got = await make_source(KeyedEcho, settings(keyed_echo={"base_url": echo_url})).read(Query())
    assert not got.report.ok and got.records == []
    assert "SIS_SOURCES__KEYED_ECHO__API_KEY" in got.report.error


def test_source_settings_come_nested_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SIS_SOURCES__USGS__FEED", "2.5_day")
    monkeypatch.setenv("SIS_SOURCES__GDACS__TIMEOUT_S", "2.5")
    monkeypatch.setenv("SIS_SOURCES__KEYED_ECHO__API_KEY", "from-env")
    s = load()
    adapters = load_adapters()
    assert make_source(adapters["usgs"], s).option("feed") == "2.5_day"
    assert make_source(adapters["gdacs"], s).timeout_s == 2.5
    assert config_for(KeyedEcho, s).api_key == "from-env"


def test_wrong_source_settings_stop_start_up_with_one_line(tmp_path, monkeypatch):
    with pytest.raises(SourceSettingsError, match="SIS_SOURCES__USGS__FED is not a setting of source 'usgs'"):
        build_sources(settings(usgs={"fed": "2.5_day"}))
    # A key for a source that sends none: every source's settings can hold one, and it was taken unsaid.
    with pytest.raises(SourceSettingsError, match="SIS_SOURCES__USGS__API_KEY is not a setting of source 'usgs'"):
        build_sources(settings(usgs={"api_key": "k"}))
    with pytest.raises(SourceSettingsError, match="SIS_SOURCES__GDACS__API_KEY_FILE is not a setting"):
        build_sources(settings(gdacs={"api_key_file": str(tmp_path / "k")}))
    with pytest.raises(SourceSettingsError, match="names no source"):
        build_sources(settings(gdcas={"base_url": "http://x"}))
    with pytest.raises(SourceSettingsError, match="cannot read"):
        config_for(KeyedEcho, settings(keyed_echo={"api_key_file": str(tmp_path / "missing")}))
    with pytest.raises(SourceSettingsError, match="not both"):
        config_for(KeyedEcho, settings(keyed_echo={"api_key": "a", "api_key_file": str(tmp_path / "k")}))
    monkeypatch.setenv("SIS_GDACS_BASE_URL", "http://old")
    with pytest.raises(ValueError, match="SIS_GDACS_BASE_URL is now SIS_SOURCES__GDACS__BASE_URL"):
        load()


def test_every_module_adapter_is_registered_and_every_source_is_built():
    adapters = load_adapters()
    assert {"gdacs", "usgs", "panoramax"} <= set(adapters)
    assert "keyed_echo" not in adapters                       # only @register puts an adapter in the registry
    built = build_sources(settings())
    assert set(built) == set(adapters)


async def test_the_fake_upstream_serves_each_adapters_samples_by_convention():
    paths = {p for p, _ in recorded()}
    assert {"/gdacs/events/geteventlist/EVENTS4APP", "/gdacs/events/geteventlist/EVENTS4APP.json",
            "/usgs/4.5_week.geojson"} <= paths
    fake = await FakeUpstream().load_recorded().start()
    try:
        sources = build_sources(settings(), demo_base_url=fake.base_url)
        for name in ("gdacs", "usgs"):
            got = await sources[name].read()
            assert got.report.ok and got.report.demo and got.records, name
    finally:
        await fake.stop()
