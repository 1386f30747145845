"""Text that a database cannot store, in one record of a load, is that one bad record, counted,
on SQLite and PostgreSQL alike (docs/datasets.md), never the end of the load: bytes not UTF-8
in an OpenStreetMap tag, an escaped lone surrogate or NUL in a places line, a NUL in an
OurAirports name, and values longer than their columns (PostgreSQL refused those, SQLite kept
them). The files are written here, in their real formats; ``test_ingest_text_reporting`` has
what is said of text given on the command line and of a statement the database refuses."""
from __future__ import annotations

import json
from pathlib import Path

import osmium
import pytest
import sqlalchemy as sa

from coordinator.core.db import Database, migrate
from coordinator.core.db.models import TwinReference
from coordinator.datasets import ingest
from coordinator.features import store


@pytest.fixture
async def db(db_url):
    db = Database(db_url)
    await migrate.upgrade_async(db.write_engine, db_url)
    yield db
    await db.close()


def write_pbf(path: Path, nodes: dict[int, dict[str, str]], *, replace: dict[bytes, bytes] | None = None) -> Path:
    """An uncompressed PBF of power towers (or whatever ``nodes`` tag), its bytes then edited:
    pyosmium writes only UTF-8, so a bad byte is put in by replacing a placeholder of the
    same length."""
    h = osmium.io.Header()
    h.add_box(osmium.osm.Box(9.9, 9.9, 10.5, 10.5))
    plain = path.with_suffix(".plain.pbf")
    w = osmium.SimpleWriter(osmium.io.File(str(plain), "pbf,pbf_compression=none"), header=h)
    for i, tags in nodes.items():
        w.add_node(osmium.osm.mutable.Node(id=i, location=(10 + i * 0.01, 10.0), tags=tags, version=1,
                                           timestamp="2024-01-01T00:00:00Z"))
    w.close()
    data = plain.read_bytes()
    for old, new in (replace or {}).items():
        assert len(old) == len(new) and data.count(old) == 1
        data = data.replace(old, new)
    path.write_bytes(data)
    return path


def place(i: int, name: str, *, gid: str | None = None, wikidata: str | None = None) -> dict:
    props = {"names": {"primary": name}, "categories": {"primary": "cafe"}, "confidence": 0.9,
             "sources": [{"dataset": "meta", "license": "CDLA-Permissive-2.0"}]}
    if wikidata:
        props["brand"] = {"wikidata": wikidata}
    return {"type": "Feature", "id": gid or f"p{i}",
            "geometry": {"type": "Point", "coordinates": [20 + i / 1000, 20.0]}, "properties": props}


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


async def rows(db: Database, version_id: int, table=store.TABLE) -> list[tuple]:  # noqa: ANN001
    async with db.engine.connect() as conn:
        cols = [table.c.fid, table.c.name] + ([table.c.cls, table.c.brand] if table is store.TABLE else [])
        return sorted(tuple(r) for r in await conn.execute(sa.select(*cols).where(table.c.version_id == version_id)))


# ---- not UTF-8, or NUL ----------------------------------------------------------------

async def test_an_osm_tag_not_utf8_is_one_bad_record_and_the_load_goes_on(db, tmp_path):
    """pyosmium raised UnicodeDecodeError at the tag, which failed the whole load ("failed after
    11 records"). An unread tag neither kept nor classified (``note``) loses nothing: that
    object loads."""
    pbf = write_pbf(tmp_path / "bad.osm.pbf", {
        1: {"power": "tower", "name": "Zürich Turm"},
        2: {"power": "tower", "name": "BADBYTES"},
        3: {"power": "tower", "name": "ok", "note": "BADNOTE!"},
        4: {"power": "tower", "name": "北京电视塔"}},
        replace={b"BADBYTES": b"\xff\xfe\xc0\xaf\xed\xa0\x80x", b"BADNOTE!": b"\xe9t\xe9 ok!!"})
    v = await ingest.run(db, "osm", pbf)
    assert (v.records, v.bad_records) == (3, 1)
    assert v.bad_samples == ["node 2: not UTF-8: byte 0xFF in its name tag"]
    assert [r[:2] for r in await rows(db, v.id)] == [("osm:node/1", "Zürich Turm"), ("osm:node/3", "ok"),
                                                      ("osm:node/4", "北京电视塔")]


async def test_an_escaped_lone_surrogate_or_nul_in_a_places_line_is_one_bad_record(db, tmp_path):
    """Both are ASCII in the line (``\\ud800``, ``\\u0000``): checked on the parsed record. The
    surrogate failed the load on both databases (TypeError: str is not valid UTF-8), the NUL on
    PostgreSQL (invalid byte sequence for encoding "UTF8": 0x00) while SQLite stored it."""
    lines = [json.dumps(place(1, "ok one")), json.dumps(place(2, "bad \ud800 name")),
             json.dumps(place(3, "nul \x00 name")), json.dumps(place(4, "Zürich Café")),
             json.dumps(place(5, "ok", gid="p5\x00x"))]
    assert "\\ud800" in lines[1] and "\\u0000" in lines[2]
    v = await ingest.run(db, "places", write_lines(tmp_path / "p.geojsonl", lines))
    assert (v.records, v.bad_records) == (2, 3)
    assert v.bad_samples == ["line 2: not UTF-8: a lone surrogate",
                             "line 3: holds a NUL character (U+0000), which PostgreSQL cannot store in text",
                             "line 5: holds a NUL character (U+0000), which PostgreSQL cannot store in text"]
    assert [r[:2] for r in await rows(db, v.id)] == [("overture:p1", "ok one"), ("overture:p4", "Zürich Café")]


