"""Ingested datasets (DESIGN.md §13): every load recorded as a version with its checksum,
extent and counts; failed loads visible and never served; ``sis ingest`` and
``sis datasets list``. No production kind exists yet, so the tests declare their own: a
reader of GeoJSON text sequences of points (RFC 8142, one feature a line) written by the
test, into a table the test makes."""
from __future__ import annotations

import asyncio
import hashlib
import json
import math
from pathlib import Path

import pytest
from sqlalchemy import text

from coordinator.cli import main
from coordinator.datasets import ingest, versions
from coordinator.datasets.kinds import KINDS, DatasetKind, KindRegistry, dataset_kind
from coordinator.core.db import Database, migrate

TABLE = "test_ingested_points"


async def make_table(db: Database) -> None:
    async with db.write() as s:
        await s.execute(text(f"CREATE TABLE IF NOT EXISTS {TABLE} (version_id BIGINT NOT NULL, "
                             "name VARCHAR(80) NOT NULL, lon FLOAT NOT NULL, lat FLOAT NOT NULL)"))


async def rows_of(db: Database, version_id: int) -> list[tuple]:
    async with db.read() as s:
        return [tuple(r) for r in await s.execute(
            text(f"SELECT name, lon, lat FROM {TABLE} WHERE version_id = :v ORDER BY name"), {"v": version_id})]


def point(lon, lat, name):  # noqa: ANN001
    return {"type": "Feature", "geometry": {"type": "Point", "coordinates": [lon, lat]},
            "properties": {"name": name}}


