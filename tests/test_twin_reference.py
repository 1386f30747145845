"""Reference layers loaded with `sis ingest` (OurAirports CSV, Natural Earth GeoJSON, World Port
Index CSV: the small files in coordinator/twin/samples/reference/, in the real formats), served
by /twin naming their dataset version, most important first; and the caps per plan:
pointsPerLayer and twinPoints cut what is served and say so."""
from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.datasets import ingest, versions
from coordinator.datasets.kinds import KINDS
from tests.support import make_settings, start_coordinator, stop_coordinator
from tests.test_access_support import key

SAMPLES = Path(__file__).resolve().parents[1] / "coordinator" / "twin" / "samples" / "reference"
FILES = {"ourairports": "airports.csv", "wpi": "UpdatedPub150.csv", "ne_countries": "countries.geojson",
         "ne_places": "places.geojson", "ne_rivers": "rivers.geojson"}
HEADER = ('"id","ident","type","name","latitude_deg","longitude_deg","elevation_ft","continent","iso_country",'
          '"iso_region","municipality","scheduled_service","icao_code","iata_code","gps_code","local_code",'
          '"home_link","wikipedia_link","keywords"')


@pytest.fixture
async def c(db_url, upstream):
    c = await start_coordinator(make_settings(db_url, upstream))
    yield c
    await stop_coordinator(c)


def test_the_kinds_are_found_by_discovery():
    for kind, name in FILES.items():
        assert kind in KINDS.names() and KINDS.get(kind).takes(name), kind


async def test_each_reference_file_is_loaded_and_served_with_its_version(c):
    versions = {kind: await ingest.run(c.services.db, kind, SAMPLES / name) for kind, name in FILES.items()}
    assert {k: (v.records, v.bad_records) for k, v in versions.items()} == {
        "ourairports": (5, 1), "wpi": (3, 1), "ne_countries": (2, 1), "ne_places": (3, 1), "ne_rivers": (2, 1)}
    assert versions["ourairports"].bad_samples[0].startswith("line 7: position")
    r = await c.get("/public/v1/anon/twin?layers=airports,seaports,countries,cities,rivers")
    body = r.json()
    assert r.status == 200 and body["notServed"] == [] and body["health"]["degraded"] is False
    layers = body["layers"]
    assert layers["airports"]["dataset"]["version"] == versions["ourairports"].id
    assert layers["airports"]["license"] == "public-domain"
    assert [f["properties"]["ident"] for f in layers["airports"]["features"]] == ["EGLL", "WIII", "KJFK", "WICC",
                                                                                   "00A"]     # large, then medium...
    assert layers["airports"]["features"][1]["properties"]["iata"] == "CGK"
    assert [f["properties"]["portNumber"] for f in layers["seaports"]["features"]] == [51570, 15590, 52750]
    assert layers["seaports"]["features"][0]["properties"]["unlocode"] == "ID TPP"
    indonesia, france = layers["countries"]["features"]
    assert indonesia["properties"]["position"] == "label-point" and indonesia["geometry"]["coordinates"] == [
        101.892949, -0.954404]
    assert france["properties"]["iso3"] == "FRA" and france["properties"]["position"] == "bbox-centre"
    assert [f["name"] if "name" in f else f["properties"]["name"] for f in layers["cities"]["features"]] == [
        "Tokyo", "Jakarta", "Bandung"]                                  # by population, upper and lower case read
    assert layers["cities"]["features"][1]["properties"]["capital"] is True
    mahakam = layers["rivers"]["features"][0]
    assert mahakam["properties"]["name"] == "Mahakam River" and mahakam["geometry"]["type"] == "LineString"
    assert all(f["properties"]["license"] == "public-domain" for lay in layers.values() for f in lay["features"])


