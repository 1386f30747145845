"""``sis datasets drop``: a version's rows and files deleted and its record kept, marked
dropped; answers go on from the versions left; refusals change nothing; a drop run again
finishes one cut short."""
from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from coordinator.core.db import Database, migrate
from coordinator.datasets import drop, ingest, versions
from coordinator.datasets.kinds import DatasetKind
from coordinator.features import store
from tests.test_datasets import (FILES, cli, discard_points, load_points, make_table, point, registered, rows_of,
                                 write_seq)
from tests.test_sites import LAT, LON, c, files  # noqa: F401 - fixtures


ROWS = DatasetKind(name="test-rows", description="points kept as rows, discarded by version (tests only)",
                   license="CC0-1.0", suffixes=(".geojsons",), load=load_points, discard=discard_points)


async def place_rows(db, version_id: int) -> int:  # noqa: ANN001
    async with db.read() as s:
        return await s.scalar(sa.select(sa.func.count()).select_from(store.TABLE)
                              .where(store.C.version_id == version_id))


def mapped_under(folder) -> bool:
    """Whether this process maps a file of ``folder`` into memory (``/proc/self/maps``)."""
    with open("/proc/self/maps") as f:
        return any(str(folder) in line for line in f)


async def test_dropping_versions_deletes_their_rows_and_files_and_answers_go_on_from_the_rest(c, files):  # noqa: F811
    db, data = c.services.db, c.services.settings.data_dir
    old_places = await ingest.run(db, "places", files["places"])
    new_places = await ingest.run(db, "places", files["places"])
    old_pop = await ingest.run(db, "population", files["pop"], data_dir=data)
    new_pop = await ingest.run(db, "population", files["pop"], data_dir=data)
    box = f"{LON - 0.01},{LAT - 0.01},{LON + 0.01},{LAT + 0.01}"
    assert (await c.get(f"/earth/place-trends?bbox={box}")).json()["covered"] is True    # two snapshots
    assert await place_rows(db, old_places.id) > 1000
    await c.get(f"/earth/site-intel?lat={LAT}&lon={LON}&radius=600")       # maps the newest grid
    assert mapped_under(versions.folder_of(data, new_pop))

    chosen = await drop.check(db, [old_places.id, new_pop.id])
    out = [await drop.drop(db, v, data) for v in chosen]
    assert [d.version.state for d in out] == ["dropped", "dropped"] and not any(d.again for d in out)
    assert out[0].folder is None and out[0].newest.id == new_places.id
    assert out[1].folder is not None and not out[1].folder.exists() and out[1].newest.id == old_pop.id
    assert await place_rows(db, old_places.id) == 0 and await place_rows(db, new_places.id) > 1000
    assert [v.id for v in await versions.newest_ready(db, "population", 5)] == [old_pop.id]

    # The places answered from the one version left, trends from one snapshot (unknown, not zero),
    # and the population from the older grid, whose files are untouched. (A box not asked
    # before: an answer cached before the drop is served until its time to live is up.)
    box = f"{LON - 0.011},{LAT - 0.011},{LON + 0.011},{LAT + 0.011}"
    trends = (await c.get(f"/earth/place-trends?bbox={box}")).json()
    assert trends["covered"] is False and "holds 1 snapshot" in trends["reason"]
    body = (await c.get(f"/earth/site-intel?lat={LAT}&lon={LON}&radius=610")).json()
    people = next(cn for cn in body["contributions"] if cn["feature"] == "population")
    assert people["value"] > 0 and people["confidence"] != "unknown"
    assert not mapped_under(out[1].folder)       # the dropped grid let go: its disk space is back

    # Run again (as after a drop cut short): what is left is deleted, and it says so.
    again = await drop.drop(db, (await drop.check(db, [old_places.id]))[0], data)
    assert again.again and again.version.state == "dropped"