def write_seq(path: Path, lines: list) -> Path:
    """A GeoJSON text sequence: each record starts with RS and ends with a newline; a
    string in ``lines`` is written as it is (a bad record)."""
    path.write_text("".join("\x1e" + (x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


async def load_points(load: ingest.Load, *, explode_at: int | None = None) -> None:
    batch: list[dict] = []

    async def flush() -> None:
        if batch:
            async with load.db.write() as s:
                await s.execute(text(f"INSERT INTO {TABLE} (version_id, name, lon, lat) "
                                     "VALUES (:v, :name, :lon, :lat)"), batch)
            batch.clear()

    with load.open(text=True) as f:
        for n, line in enumerate(f, 1):
            record = line.strip().lstrip("\x1e")
            if not record:
                continue
            if explode_at == n:
                await flush()
                raise OSError("the disk went away")
            try:
                feature = json.loads(record)
                lon, lat = (float(c) for c in feature["geometry"]["coordinates"][:2])
                if not (math.isfinite(lon) and math.isfinite(lat) and -180 <= lon <= 180 and -90 <= lat <= 90):
                    raise ValueError(f"position {lon},{lat} is not on Earth")
                name = str(feature["properties"]["name"])
            except (ValueError, KeyError, TypeError) as exc:
                load.bad(f"line {n}", f"{type(exc).__name__}: {exc}")
                continue
            batch.append({"v": load.version_id, "name": name, "lon": lon, "lat": lat})
            load.accepted(lon=lon, lat=lat)
            if len(batch) >= 100:
                await flush()
    await flush()


async def discard_points(db: Database, version_id: int) -> None:
    async with db.write() as s:
        await s.execute(text(f"DELETE FROM {TABLE} WHERE version_id = :v"), {"v": version_id})


async def load_files(load: ingest.Load) -> None:
    """A kind that keeps files: the file copied into the version's own folder."""
    (load.folder() / "copy.txt").write_bytes(load.open().read())
    load.accepted()


FILES = DatasetKind(name="test-files", description="a file kept in the version's folder (tests only)",
                    license="CC0-1.0", suffixes=(".txt",), load=load_files)
POINTS = DatasetKind(name="test-points", description="points as a GeoJSON text sequence (tests only)",
                     license="CC0-1.0", suffixes=(".geojsons", ".geojsonl"), load=load_points)
FAILING = DatasetKind(name="test-failing", description="points whose load fails on line 3 (tests only)",
                      license="CC0-1.0", suffixes=(".geojsons",),
                      load=lambda load: load_points(load, explode_at=3), discard=discard_points)


@pytest.fixture
async def db(db_url):
    db = Database(db_url)
    await migrate.upgrade_async(db.write_engine, db_url)
    await make_table(db)
    yield db
    await db.close()


@pytest.fixture
def registry() -> KindRegistry:
    r = KindRegistry()
    r.register(POINTS)
    r.register(FAILING)
    return r


class Recorder:
    def __init__(self) -> None:
        self.done: list[int] = []
        self.total: int | None = None
        self.counts_seen: tuple[int, int] | None = None
        self.closed = False

    def advance(self, done: int, total: int | None) -> None:
        self.done.append(done)
        self.total = total

    def counts(self, records: int, bad: int) -> None:
        self.counts_seen = (records, bad)

    def close(self) -> None:
        self.closed = True


async def test_a_load_records_its_version_with_checksum_counts_extent_and_bad_records(db, registry, tmp_path):
    lines = [point(10.5 + i / 1000, 45.0 - i / 2000, f"p{i:04d}") for i in range(1500)]
    lines[7] = "{not json"
    lines[900] = point(200.0, 10.0, "off-earth")
    lines[1200] = {"type": "Feature", "geometry": None, "properties": {"name": "no-geometry"}}
    path = write_seq(tmp_path / "points.geojsons", lines)
    progress = Recorder()

    v = await ingest.run(db, "test-points", path, source="tests, written by hand", progress=progress,
                         registry=registry)

    good = [x for i, x in enumerate(lines) if i not in (7, 900, 1200)]
    assert (v.state, v.kind, v.records, v.bad_records) == ("ready", "test-points", 1497, 3)
    assert v.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert v.file_bytes == path.stat().st_size and v.file_name == "points.geojsons"
    assert (v.source, v.license) == ("tests, written by hand", "CC0-1.0")      # the kind's license
    lons = [x["geometry"]["coordinates"][0] for x in good]
    lats = [x["geometry"]["coordinates"][1] for x in good]
    assert versions.extent_of(v) == [min(lons), min(lats), max(lons), max(lats)]
    assert [s.split(":")[0] for s in v.bad_samples] == ["line 8", "line 901", "line 1201"]
    assert "not on Earth" in v.bad_samples[1]
    assert len(await rows_of(db, v.id)) == 1497
    assert progress.done[-1] == path.stat().st_size and progress.total == path.stat().st_size
    assert progress.counts_seen == (1497, 3) and progress.closed
    named = versions.provenance(v)
    assert named == {"dataset": "test-points", "version": v.id, "loadedAt": versions.iso(v.loaded_at),
                     "license": "CC0-1.0", "sha256": v.sha256}
    assert named["loadedAt"].endswith("Z")


async def test_a_loader_that_stops_early_still_gets_the_whole_file_checksummed(db, tmp_path):
    async def first_line_only(load: ingest.Load) -> None:
        with load.open() as f:
            f.readline()
        load.accepted(lon=1.0, lat=2.0)

    r = KindRegistry()
    r.register(DatasetKind(name="test-head", description="first line", license="CC0-1.0", suffixes=(".txt",),
                           load=first_line_only))
    path = tmp_path / "big.txt"
    path.write_bytes(b"head\n" + bytes(range(256)) * 20_000)          # several read chunks
    v = await ingest.run(db, "test-head", path, license="ODbL-1.0", registry=r)
    assert v.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert v.license == "ODbL-1.0" and versions.extent_of(v) == [1.0, 2.0, 1.0, 2.0]


async def test_two_loads_are_two_versions_and_the_newest_ready_come_first(db, registry, tmp_path):
    a = await ingest.run(db, "test-points", write_seq(tmp_path / "a.geojsons", [point(1, 1, "a")]),
                         registry=registry)
    b = await ingest.run(db, "test-points", write_seq(tmp_path / "b.geojsonl", [point(2, 2, "b"), point(3, 3, "c")]),
                         registry=registry)
    with pytest.raises(ingest.IngestError):
        await ingest.run(db, "test-failing", write_seq(tmp_path / "c.geojsons", [point(4, 4, f"x{i}") for i in range(5)]),
                         registry=registry)
    assert a.id != b.id and (a.sha256 != b.sha256)
    newest = await versions.newest_ready(db, "test-points", 2)
    assert [v.id for v in newest] == [b.id, a.id]
    assert [v.id for v in await versions.newest_ready(db, "test-points")] == [b.id]
    assert await rows_of(db, a.id) == [("a", 1.0, 1.0)]                   # each load's rows under its id
    assert [r[0] for r in await rows_of(db, b.id)] == ["b", "c"]
    assert await versions.newest_ready(db, "test-failing", 5) == []
    version, report = await versions.current(db, "test-points")       # what an answer names
    assert version.id == b.id and report.ok and report.records == 2
    assert report.as_json()["dataset"] == {"dataset": "test-points", "version": b.id, "license": b.license,
                                           "loadedAt": versions.iso(b.loaded_at), "sha256": b.sha256}
    none, missing = await versions.current(db, "test-failing")
    assert none is None and not missing.ok and "sis ingest test-failing FILE" in missing.error


async def test_a_load_that_fails_midway_leaves_a_failed_version_never_served(db, registry, tmp_path):
    path = write_seq(tmp_path / "fails.geojsons", [point(5, 5, f"f{i}") for i in range(10)])
    with pytest.raises(ingest.IngestError) as err:
        await ingest.run(db, "test-failing", path, registry=registry)
    message = str(err.value)
    assert "\n" not in message and "after 2 records" in message and "the disk went away" in message
    v = err.value.version
    assert v.state == "failed" and "OSError: the disk went away" in v.error and v.records == 2
    assert v.sha256 == hashlib.sha256(path.read_bytes()).hexdigest() and v.finished_at is not None
    assert await rows_of(db, v.id) == []                                   # its rows discarded
    assert await versions.newest_ready(db, "test-failing") == []
    with pytest.raises(ValueError, match="only ready versions"):
        versions.provenance(v)
    [listed] = await versions.list_versions(db, "test-failing")
    assert listed.state == "failed"


async def test_a_load_that_reads_no_record_fails_and_the_version_before_stays_served(db, registry, tmp_path):
    """An empty file, or one of another kind (every record bad), was marked ready with 0
    records and replaced what was served: every answer then said none."""
    good = await ingest.run(db, "test-points", write_seq(tmp_path / "a.geojsons", [point(1, 1, "a")]),
                            registry=registry)
    for name, lines in (("empty.geojsons", []), ("other.geojsons", ['{"iata": "CGK"}', "not json"])):
        with pytest.raises(ingest.IngestError) as err:
            await ingest.run(db, "test-points", write_seq(tmp_path / name, lines), registry=registry)
        assert "no test-points record could be read" in str(err.value) and err.value.version.state == "failed"
        assert f"{len(lines)} bad" in str(err.value)
    version, report = await versions.current(db, "test-points")
    assert version.id == good.id and report.records == 1


async def test_a_load_still_loading_or_interrupted_is_never_served(db, registry, tmp_path):
    """A load that never ends (the process killed) stays ``loading`` for all to see; one
    interrupted (Ctrl-C cancels the command's task) is marked failed on the way out."""
    started = asyncio.Event()

    async def hangs(load: ingest.Load) -> None:
        load.accepted(lon=0.0, lat=0.0)
        started.set()
        await asyncio.Event().wait()

    registry.register(DatasetKind(name="test-hangs", description="never ends", license="CC0-1.0",
                                  suffixes=(".geojsons",), load=hangs))
    crashed = await versions.create(db, "test-points", source="s", license="CC0-1.0", file_name="a.geojsons",
                                    file_bytes=10)
    path = write_seq(tmp_path / "h.geojsons", [point(1, 1, "h")])
    task = asyncio.create_task(ingest.run(db, "test-hangs", path, registry=registry))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    listed = {v.id: v for v in await versions.list_versions(db)}
    assert listed[crashed.id].state == "loading"
    [interrupted] = [v for v in listed.values() if v.kind == "test-hangs"]
    assert (interrupted.state, interrupted.error, interrupted.records) == ("failed", "interrupted", 1)
    assert await versions.newest_ready(db, "test-points") == []
    assert await versions.newest_ready(db, "test-hangs") == []


async def test_a_missing_file_and_a_wrong_suffix_fail_their_version_in_one_line(db, registry, tmp_path):
    with pytest.raises(ingest.IngestError) as missing:
        await ingest.run(db, "test-points", tmp_path / "nowhere.geojsons", registry=registry)
    (tmp_path / "points.csv").write_text("lon,lat\n1,2\n")
    with pytest.raises(ingest.IngestError) as suffix:
        await ingest.run(db, "test-points", tmp_path / "points.csv", registry=registry)
    assert "no such file" in str(missing.value) and missing.value.usage
    assert ".geojsons or .geojsonl" in str(suffix.value) and suffix.value.usage
    states = [(v.file_name, v.state, v.sha256) for v in await versions.list_versions(db)]
    assert states == [("nowhere.geojsons", "failed", None), ("points.csv", "failed", None)]
    with pytest.raises(ingest.IngestError, match="unknown dataset kind 'nope': available kinds are "
                                                 "test-failing, test-points"):
        await ingest.run(db, "nope", tmp_path / "points.csv", registry=registry)
    assert len(await versions.list_versions(db)) == 2                      # an unknown kind records nothing


def test_kinds_are_declared_once_and_checked():
    r = KindRegistry()

    @dataset_kind("test-decl", description="d", license="CC0-1.0", suffixes=[".x"], registry=r)
    async def load(load):  # noqa: ANN001
        pass

    assert r.get("test-decl").load is load and r.get("test-decl").suffixes == (".x",)
    with pytest.raises(ValueError, match="declared twice"):
        dataset_kind("test-decl", description="d", license="CC0-1.0", suffixes=[".x"], registry=r)(load)
    with pytest.raises(ValueError, match="license"):
        DatasetKind(name="x", description="d", license="", suffixes=(".x",), load=load)
    with pytest.raises(ValueError, match="suffixes"):
        DatasetKind(name="x", description="d", license="L", suffixes=("x",), load=load)
    assert DatasetKind(name="x", description="d", license="L", suffixes=(".osm.pbf",), load=load).takes("A.OSM.PBF")


def test_production_kinds_are_the_capabilities_own():
    """The kinds come with the issues that need them (pb2002: the plates panel), found by
    discovery."""
    own = {n: KINDS.get(n).load.__module__ for n in production_kinds()}
    assert {"pb2002", "osm", "places", "bathymetry"} <= set(own)
    assert all(m.startswith("coordinator.") and m.endswith(".dataset_kinds") for m in own.values()), own


def production_kinds() -> list[str]:
    return [n for n in KINDS.names() if not n.startswith("test-")]


async def test_a_database_made_afresh_beside_an_old_data_directory_loads_into_folders_of_its_own(tmp_path):
    """Version ids are a database's own: a database made afresh (its file removed) numbers
    from 1 again beside the folders the old one left in the data directory. Each version
    keeps its files in a folder of its own, so the new load neither fails on the old
    folder nor takes the old files for its own; a version loaded before folders were
    named (migration 0018) keeps KIND/ID."""
    registry = KindRegistry()
    registry.register(FILES)
    data, text = tmp_path / "data", tmp_path / "f.txt"
    loaded = []
    for content in ("the first database's", "the second's"):
        text.write_text(content)
        url = f"sqlite+aiosqlite:///{tmp_path}/{len(loaded)}.db"
        db = Database(url)
        try:
            await migrate.upgrade_async(db.write_engine, url)
            v = await ingest.run(db, "test-files", text, registry=registry, data_dir=data)
        finally:
            await db.close()
        loaded.append(v)
    assert [v.id for v in loaded] == [1, 1] and [v.state for v in loaded] == ["ready", "ready"]
    first, second = (versions.folder_of(data, v) for v in loaded)
    assert first != second and first.parent == second.parent == data / "test-files"
    assert (first / "copy.txt").read_text() == "the first database's"
    assert (second / "copy.txt").read_text() == "the second's"
    loaded[0].folder = None
    assert versions.folder_of(data, loaded[0]) == data / "test-files" / "1"


# ---- the command line ----------------------------------------------------------

def registered(*kinds: DatasetKind):
    """The test kinds in the process's registry for a fixture's life: ``yield from registered(...)``."""
    for kind in kinds:
        KINDS.register(kind)
    try:
        yield
    finally:
        for kind in kinds:
            KINDS.remove(kind.name)


@pytest.fixture
def cli_kinds():
    yield from registered(POINTS, FAILING)


async def _prepared(url: str) -> None:
    db = Database(url)
    await migrate.upgrade_async(db.write_engine, url)
    await make_table(db)
    await db.close()


def cli(capsys, *argv: str) -> tuple[int, list[str], list[str]]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out.splitlines(), out.err.splitlines()


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_the_cli_ingests_lists_and_refuses_in_one_line(backend, cli_kinds, tmp_path, capsys, pg_database):
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path}/sis.db"                               # the plain form users type
    else:
        if not pg_database:
            pytest.skip("PostgreSQL suite: set SIS_TEST_DATABASE_URL")
        from tests.conftest import reset_postgres
        asyncio.run(reset_postgres(pg_database))
        url = pg_database.replace("postgresql+asyncpg://", "postgresql://")
    from coordinator.core.db.urls import normalise
    asyncio.run(_prepared(normalise(url)))
    good = write_seq(tmp_path / "ok.geojsons", [point(7, 8, "a"), "[]", point(9, 10, "b")])
    fails = write_seq(tmp_path / "bad.geojsons", [point(1, 1, f"x{i}") for i in range(4)])

    rc, out, err = cli(capsys, "ingest", "test-points", str(good), "--license", "ODbL-1.0", "--source",
                       "a survey", "--database", url)
    assert rc == 0 and len(out) == 1 and out[0].startswith("version 1 of test-points ready: 2 records, 1 bad")
    assert "extent [7.0, 8.0, 9.0, 10.0]" in out[0]
    assert len(err) == 1 and "1 bad record not loaded" in err[0] and "line 2" in err[0]

    rc, out, err = cli(capsys, "ingest", "test-failing", str(fails), "--database", url)
    assert rc == 1 and out == [] and len(err) == 1
    assert err[0].startswith("sis ingest: loading bad.geojsons as test-failing failed after 2 records")

    rc, out, err = cli(capsys, "ingest", "test-points", str(tmp_path / "absent.geojsons"), "--database", url)
    assert rc == 2 and len(err) == 1 and "no such file" in err[0] and "version 3 marked failed" in err[0]

    rc, out, err = cli(capsys, "ingest", "test-points", str(tmp_path), "--database", url)
    assert rc == 2 and len(err) == 1 and "a folder, not a file" in err[0]

    rc, out, err = cli(capsys, "datasets", "list", "--database", url)
    assert rc == 0 and out[-1] == "4 dataset versions"
    rows = [line.split() for line in out[1:-1]]
    assert [(r[0], r[1], r[2]) for r in rows] == [("1", "test-points", "ready"), ("2", "test-failing", "failed"),
                                                  ("3", "test-points", "failed"), ("4", "test-points", "failed")]
    assert rows[0][4:7] == ["2", "1", "7,8,9,10"] and rows[0][7] == "ODbL-1.0"
    assert rows[0][8] == hashlib.sha256(good.read_bytes()).hexdigest()[:12] and "a survey" in out[1]
    assert "the disk went away" in out[2]

    rc, out, err = cli(capsys, "datasets", "list", "--kind", "test-failing", "--database", url)
    assert rc == 0 and out[-1] == "1 dataset versions" and out[1].split()[:3] == ["2", "test-failing", "failed"]
    rc, out, err = cli(capsys, "datasets", "list", "--kind", "test-pionts", "--database", url)
    assert rc == 2 and "no kind 'test-pionts'; the kinds are" in err[0]
    rc, out, err = cli(capsys, "datasets", "list", "--bad", "--database", url)        # every kept reason
    assert rc == 0 and out[2].strip().startswith("bad: line 2:") and out[3].split()[:2] == ["2", "test-failing"]

    rc, out, err = cli(capsys, "datasets", "kinds")
    names = sorted(production_kinds() + ["test-failing", "test-points"])
    assert rc == 0 and [line.split()[0] for line in out[:-1]] == names
    points = out[names.index("test-points")].split()
    assert points[1:3] == [".geojsons,.geojsonl", "CC0-1.0"] and out[-1] == f"{len(names)} kinds"

    rc, out, err = cli(capsys, "ingest", "roads", str(good), "--database", url)
    assert rc == 2 and out == [] and err == [
        f"sis ingest: unknown dataset kind 'roads': available kinds are {', '.join(names)}"]


def test_ingest_of_an_unknown_kind_says_so_in_one_line(tmp_path):
    """Run as a user would, with only the production kinds declared: one line, no
    traceback, and nothing created."""
    import os
    import subprocess
    import sys

    (tmp_path / "x.geojsons").write_text("")
    out = subprocess.run([sys.executable, "-m", "coordinator.cli", "ingest", "roads", str(tmp_path / "x.geojsons"),
                          "--database", f"sqlite:///{tmp_path}/sis.db"], capture_output=True, text=True,
                         timeout=60, env=dict(os.environ))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.splitlines() == [
        f"sis ingest: unknown dataset kind 'roads': available kinds are {', '.join(production_kinds())}"]
    assert not (tmp_path / "sis.db").exists()