def _airports(path: Path, n: int) -> Path:
    rows = [f'{i},"T{i:05d}","small_airport","Strip {i}",{-60 + (i % 120)},{-170 + (i % 340)},10,"AS","ID",'
            f'"ID-JB","Town","no",,,,,,,' for i in range(n)]
    path.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    return path


def _places(path: Path, n: int) -> Path:
    import json
    feats = [{"type": "Feature", "properties": {"name": f"Town {i}", "pop_max": i},
              "geometry": {"type": "Point", "coordinates": [-170 + (i % 340), -60 + (i % 120)]}} for i in range(n)]
    path.write_text(json.dumps({"type": "FeatureCollection", "features": feats}))
    return path


async def test_points_per_layer_and_twin_points_per_plan(c, tmp_path):
    await ingest.run(c.services.db, "ourairports", _airports(tmp_path / "airports.csv", 1700))
    await ingest.run(c.services.db, "ne_places", _places(tmp_path / "places.geojson", 1700))
    asked = "/twin?layers=airports,cities,iss"
    body = (await c.get("/public/v1/anon" + asked)).json()                    # anon: 800 a layer, 3000 in all
    air = body["layers"]["airports"]
    assert (air["count"], air["total"], air["truncated"], air["cutBy"]) == (800, 1700, True, "pointsPerLayer")
    assert body["layers"]["cities"]["features"][0]["properties"]["name"] == "Town 1699"     # largest first
    assert body["points"] == 1601 and body["caps"] == {"plan": "anon", "pointsPerLayer": 800, "twinPoints": 3000}
    assert any("airports: 800 of 1700 records served, cut by the anon plan's pointsPerLayer" in cv
               for cv in body["caveats"])
    free, _ = await key(c, "Free")                                            # Free: 1500 a layer, 8000 in all
    body = (await c.get(f"/public/v1/{free}" + asked)).json()
    assert body["layers"]["airports"]["count"] == 1500 and body["caps"]["plan"] == "Free"
    pro, _ = await key(c, "Pro")                                              # Pro: 4000 a layer
    body = (await c.get(f"/public/v1/{pro}" + asked)).json()
    assert body["layers"]["airports"]["count"] == 1700 and body["layers"]["airports"]["truncated"] is False


async def test_twin_points_share_the_whole_evenly(c, tmp_path):
    for kind, maker in (("ourairports", _airports), ("ne_places", _places)):
        await ingest.run(c.services.db, kind, maker(tmp_path / ("a.csv" if kind == "ourairports" else "p.geojson"),
                                                     900))
    import json
    countries = [{"type": "Feature", "properties": {"NAME": f"C{i}", "ISO_A3": f"C{i:02d}", "POP_EST": i,
                                                    "LABEL_X": 10.0, "LABEL_Y": 10.0},
                  "geometry": {"type": "Polygon", "coordinates": [[[9, 9], [11, 9], [11, 11], [9, 9]]]}}
                 for i in range(900)]
    (tmp_path / "c.geojson").write_text(json.dumps({"type": "FeatureCollection", "features": countries}))
    await ingest.run(c.services.db, "ne_countries", tmp_path / "c.geojson")
    ports = "World Port Index Number,Main Port Name,Harbor Size,Latitude,Longitude\n" + "\n".join(
        f"{i}.0,Port {i},Small,{i % 80},{i % 170}" for i in range(900))
    (tmp_path / "p.csv").write_text(ports)
    await ingest.run(c.services.db, "wpi", tmp_path / "p.csv")
    body = (await c.get("/public/v1/anon/twin?layers=airports,cities,countries,seaports,iss")).json()
    counts = {k: v["count"] for k, v in body["layers"].items()}
    assert counts["iss"] == 1 and body["points"] == 3000                      # 4 x 800 + 1 > 3000
    assert sorted(counts[k] for k in ("airports", "cities", "countries", "seaports")) == [749, 750, 750, 750]
    assert body["layers"]["seaports"]["cutBy"] == "twinPoints"