@pytest.fixture
def drop_kinds():
    yield from registered(ROWS, FILES)


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_the_cli_drops_refuses_in_one_line_and_lists_dropped_versions(backend, drop_kinds, tmp_path, capsys,
                                                                       monkeypatch, pg_database):
    if backend == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path}/sis.db"
    else:
        if not pg_database:
            pytest.skip("PostgreSQL suite: set SIS_TEST_DATABASE_URL")
        from tests.conftest import reset_postgres
        asyncio.run(reset_postgres(pg_database))
        url = pg_database
    monkeypatch.setenv("SIS_DATA_DIR", str(tmp_path / "data"))

    async def prepare() -> int:
        db = Database(url)
        await migrate.upgrade_async(db.write_engine, url)
        await make_table(db)
        crashed = await versions.create(db, "test-rows", source="a load killed midway", license="CC0-1.0",
                                        file_name="x.geojsons", file_bytes=1)
        await db.close()
        return crashed.id

    crashed = asyncio.run(prepare())                                                   # version 1, loading
    points = write_seq(tmp_path / "p.geojsons", [point(7, 8, "a"), point(9, 10, "b")])
    (tmp_path / "f.txt").write_text("kept in a folder")
    for kind, path in (("test-rows", points), ("test-rows", points), ("test-files", tmp_path / "f.txt")):
        assert cli(capsys, "ingest", kind, str(path), "--database", url)[0] == 0    # versions 2, 3, 4
    [folder] = (tmp_path / "data" / "test-files").glob("4-*")
    assert (folder / "copy.txt").read_text() == "kept in a folder"

    # Refusals name the first version that cannot go, and nothing is dropped.
    for ids, why in ((["2", "99"], "no dataset version 99 (sis datasets list shows them)"),
                     (["2", str(crashed)], f"version {crashed} of test-rows is still loading, or its load stopped "
                                           "without ending it: if no `sis ingest` is running, drop it with "
                                           "--crashed")):
        rc, out, err = cli(capsys, "datasets", "drop", *ids, "--database", url)
        assert (rc, out, err) == (2, [], [f"sis datasets drop: {why}; nothing dropped"])

    async def counts() -> list[int]:
        db = Database(url)
        try:
            return [len(await rows_of(db, v)) for v in (2, 3)]
        finally:
            await db.close()

    assert asyncio.run(counts()) == [2, 2]

    rc, out, err = cli(capsys, "datasets", "drop", "2", "4", str(crashed), "--crashed", "--database", url)
    assert rc == 0 and err == [] and out == [
        "version 2 of test-rows dropped: its rows deleted; the newest ready test-rows version is 3",
        f"version 4 of test-files dropped: its files removed ({folder}); "
        "no test-files version is ready now: its answers say none is loaded",
        f"version {crashed} of test-rows dropped: its rows deleted; the newest ready test-rows version is 3"]
    assert asyncio.run(counts()) == [0, 2] and not folder.exists()

    rc, out, err = cli(capsys, "datasets", "drop", "2", "--database", url)
    assert rc == 0 and out == ["version 2 of test-rows was dropped already: what was left of it deleted; "
                               "the newest ready test-rows version is 3"]

    # Run where the files are not (another SIS_DATA_DIR): it says so rather than "removed".
    assert cli(capsys, "ingest", "test-files", str(tmp_path / "f.txt"), "--database", url)[0] == 0  # version 5
    monkeypatch.setenv("SIS_DATA_DIR", str(tmp_path / "elsewhere"))
    rc, out, err = cli(capsys, "datasets", "drop", "5", "--database", url)
    assert rc == 0 and out == [f"version 5 of test-files dropped: no files of it under {tmp_path / 'elsewhere'} "
                               "(SIS_DATA_DIR); no test-files version is ready now: its answers say none is loaded"]

    rc, out, err = cli(capsys, "datasets", "list", "--database", url)
    states = {line.split()[0]: line.split()[2] for line in out[1:-1]}
    assert states == {"1": "dropped", "2": "dropped", "3": "ready", "4": "dropped", "5": "dropped"}
    assert "a load killed midway" in out[1]          # the record kept: what was loaded and from where


async def test_a_load_dropped_while_it_runs_keeps_nothing(db_url, tmp_path):
    """``--crashed`` used on a load that was in fact running: the load's end does not make
    the dropped version ready again; what it wrote after the drop is deleted too."""
    from coordinator.datasets.kinds import KindRegistry

    db = Database(db_url)
    await migrate.upgrade_async(db.write_engine, db_url)
    await make_table(db)

    async def load_then_dropped(load: ingest.Load) -> None:
        await load_points(load)
        v = (await drop.check(db, [load.version_id], crashed=True, registry=registry))[0]
        await drop.drop(db, v, None, registry)             # the operator's drop, mid-load
        await load_points(load)                            # the load writes on

    registry = KindRegistry()
    registry.register(DatasetKind(name="test-raced", description="points (tests only)", license="CC0-1.0",
                                  suffixes=(".geojsons",), load=load_then_dropped, discard=discard_points))
    path = write_seq(tmp_path / "p.geojsons", [point(7, 8, "a")])
    try:
        with pytest.raises(ingest.IngestError, match="was dropped while it loaded"):
            await ingest.run(db, "test-raced", path, registry=registry)
        [v] = await versions.list_versions(db)
        assert v.state == "dropped" and await rows_of(db, v.id) == []
    finally:
        await db.close()