async def test_a_nul_in_a_places_geoparquet_string_is_one_bad_record(db, tmp_path):
    from coordinator.features import synthetic

    path = tmp_path / "p.parquet"
    feats = [place(1, "ok one"), place(2, "nul \x00 name")]
    for f in feats:
        f["properties"]["id"] = f["id"]
    synthetic.write_geoparquet(path, iter(feats))
    v = await ingest.run(db, "places", path)
    assert (v.records, v.bad_records) == (1, 1)
    assert v.bad_samples == ["row 2: holds a NUL character (U+0000), which PostgreSQL cannot store in text"]


async def test_a_nul_in_an_ourairports_name_is_one_bad_record(db, tmp_path):
    csv = tmp_path / "airports.csv"
    csv.write_bytes(b"id,ident,type,name,latitude_deg,longitude_deg,iso_country\r\n"
                    b"2434,EGLL,large_airport,Bad\x00Name,51.4706,-0.461941,GB\r\n"
                    b"26434,WIII,large_airport,Soekarno-Hatta International Airport,-6.1255,106.6559,ID\r\n")
    v = await ingest.run(db, "ourairports", csv)
    assert (v.records, v.bad_records) == (1, 1)
    assert v.bad_samples == ["line 2: holds a NUL character (U+0000), which PostgreSQL cannot store in text"]
    assert await rows(db, v.id, TwinReference.__table__) == [("WIII", "Soekarno-Hatta International Airport")]


# ---- longer than the columns ----------------------------------------------------------

async def test_a_multi_valued_brand_wikidata_is_an_outlet_of_each_brand(db, tmp_path):
    """``Q12345678;Q23456789;Q3456`` (26 characters) failed the load on PostgreSQL (varchar(24))
    and, stored whole on SQLite, matched no brand query (a brand is asked as one Q-id). Each id
    is now a brand row of its own, found by ``brand_points``; an object whose only class is a
    brand that names no Wikidata id is a bad record."""
    pbf = write_pbf(tmp_path / "brand.osm.pbf", {
        1: {"shop": "supermarket", "name": "Indomaret", "brand:wikidata": "Q12345678;Q23456789;Q3456"},
        2: {"power": "tower", "name": "ok"},
        3: {"shop": "kiosk", "brand:wikidata": "Qxyz"},
        4: {"power": "tower", "brand:wikidata": "Q" + "9" * 30}})
    v = await ingest.run(db, "osm", pbf)
    assert (v.records, v.bad_records) == (3, 1)
    assert v.bad_samples == ["node 3: brand:wikidata 'Qxyz' is no Wikidata id (Q and digits), and nothing else "
                             "of it is served"]
    assert await rows(db, v.id) == [("osm:node/1", "Indomaret", "brand", "Q12345678"),
                                    ("osm:node/1", "Indomaret", "brand", "Q23456789"),
                                    ("osm:node/1", "Indomaret", "brand", "Q3456"),
                                    ("osm:node/2", "ok", "power_tower", None),
                                    ("osm:node/4", None, "power_tower", None)]
    box = (9.9, 9.9, 10.5, 10.5)
    for q in ("Q12345678", "Q23456789", "Q3456"):
        assert [p[0] for p in await store.brand_points(db, v.id, q, box)] == ["osm:node/1"]


async def test_a_places_record_longer_than_its_columns_is_one_bad_record(db, tmp_path):
    """An id of 100 ``é`` (a 109-character fid) failed the load on PostgreSQL (varchar(80)). So
    did a record whose sources name licenses too long together; it was cut to the column, a
    license naming what the record does not have."""
    many = place(3, "many licenses")
    many["properties"]["sources"] = [{"dataset": "meta", "license": f"LicenseRef-some-license-{i}"} for i in range(4)]
    lines = [json.dumps(place(1, "n")), json.dumps(place(2, "long id", gid="é" * 100)), json.dumps(many),
             json.dumps(place(4, "brand", wikidata="Q123;Q456"))]
    v = await ingest.run(db, "places", write_lines(tmp_path / "long.geojsonl", lines))
    assert (v.records, v.bad_records) == (2, 2)
    assert v.bad_samples == ["line 2: fid is 109 characters, longer than the 80 its column holds",
                             "line 3: license is 115 characters, longer than the 80 its column holds"]
    assert await rows(db, v.id) == [("overture:p1", "n", "place", None),
                                    ("overture:p4", "brand", "brand", "Q123"),
                                    ("overture:p4", "brand", "brand", "Q456"),
                                    ("overture:p4", "brand", "place", None)]
