"""GET /public/v1/{cred}/volcano-alerts: MAGMA levels from the recorded sample, names and levels
only. The whole body (caveats and health included) is scanned for anything that looks like a
coordinate, with the upstream's records carrying positions in every form it might use."""
from __future__ import annotations

import json
import re

import pytest

from coordinator.demo.upstream import Canned
from coordinator.panels.volcano_alerts import level_of
from tests.support import make_settings, start_coordinator, stop_coordinator

PATH = "/magma/api/v1/gunung-api/tingkat-aktivitas"
DECIMAL = re.compile(r"-?\d+\.\d+")                     # 7.52, -8.342, 115.508
PAIR = re.compile(r"-?\d+(\.\d+)?\s*[,; ]\s*-?\d+(\.\d+)?")     # "-7,110" or "-7 110"
HEMISPHERE = re.compile(r"\d\s*(LS|LU|BT|BB|°|[NSEW]\b)")      # "7 LS", "110 BT", "8°"
KEYS = {"lat", "lon", "lng", "latitude", "longitude", "coordinates", "geometry", "point", "bbox", "location"}


def coordinate_like(body) -> list[str]:
    """Everything in the body that could say where something is: a key naming a position,
    a decimal number anywhere, a pair of numbers in a string or a list, a hemisphere mark."""
    found: list[str] = []

    def walk(v, where):
        if isinstance(v, dict):
            for k, x in v.items():
                if k.lower() in KEYS or re.search(r"(^|_)(lat|lon|lng)(_|$)", k.lower()):
                    found.append(f"{where}.{k}: key")
                walk(x, f"{where}.{k}")
        elif isinstance(v, list):
            if len(v) in (2, 3) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
                found.append(f"{where}: number pair {v}")
            for i, x in enumerate(v):
                walk(x, f"{where}[{i}]")
        elif isinstance(v, float):
            found.append(f"{where}: float {v}")
        elif isinstance(v, str):
            for rx in (DECIMAL, PAIR, HEMISPHERE):
                if rx.search(v):
                    found.append(f"{where}: {v!r}")
                    break

    walk(body, "body")
    return found


@pytest.fixture
async def c(db_url, upstream):
    c = await start_coordinator(make_settings(db_url, upstream, sources={"magma": {"api_key": "t0ken"}}))
    yield c
    await stop_coordinator(c)


async def test_names_and_levels_highest_first(c):
    r = await c.get("/public/v1/anon/volcano-alerts")
    body = r.json()
    assert r.status == 200 and list(body)[0] == "caveats"
    assert [(v["name"], v["alertLevel"]) for v in body["volcanoes"]] == [
        ("Lewotobi Laki-laki", 4), ("Merapi", 3), ("Semeru", 3), ("Anak Krakatau", 2), ("Bromo", 2),
        ("Agung", 1), ("Kelud", 1)]
    assert body["volcanoes"][0] == {"code": "LEW", "name": "Lewotobi Laki-laki", "province": "Nusa Tenggara Timur",
                                    "alertLevel": 4, "alertLevelName": "Level IV (Awas)", "meaning": "Awas (warning)",
                                    "license": "PVMBG-MAGMA (terms unstated)"}
    assert body["byLevel"] == {"Level IV (Awas)": 1, "Level III (Siaga)": 2, "Level II (Waspada)": 2,
                               "Level I (Normal)": 2}
    assert body["health"]["sources"][0]["ok"] is True
    assert coordinate_like(body) == []


async def test_no_coordinate_anywhere_even_when_the_upstream_sends_positions(c, upstream):
    doc = {"data": [{"ga_code": "AGU", "ga_nama_gapi": "Agung", "ga_prov_gapi": "Bali", "status": 2,
                     "ga_lat_gapi": -8.342, "ga_lon_gapi": 115.508, "latitude": "-8.342", "longitude": "115.508",
                     "coordinates": [115.508, -8.342], "geometry": {"type": "Point", "coordinates": [115.5, -8.3]},
                     "lokasi": "8.34 LS, 115.51 BT", "ga_elev_gapi": 3031.0}]}
    # the scanner itself sees them in the upstream's record
    assert len(coordinate_like(doc)) >= 6
    upstream.set_json(PATH, doc)
    body = (await c.get("/public/v1/anon/volcano-alerts")).json()
    assert body["volcanoes"][0]["name"] == "Agung" and body["volcanoes"][0]["alertLevel"] == 2
    assert coordinate_like(body) == [], coordinate_like(body)
    assert "115" not in json.dumps(body) and "8.34" not in json.dumps(body)


async def test_without_its_token_the_answer_is_degraded_naming_the_setting(db_url, upstream):
    c = await start_coordinator(make_settings(db_url, upstream))
    try:
        body = (await c.get("/public/v1/anon/volcano-alerts")).json()
        assert body["health"]["degraded"] and "SIS_SOURCES__MAGMA__API_KEY" in body["health"]["sources"][0]["error"]
        assert body["count"] is None and body["volcanoes"] == []
        assert coordinate_like(body) == []
    finally:
        await stop_coordinator(c)


async def test_a_refused_token_is_degraded(c, upstream):
    upstream.set(PATH, Canned(401, b'{"message":"Token not provided"}'))
    body = (await c.get("/public/v1/anon/volcano-alerts")).json()
    assert body["health"]["degraded"] and "refused the token" in body["health"]["sources"][0]["error"]


async def test_an_unreadable_status_is_unknown_not_normal(c, upstream):
    upstream.set_json(PATH, [{"ga_code": "XYZ", "ga_nama_gapi": "Test", "status": "?"}])
    body = (await c.get("/public/v1/anon/volcano-alerts")).json()
    assert body["volcanoes"][0]["alertLevel"] is None and body["volcanoes"][0]["meaning"].startswith("unknown")
    assert any("could not be read" in cv for cv in body["caveats"])


@pytest.mark.parametrize("raw, level", [(1, 1), (4, 4), ("3", 3), ("Level II (Waspada)", 2), ("Level IV (Awas)", 4),
                                        ("Level I (Normal)", 1), ("Siaga", 3), (5, None), ("", None), (None, None),
                                        (True, None)])
def test_levels_read_from_every_form(raw, level):
    assert level_of(raw) == level
