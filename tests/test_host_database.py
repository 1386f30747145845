"""The SQLite database under host failures: a full disk, a read-only file or folder, a file cut
short, deleted or replaced while served.

- ``/healthz`` said ``"database": "ok"`` while every write failed on a full disk (its probe only
  reads): the database layer remembers the last write's host trouble until a write succeeds.
- The file deleted while ``sis serve`` ran went unnoticed (enrolments 201, ``/healthz`` ok),
  and was lost at the next start: its identity is taken at the first connection and
  ``/healthz`` (and a write, at most every few seconds) compares it, with an error logged.
- Start-up on a read-only, damaged or full database printed a 190-line traceback: one line,
  exit 2, saying what to do; the pid written beside it on a full disk is let go.
- A 0-byte file, or a missing one beside what an earlier one left, is migrated as new with a
  one-line warning; a new installation says nothing.

Disk full and read-only are simulated by raising SQLite's own errors from the driver (no root
needed, and CI may run as root, where permissions are not enforced)."""
from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import event

from coordinator import cli
from coordinator.cli import main
from coordinator.core import db as dbmod
from coordinator.core.db.migrate import lost_database
from coordinator.demo.photos import DEV_ENGINE_BUILD
from tests.support import make_settings, start_coordinator, stop_coordinator

SIS = [sys.executable, "-m", "coordinator.cli"]
ENROL = {"platform": "x", "gpu": "g", "engineVersion": "0.1.0", "engineBuild": DEV_ENGINE_BUILD}
WRITES = ("INSERT", "UPDATE", "DELETE", "CREATE", "ALTER", "DROP")


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*SIS, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "SIS_POLL_INTERVAL_S": "0"})


class Host:
    """Makes the write statements of an engine fail with SQLite's own error while ``trouble`` is set."""

    def __init__(self) -> None:
        self.trouble: str | None = None

    def attach(self, engine) -> None:  # noqa: ANN001
        @event.listens_for(engine.sync_engine, "before_cursor_execute")
        def _fail(conn, cursor, statement, params, context, executemany):  # noqa: ANN001
            if self.trouble and statement.lstrip().upper().startswith(WRITES):
                raise sqlite3.OperationalError(self.trouble)


@pytest.fixture
async def coordinator(sqlite_url, tmp_path):
    c = await start_coordinator(make_settings(sqlite_url, None, engine_builds=DEV_ENGINE_BUILD,
                                              data_dir=str(tmp_path / "data")))
    yield c
    await stop_coordinator(c)


@pytest.mark.parametrize("words", ["database or disk is full", "attempt to write a readonly database"])
async def test_healthz_says_the_database_cannot_write_until_a_write_succeeds(coordinator, words, caplog):
    c, host = coordinator, Host()
    host.attach(c.services.db.write_engine)
    assert (await c.post("/node/v1/enrol", ENROL)).status == 201
    assert (await c.get("/healthz")).json()["database"] == "ok"
    host.trouble = words
    refused = await c.post("/node/v1/enrol", ENROL)
    assert refused.status == 503 and refused.headers["Retry-After"] == "60"
    assert refused.json()["error"]["message"].startswith(f"the service's database cannot write ({words})")
    r = await c.get("/healthz")
    body = r.json()
    assert r.status == 503 and body["status"] == "degraded" and body["database"] == f"cannot write: {words}"
    assert body["databaseWriteFailedSince"].endswith("Z") and body["databaseWriteFailedLast"].endswith("Z")
    assert (await c.get("/healthz")).status == 503           # a failure this recent: the probe tries no write
    assert [r.getMessage() for r in caplog.records if r.name == "sis.db" and r.levelno == logging.ERROR] == [
        f"the database cannot write (SQLite file {c.services.db.path}): {words}; /healthz says so until a "
        "write succeeds"]
    host.trouble = None
    assert (await c.post("/node/v1/enrol", ENROL)).status == 201
    r = await c.get("/healthz")
    assert r.status == 200 and r.json()["database"] == "ok" and "databaseWriteFailedSince" not in r.json()
    assert any("takes writes again" in r.getMessage() for r in caplog.records if r.name == "sis.db")


