"""A load cancelled in the middle of a database call (SIGTERM, Ctrl-C) still marks its
version failed and deletes its rows, at once.

The cancellation is made to land on a chosen statement: a ``before_cursor_execute`` hook
cancels the running task, so the very future that statement's call waits on is cancelled
while aiosqlite's thread runs it, as a signal arriving at that moment does. SQLAlchemy then
invalidates the connection without closing that cursor, and SQLite's close of a connection
with a live statement only makes it a zombie that keeps its write transaction: the clean-up,
on a fresh connection, waited on the write lock its own process held (busy_timeout, 30 s a
statement; 7 of 20 loads stopped by SIGTERM, 5 of 20 by Ctrl-C). ``core.db`` closes the cursor
first.
SQLite only: a PostgreSQL connection closed is a transaction ended by the server.
"""
from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from coordinator.core.db import Database, migrate
from coordinator.datasets import ingest, versions
from coordinator.datasets.kinds import KINDS, KindRegistry
from coordinator.features import store, synthetic
from tests.test_datasets import TABLE, make_table, point, write_seq
from tests.test_datasets_drop import ROWS
from tests.test_sites import LAT, LON

BUSY_MS = 2000     # instead of 30 s: before the fix, the clean-up's statements failed after it ("database is locked")


def cancel_at(db: Database, table: str, nth: int) -> list[int]:
    """Cancel the running task when it issues its ``nth`` INSERT into ``table``."""
    seen: list[int] = []

    @event.listens_for(db.write_engine.sync_engine, "before_cursor_execute")
    def _cancel(_conn, _cursor, statement, _params, _context, _many):  # noqa: ANN001
        if statement.lstrip().upper().startswith(f"INSERT INTO {table.upper()}"):
            seen.append(1)
            if len(seen) == nth:
                asyncio.current_task().cancel()

    return seen


def short_busy_timeout(db: Database) -> None:
    for engine in (db.engine, db.write_engine):
        @event.listens_for(engine.sync_engine, "connect")
        def _short(dbapi_conn, _record):  # noqa: ANN001
            cur = dbapi_conn.cursor()
            cur.execute(f"PRAGMA busy_timeout={BUSY_MS}")
            cur.close()


@pytest.fixture
async def sqlite_db(sqlite_url):
    db = Database(sqlite_url)
    short_busy_timeout(db)
    await migrate.upgrade_async(db.write_engine, sqlite_url)
    await make_table(db)
    yield db
    await db.close()


async def test_a_statement_cancelled_in_its_call_leaves_no_write_lock_behind(sqlite_db):
    db = sqlite_db
    cancel_at(db, TABLE, 1)

    async def insert() -> None:
        async with db.write_core() as conn:
            # many rows (executemany): pysqlite keeps such a statement with its cursor when done, where it lets
            # go of a single row's, and the kept statement is what holds a closed connection open
            await conn.execute(sa.text(f"INSERT INTO {TABLE} (version_id, name, lon, lat) VALUES (1, :n, 0, 0)"),
                               [{"n": "a"}, {"n": "b"}])

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(insert())
    async with db.write_core() as conn:       # the lock is free ("database is locked" before), the insert undone
        assert await conn.scalar(sa.text(f"SELECT count(*) FROM {TABLE}")) == 0


@pytest.mark.parametrize("kind", ["test-rows", "places"])
async def test_a_load_cancelled_in_a_database_call_marks_its_version_failed_at_once(sqlite_db, tmp_path, kind):
    db = sqlite_db
    registry = KindRegistry()
    registry.register(ROWS)                 # rows written through the ORM session (Database.write)
    if kind == "places":
        registry.register(KINDS.get("places"))  # sis ingest's own: Core batches (Database.write_core)
        path = tmp_path / "places.geojsonl"
        synthetic.write_geojsonseq(path, synthetic.places((LAT, LON), 6000))   # three batches of store.BATCH
        table, count = store.LOAD_TABLE.name, sa.select(sa.func.count()).select_from(store.LOAD_TABLE)
    else:
        path = write_seq(tmp_path / "points.geojsons", [point(0.001 * i, 0.001 * i, f"p{i}") for i in range(350)])
        table, count = TABLE, sa.select(sa.func.count()).select_from(sa.table(TABLE))
    seen = cancel_at(db, table, 2)      # the second batch: the first is written and must be deleted

    with pytest.raises(asyncio.CancelledError):     # before: "database is locked", BUSY_MS after the cancel
        await asyncio.create_task(ingest.run(db, kind, path, registry=registry))
    assert len(seen) == 2
    (v,) = await versions.list_versions(db)
    assert (v.state, v.error) == ("failed", "interrupted")
    async with db.read() as s:
        assert await s.scalar(count) == 0