async def test_a_malformed_record_is_counted_bad_never_loaded_nor_the_end_of_the_load(c, tmp_path):
    """A position of true,false was read as 1,0 (and widened the extent); a feature that is a
    number, or text where coordinates belong, ended the whole load."""
    import json
    good = {"type": "Feature", "properties": {"name": "Town"}, "geometry": {"type": "Point",
                                                                           "coordinates": [106.8, -6.2]}}
    cases = {
        "ne_places": [1, {**good, "geometry": {"type": "Point", "coordinates": [True, False]}}, good],
        "ne_countries": [{"type": "Feature", "properties": {"NAME": "Nowhere"},
                          "geometry": {"type": "Polygon", "coordinates": [["ab", "cd"]]}},
                         {"type": "Feature", "properties": {"NAME": "Somewhere"},
                          "geometry": {"type": "Polygon", "coordinates": [[[1, 1], [2, 1], [2, 2], [1, 1]]]}}],
    }
    # A places file read as countries: names and label points, but no outline; every record bad, no version.
    cases_of_another_kind = json.loads((SAMPLES / FILES["ne_places"]).read_text())["features"]
    path = tmp_path / "places-as-countries.geojson"
    path.write_text(json.dumps({"type": "FeatureCollection", "features": cases_of_another_kind}))
    with pytest.raises(ingest.IngestError, match="not a country.s outline"):
        await ingest.run(c.services.db, "ne_countries", path)
    for kind, feats in cases.items():
        path = tmp_path / f"{kind}.geojson"
        path.write_text(json.dumps({"type": "FeatureCollection", "features": feats}))
        v = await ingest.run(c.services.db, kind, path)
        assert v.state == "ready" and v.records == 1 and v.bad_records == len(feats) - 1, (kind, v.bad_samples)
    assert versions.extent_of(v) == [1.5, 1.5, 1.5, 1.5]        # the country at its outline's centre
    places = tmp_path / "p.geojsonl"
    bad_point = {"type": "Feature", "id": "e", "properties": {"names": {"primary": "E"}},
                 "geometry": {"type": "Point", "coordinates": [True, False]}}
    places.write_text("\n".join(json.dumps(x) for x in (bad_point, {**bad_point, "id": "f",
                      "geometry": {"type": "Point", "coordinates": [106.8, -6.2]}})) + "\n" + "[" * 5000 + "\n")
    v = await ingest.run(c.services.db, "places", places)
    assert v.records == 1 and v.bad_records == 2 and versions.extent_of(v) == [106.8, -6.2, 106.8, -6.2]


async def test_a_population_grid_with_a_count_that_is_not_finite_fails(c, tmp_path):
    grid = tmp_path / "pop.asc"
    grid.write_text("ncols 2\nnrows 2\nxllcorner 106\nyllcorner -7\ncellsize 0.5\n1 2\n3 inf\n")
    with pytest.raises(ingest.IngestError, match="not a finite number"):
        await ingest.run(c.services.db, "population", grid, data_dir=c.services.settings.data_dir)


def test_an_icao_code_is_the_icao_column_and_a_capital_a_countrys():
    """A heliport's gps_code (K00A) was served as its ICAO code; a province's capital as a capital."""
    from coordinator.twin import reference
    row = reference.airport({"id": "6523", "ident": "00A", "type": "heliport", "name": "Total RF Heliport",
                             "latitude_deg": "40.07", "longitude_deg": "-74.93", "gps_code": "K00A",
                             "icao_code": "", "iata_code": ""})
    assert row["props"]["icao"] is None
    point = {"type": "Point", "coordinates": [-121.49, 38.58]}
    for cls, capital in (("Admin-1 capital", False), ("Admin-0 capital", True), ("Populated place", False)):
        c = reference.city({"properties": {"NAME": "X", "FEATURECLA": cls}, "geometry": point})
        assert c["props"]["capital"] is capital, cls