async def test_healthz_tries_a_write_of_its_own_while_a_failure_is_on_record(coordinator, monkeypatch):
    """A process that no write reaches (taken out of a load balancer's rotation on its 503)
    stayed 503 after the disk had room again: the probe tries a write that changes nothing,
    at most every WRITE_RETRY_S after the last failure, and leaves the database as it was."""
    c, host = coordinator, Host()
    host.attach(c.services.db.write_engine)
    host.trouble = "database or disk is full"
    assert (await c.post("/node/v1/enrol", ENROL)).status == 503
    first = c.services.db.write_failure
    monkeypatch.setattr(dbmod, "WRITE_RETRY_S", 0.0)
    r = await c.get("/healthz")                               # the host still refuses: still on record
    assert r.status == 503 and c.services.db.write_failure is first and first.last > first.since
    host.trouble = None
    r = await c.get("/healthz")
    assert r.status == 200 and r.json()["database"] == "ok" and c.services.db.write_failure is None
    with sqlite3.connect(c.services.db.path) as conn:                    # left as it was
        (version,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    from coordinator.core.db import migrate
    assert {version} == migrate.head_revisions(str(c.services.db.url))
    assert (await c.post("/node/v1/enrol", ENROL)).status == 201


async def test_a_failure_that_is_not_the_hosts_is_not_reported_as_one(coordinator):
    c, host = coordinator, Host()
    host.attach(c.services.db.write_engine)
    host.trouble = "database is locked"
    assert (await c.post("/node/v1/enrol", ENROL)).status == 503
    assert c.services.db.write_failure is None and (await c.get("/healthz")).status == 200


async def test_the_sqlite_file_deleted_while_served_is_seen_by_healthz_and_a_write(coordinator, tmp_path, caplog):
    c = coordinator
    path = c.services.db.path
    assert (await c.post("/node/v1/enrol", ENROL)).status == 201
    assert (await c.get("/healthz")).status == 200
    for p in tmp_path.glob("sis.db*"):
        p.unlink()
    c.services.db._file_checked = -1e9                        # the write's look is due
    assert (await c.post("/node/v1/enrol", ENROL)).status == 201     # into the unlinked file, as SQLite does
    errors = [r.getMessage() for r in caplog.records if r.name == "sis.db" and r.levelno == logging.ERROR]
    assert errors == [f"the SQLite file {path} is gone (deleted while the service runs): what is written now is "
                      "lost when it stops; stop sis serve and restore the file from a backup"]
    r = await c.get("/healthz")
    assert r.status == 503 and r.json()["status"] == "degraded" and r.json()["database"] == errors[0]
    assert len([r for r in caplog.records if r.name == "sis.db" and r.levelno == logging.ERROR]) == 1   # once


async def test_the_sqlite_file_replaced_while_served_is_seen_by_healthz(coordinator, tmp_path):
    c = coordinator
    assert (await c.get("/healthz")).status == 200
    copy = tmp_path / "copy.db"
    shutil.copyfile(c.services.db.path, copy)
    os.replace(copy, c.services.db.path)
    r = await c.get("/healthz")
    assert r.status == 503 and "was replaced while the service runs" in r.json()["database"]


# ---- start-up -----------------------------------------------------------------------------

def one_line(out: subprocess.CompletedProcess) -> str:
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def migrated(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("migrated") / "full.db"
    assert main(["migrate", "--database", f"sqlite:///{path}"]) == 0
    return path


@pytest.mark.parametrize("n", [50, 4096, 200000])
def test_a_database_file_cut_short_is_one_line_saying_to_restore_it(migrated, tmp_path, n, capsys):
    cut = tmp_path / "sis.db"
    cut.write_bytes(migrated.read_bytes()[:n])
    said = (f"the SQLite file {cut} is damaged (database disk image is malformed): cut short or overwritten (a "
            "crash mid-copy, a disk that filled); restore it from a backup, or name another database (--database)")
    assert main(["keys", "list", "--database", f"sqlite:///{cut}"]) == 2
    assert capsys.readouterr().err.strip() == f"sis keys: {said}"
    if n == 4096:       # sis serve too, as a process (it holds the file's serving lock for its life)
        assert one_line(run("serve", "--port", "0", "--database", f"sqlite:///{cut}")) == f"sis serve: {said}"


@pytest.fixture
def failing_connect(monkeypatch):
    """Every SQLite connection of the process fails as it sets WAL mode with SQLite's error ``words``."""
    made = dbmod._sqlite_engine

    def engine(url, immediate, on_connect=None):  # noqa: ANN001
        e = made(url, immediate, on_connect)

        @event.listens_for(e.sync_engine, "connect")
        def _fail(dbapi_conn, _record):  # noqa: ANN001
            raise sqlite3.OperationalError(failing_connect.words)
        return e

    class failing_connect:    # noqa: N801
        words = ""
    monkeypatch.setattr(dbmod, "_sqlite_engine", engine)
    return failing_connect


@pytest.mark.parametrize("command", [["keys", "list"], ["keys", "create", "--name", "x"]])
def test_a_read_only_database_is_one_line_saying_what_to_fix(migrated, failing_connect, command, capsys):
    failing_connect.words = "attempt to write a readonly database"
    assert main([*command, "--database", f"sqlite:///{migrated}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"sis keys: cannot write the SQLite file {migrated}: ") and "\n" not in err
    assert err.endswith(f"(attempt to write a readonly database); SQLite writes the file and, beside it, its -wal "
                        f"and -shm files: give this user (uid {os.geteuid()}) write access to the file and its folder")


def test_a_full_disk_is_one_line_saying_to_free_space(migrated, failing_connect, capsys):
    failing_connect.words = "database or disk is full"
    assert main(["keys", "create", "--name", "x", "--database", f"sqlite:///{migrated}"]) == 2
    assert capsys.readouterr().err.strip() == (f"sis keys: cannot write the SQLite file {migrated}: the disk is full "
                                               "(database or disk is full); free space on it and start again")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes a 0500 folder: permissions are not enforced")
def test_a_database_in_a_read_only_folder_says_which_as_a_process(migrated, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    shutil.copyfile(migrated, folder / "sis.db")
    folder.chmod(0o500)
    try:
        line = one_line(run("serve", "--port", "0", "--database", f"sqlite:///{folder}/sis.db"))
        assert line.startswith(f"sis serve: cannot write the SQLite file {folder}/sis.db: its folder {folder} is "
                               "read-only to this user")
    finally:
        folder.chmod(0o700)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full, whose writes fail with ENOSPC")
def test_the_pid_beside_the_database_is_let_go_on_a_full_disk(tmp_path, monkeypatch):
    """The pid is only named in a second sis serve's refusal: a full disk is no reason to stop there."""
    (tmp_path / "sis.db.serving").symlink_to("/dev/full")
    monkeypatch.setattr(cli, "_SERVING_LOCK", None)
    try:
        cli._serve_sqlite_alone(make_settings(f"sqlite+aiosqlite:///{tmp_path}/sis.db", None))   # raised ENOSPC
        assert cli._SERVING_LOCK is not None
    finally:
        if cli._SERVING_LOCK is not None:
            cli._SERVING_LOCK.close()


# ---- a database lost, not new ---------------------------------------------------------------

def test_an_empty_or_missing_database_beside_an_earlier_ones_traces_is_warned_of(tmp_path):
    db = tmp_path / "sis.db"
    assert lost_database(db) is None                                       # a new installation: nothing said
    db.write_bytes(b"")
    assert lost_database(db) == (f"{db} is empty (0 bytes): a new database is made in it; if it held one (a copy or "
                                 "restore cut short, a disk that filled), stop now and restore it from a backup")
    db.unlink()
    (tmp_path / "sis.db.serving").write_text("123\n")
    (tmp_path / "sis.db-wal").write_bytes(b"x")
    assert lost_database(db) == (f"there is no database at {db}, but sis.db-wal, sis.db.serving left by an earlier "
                                 "one are there: a new, empty database is made; if one was there (deleted, moved, a "
                                 "mount missing), stop now and put it back")


def test_sis_serve_warns_of_a_database_deleted_since_it_last_served(tmp_path, capsys, monkeypatch):
    db = tmp_path / "sis.db"
    (tmp_path / "sis.db.serving").write_text("123\n")                      # an earlier sis serve's
    monkeypatch.setattr(cli, "_SERVING_LOCK", None)
    try:
        cli._serve_sqlite_alone(make_settings(f"sqlite+aiosqlite:///{db}", None))
    finally:
        if cli._SERVING_LOCK is not None:
            cli._SERVING_LOCK.close()
    assert capsys.readouterr().err == (f"sis serve: warning: there is no database at {db}, but sis.db.serving left "
                                       "by an earlier one is there: a new, empty database is made; if one was there "
                                       "(deleted, moved, a mount missing), stop now and put it back\n")


def test_postgresql_disk_full_and_read_only_are_told_apart_by_their_sqlstate():
    import asyncpg

    from coordinator.core.db.urls import storage_trouble

    assert storage_trouble(asyncpg.exceptions.DiskFullError("could not extend file"))[0] == "full"
    assert storage_trouble(asyncpg.exceptions.ReadOnlySQLTransactionError("read-only transaction"))[0] == "read-only"
    assert storage_trouble(asyncpg.exceptions.UniqueViolationError("duplicate key")) is None
    assert storage_trouble(OSError(28, "No space left on device")) is None     # any file's: not the database's


@pytest.mark.postgres
async def test_healthz_says_a_read_only_postgresql_cannot_write(pg_database, tmp_path):
    """PostgreSQL's own refusal (SQLSTATE 25006), from a real server: each transaction set read-only."""
    if not pg_database:
        pytest.skip("PostgreSQL suite: set SIS_TEST_DATABASE_URL")
    from tests.conftest import fresh_postgres

    c = await start_coordinator(make_settings(await fresh_postgres(pg_database), None, engine_builds=DEV_ENGINE_BUILD,
                                              data_dir=str(tmp_path / "data")))
    read_only = []

    @event.listens_for(c.services.db.write_engine.sync_engine, "begin")
    def _begin(conn):  # noqa: ANN001
        if read_only:
            conn.exec_driver_sql("SET TRANSACTION READ ONLY")
    try:
        assert (await c.post("/node/v1/enrol", ENROL)).status == 201
        read_only.append(True)
        refused = await c.post("/node/v1/enrol", ENROL)          # PostgreSQL's refusal is a plain DBAPIError
        assert refused.status == 503 and "cannot write" in refused.json()["error"]["message"], refused.body
        r = await c.get("/healthz")
        assert r.status == 503 and r.json()["database"].startswith("cannot write: cannot execute INSERT in a read-only")
        c.services.db.write_failure.last -= dbmod.WRITE_RETRY_S  # the probe's own write is due: refused too
        since = c.services.db.write_failure.since
        r = await c.get("/healthz")
        assert r.status == 503 and r.json()["database"].startswith("cannot write: cannot execute UPDATE in a ")
        assert c.services.db.write_failure.since == since          # the same failure, another statement
        read_only.clear()
        c.services.db.write_failure.last -= dbmod.WRITE_RETRY_S
        assert (await c.get("/healthz")).status == 200           # mended by the probe's own write
        assert (await c.post("/node/v1/enrol", ENROL)).status == 201
    finally:
        await stop_coordinator(c)


def test_sis_migrate_warns_of_an_empty_database_file_as_sis_serve_does(tmp_path, capsys):
    """sis migrate made a new database in a 0-byte file without a word, where sis serve warns."""
    from coordinator.cli import main
    db = tmp_path / "sis.db"
    db.write_bytes(b"")
    assert main(["migrate", "--database", f"sqlite:///{db}"]) == 0
    assert f"sis migrate: warning: {db} is empty (0 bytes)" in capsys.readouterr().err
    assert main(["migrate", "--database", f"sqlite:///{db}"]) == 0          # migrated now: nothing said
    assert "warning" not in capsys.readouterr().err