async def test_a_failed_version_from_before_folders_were_named_never_removes_kind_id(db_url, tmp_path):
    """Before migration 0018 a load that met another database's ``KIND/ID`` failed on it and
    left it alone; dropping that failed version must not remove it either."""
    db = Database(db_url)
    await migrate.upgrade_async(db.write_engine, db_url)
    data = tmp_path / "data"
    try:
        v = await versions.create(db, "population", source="x.asc", license="CC-BY-4.0", file_name="x.asc",
                                  file_bytes=1)
        async with db.write() as s:
            await s.execute(sa.update(versions.DatasetVersion).where(versions.DatasetVersion.id == v.id)
                            .values(folder=None))
        failed = await versions.fail(db, v.id, f"FileExistsError: population/{v.id}")
        other = data / "population" / str(v.id)
        other.mkdir(parents=True)
        (other / "manifest.json").write_text("{}")                   # another database's grid
        d = await drop.drop(db, (await drop.check(db, [failed.id]))[0], data)
        assert d.was == "failed" and d.folder is None and (other / "manifest.json").is_file()
    finally:
        await db.close()


async def test_a_versions_rows_are_deleted_in_batches_that_give_the_write_lock_back(c, files, monkeypatch):  # noqa: F811
    """One transaction held SQLite's write lock for the whole delete of a large version (4.2 s for
    300,000 rows), stalling every metered request; batches give it back between them."""
    from coordinator.datasets import rows
    db = c.services.db
    keep = await ingest.run(db, "places", files["places"])
    gone = await ingest.run(db, "places", files["places"])
    n = await place_rows(db, gone.id)
    transactions = 0
    real = db.write_core

    def counted():
        nonlocal transactions
        transactions += 1
        return real()

    monkeypatch.setattr(db, "write_core", counted)
    assert await rows.delete_version_rows(db, store.TABLE, gone.id, batch=7) == n
    assert transactions == n // 7 + 1 and await place_rows(db, gone.id) == 0
    assert await place_rows(db, keep.id) == n


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_sis_ingest_stopped_by_sigterm_or_ctrl_c_marks_its_version_failed(tmp_path, signame):
    """systemd stop, docker stop and timeout send SIGTERM: the load was left `loading` for ever with its
    rows staged, where Ctrl-C marked it failed. It now stops as Ctrl-C does, and says so. Either signal
    lands in a database call, and its clean-up waited on the write lock that call's connection kept
    (7 of 20 stops by SIGTERM, 5 of 20 by SIGINT; tests/test_ingest_cancel.py makes it land there)."""
    import contextlib
    import os
    import signal
    import sqlite3
    import subprocess
    import sys
    import time

    from coordinator.features import synthetic
    big = tmp_path / "places-big.geojsonl"
    synthetic.write_geojsonseq(big, synthetic.places((LAT, LON), 60000))
    url = f"sqlite:///{tmp_path}/sis.db"
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "SIS_DATA_DIR": str(tmp_path / "data")}
    cli = [sys.executable, "-m", "coordinator.cli"]
    assert subprocess.run([*cli, "migrate", "--database", url], env=env, capture_output=True).returncode == 0
    # SIGINT as a terminal's Ctrl-C gives it: a run started in the background has it ignored, and so would this
    restore = (lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) if signame == "SIGINT" else None
    proc = subprocess.Popen([*cli, "ingest", "places", str(big), "--database", url], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=restore)
    def states() -> list[str]:
        with contextlib.closing(sqlite3.connect(tmp_path / "sis.db", timeout=30)) as conn:
            return [state for (state,) in conn.execute("SELECT state FROM dataset_versions")]

    def rows() -> int:
        with contextlib.closing(sqlite3.connect(tmp_path / "sis.db", timeout=30)) as conn:
            return sum(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                       for t in (store.TABLE.name, store.LOAD_TABLE.name))

    deadline = time.monotonic() + 60
    while states() != ["loading"]:                              # started, and reading
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    proc.send_signal(getattr(signal, signame))
    out, err = proc.communicate(timeout=60)
    assert states() == ["failed"] and rows() == 0, (proc.returncode, err)
    if signame == "SIGTERM":
        assert proc.returncode == 143, (out, err)
        assert "stopped by SIGTERM: the version it was loading is marked failed (interrupted)" in err
    else:
        assert proc.returncode == 130, (out, err)
        assert "sis ingest: interrupted" in err
