"""What ``sis ingest`` says and keeps when text cannot be stored: a statement the database
refuses is one line naming its rows, never SQLAlchemy's message with every parameter of the
batch (it was printed whole on the terminal and kept as the version's error); a file name
that is not UTF-8 is kept with its bytes written out; a ``--license`` or ``--source`` that
cannot be kept is refused in one line. On SQLite and PostgreSQL alike."""
from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from coordinator.core.db.models import TwinReference
from coordinator.datasets import ingest
from coordinator.datasets.kinds import DatasetKind, KindRegistry
from tests.test_ingest_text_records import db, place, write_lines, write_pbf  # noqa: F401 - db is a fixture


async def test_a_license_too_long_to_keep_is_refused_in_one_line(db, tmp_path):
    pbf = write_pbf(tmp_path / "t.osm.pbf", {1: {"power": "tower"}})
    with pytest.raises(ingest.IngestError) as e:
        await ingest.run(db, "osm", pbf, license="x" * 130)
    assert e.value.usage and str(e.value) == "--license is 130 characters, longer than the 120 a dataset version keeps"
    with pytest.raises(ingest.IngestError) as e:
        await ingest.run(db, "osm", pbf, license="x" * 100)
    assert "its license is 100 characters, longer than the 80 a map feature keeps" in str(e.value)


# ---- a refused statement, said in one line --------------------------------------------

async def _refused_load(load: ingest.Load) -> None:
    """Writes rows the database refuses on both backends (no position: NOT NULL)."""
    batch = [{"version_id": load.version_id, "layer": "airports", "fid": f"t:{i}", "name": "n" * 500, "lon": None,
              "lat": 0.0, "rank": 0.0, "props": {"x": "y" * 500}} for i in range(300)]
    load.accepted(2)
    async with load.db.write_core() as conn:
        await conn.execute(sa.insert(TwinReference.__table__), batch)


async def test_a_statement_the_database_refuses_is_one_line_naming_its_rows_not_every_parameter(db, tmp_path):
    """SQLAlchemy's message holds the statement and every row's parameters: the operator's
    terminal (and the version's error) got the whole batch on one line."""
    registry = KindRegistry()
    registry.register(DatasetKind(name="test-refused", description="rows the database refuses (tests only)",
                                  license="CC0-1.0", suffixes=(".txt",), load=_refused_load))
    f = tmp_path / "x.txt"
    f.write_text("x")
    with pytest.raises(ingest.IngestError) as e:
        await ingest.run(db, "test-refused", f, registry=registry)
    said = str(e.value)
    assert said.startswith("loading x.txt as test-refused failed after 2 records: the database refused 300 rows of "
                           "twin_reference (from 't:0' to 't:299'): ")
    assert "null" in said.lower() and "nnnn" not in said and "yyyy" not in said and "INSERT" not in said
    assert len(said) < 500 and "\n" not in said
    assert e.value.version.error == said[len("loading x.txt as test-refused failed after 2 records: "):
                                         -len(f" (version {e.value.version.id} marked failed)")]



async def test_a_file_name_not_utf8_is_kept_with_its_bytes_written_out(db, tmp_path):
    """A Latin-1 name on a UTF-8 system reaches Python as lone surrogates: the version's row was
    refused (a traceback, on SQLite and PostgreSQL), and so was the failure of a missing one."""
    import os

    name = os.fsdecode(b"Z\xfcrich.geojsonl")
    path = write_lines(tmp_path / name, [json.dumps(place(1, "ok"))])
    v = await ingest.run(db, "places", path)
    assert (v.records, v.file_name, v.source) == (1, "Z\\xfcrich.geojsonl", "Z\\xfcrich.geojsonl")
    with pytest.raises(ingest.IngestError) as e:
        await ingest.run(db, "places", tmp_path / os.fsdecode(b"absent\xfc.geojsonl"))
    assert e.value.usage and e.value.version.error.endswith("absent\\xfc.geojsonl: no such file")
    with pytest.raises(ingest.IngestError) as e:
        await ingest.run(db, "places", path, source=os.fsdecode(b"survey \xe9t\xe9"))
    assert e.value.usage and str(e.value) == "--source: not UTF-8: byte 0xE9"
