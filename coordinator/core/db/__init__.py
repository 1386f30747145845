"""Database access: SQLAlchemy 2 asyncio on SQLite (embedded) or PostgreSQL.

SQLite runs in WAL mode and every write transaction starts with
``BEGIN IMMEDIATE``: with SQLite's default deferred BEGIN two writers can both
read a row as free and then both claim it. Writes therefore go through
``Database.write()``, reads through ``Database.read()``. On PostgreSQL both are
the same engine; row claims there use ``FOR UPDATE SKIP LOCKED``.

A write that fails for the host (a full disk, a read-only file or file system, a damaged
file, an I/O error: ``urls.storage_trouble``) is remembered with its time until a write
succeeds (``write_failure``), so that ``/healthz`` reports it: its read-only probe answered
"ok" while every write failed. While one is on record ``/healthz`` tries a write of its own
now and then (``retry_write``): a process that no write reached stayed 503 for good, and a
load balancer that had taken it out of rotation on that 503 never sent it the write that
would have mended it. The SQLite file's identity (device, inode) is taken at the
first connection, and ``file_problem`` says when the file is gone or another one is in its
place (deleted, or a copy moved over it, while the service runs): writes went on into the
unlinked file, answered 201, and were lost at the next start without a word. It is looked
at by ``/healthz`` and, at most every ``FILE_CHECK_S``, after a write (one stat), which
logs the error once.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator

import orjson
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.util import await_
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from .. import jsontext
from ..times import iso_epoch
from . import urls
from .urls import label as label_of, storage_trouble

log = logging.getLogger("sis.db")


def json_dumps(obj) -> str:
    """The text of a JSON column: orjson's, which reads back as the standard library's does
    and is ten times faster (a result's body is written on every submission, and the
    standard library's encoder was the largest part of the JSON cost in bench/queue.py);
    the standard library's for what orjson refuses (integers past 64 bits). orjson writes
    NaN and infinities as null, where the standard library writes tokens that PostgreSQL
    refuses; the values stored here are checked finite before they get this far. Columns are
    read back by ``jsontext.loads``: the standard library's values, at orjson's speed where
    the two agree."""
    try:
        return orjson.dumps(obj).decode()
    except orjson.JSONEncodeError:
        return json.dumps(obj)


def _engine(url: str, **kw) -> AsyncEngine:
    return create_async_engine(url, json_serializer=json_dumps, json_deserializer=jsontext.loads, **kw)


def _sqlite_engine(url: str, immediate: bool, on_connect=None) -> AsyncEngine:  # noqa: ANN001
    engine = _engine(url, connect_args={"timeout": 30})

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn, _record):  # noqa: ANN001
        # Let SQLAlchemy's begin event, not the driver, open transactions.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()
        if on_connect is not None:
            on_connect()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn):  # noqa: ANN001
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    event.listen(engine.sync_engine, "handle_error", _close_cursor_of_invalidated)
    return engine


def _close_cursor_of_invalidated(ctx) -> None:  # noqa: ANN001
    """Close the cursor of a statement whose connection SQLAlchemy is about to invalidate.

    A task cancelled while its statement runs (SIGTERM or Ctrl-C stopping ``sis ingest``, a
    request given up) is an "exit exception" to SQLAlchemy: it invalidates the connection
    and, unlike on any other error, leaves that statement's cursor open. aiosqlite's thread
    still finishes the statement; pysqlite keeps the statement of an executemany with its
    cursor, and SQLite's close of a connection with a statement still alive
    (``sqlite3_close_v2``) only makes it a zombie that keeps its transaction, BEGIN
    IMMEDIATE's write lock included, until the cursor is garbage-collected. The cursor is
    referenced from the exception's traceback, which a clean-up in its ``except`` block holds:
    the clean-up, on a fresh connection, waited on the lock its own process held, 30 s
    (busy_timeout) a statement and then "database is locked" (7 of 20 loads stopped by SIGTERM,
    5 of 20 by Ctrl-C; tests/test_ingest_cancel.py). Closed
    here, before the connection is, the statement goes and the close is a real one, rolling
    back. It runs on the connection's one worker thread after the statement, so the order
    holds even if this wait is itself cancelled; an error closing it is left to the close."""
    if not ctx.is_disconnect:
        return
    # The statement's cursor is its execution context's: SQLAlchemy 2.1.9's ExceptionContextImpl
    # declares ``cursor`` and never sets it. Nothing here may raise: an error from a handler
    # replaces the exception being handled (the cancellation itself).
    cursor = getattr(ctx, "cursor", None) or getattr(ctx.execution_context, "cursor", None)
    if cursor is None:
        return
    try:
        cursor.close()
    except Exception:  # noqa: BLE001 - the connection is being invalidated anyway
        log.debug("closing the cursor of an invalidated connection failed", exc_info=True)


# Bounds on a PostgreSQL that stops answering (a hung server, a network that drops packets):
# without them a request, /healthz and the process's stop waited as long as it did. A statement
# may take long (an ingest's batch), a connection or the checkout's check may not.
# PG_CONNECT_TIMEOUT_S lives in urls.py, which names it in its one-line errors (read there at
# call time: the tests shorten it), so that urls.py never imports this module back.
PG_PING_TIMEOUT_S = 5.0
PG_COMMAND_TIMEOUT_S = 120.0
CLOSE_TIMEOUT_S = 10.0


def _postgres_engine(url: str) -> AsyncEngine:
    """A pool whose connections are checked on every checkout, as ``pool_pre_ping`` does,
    with one round trip instead of its three: SQLAlchemy's asyncpg ping wraps its query in
    BEGIN and ROLLBACK (for PgBouncer's transaction mode, which is not used here), and
    every group-commit batch of the sweep queue starts with a checkout. A connection that
    fails the check is discarded and the pool opens a fresh one, as with the pre-ping."""
    engine = _engine(url, pool_size=10, max_overflow=20, pool_timeout=30,
                     connect_args={"timeout": urls.PG_CONNECT_TIMEOUT_S, "command_timeout": PG_COMMAND_TIMEOUT_S})

    @event.listens_for(engine.sync_engine, "checkout")
    def _ping(_dbapi_conn, record, _proxy):  # noqa: ANN001
        try:
            await_(record.driver_connection.fetchrow(";", timeout=PG_PING_TIMEOUT_S))
        except Exception as exc:
            raise DisconnectionError(f"the connection failed its check: {exc}") from exc

    return engine


FILE_CHECK_S = 5.0      # how often, at most, a write looks at the SQLite file's identity (one stat)
FAILURE_SAID_S = 60.0   # how often, at most, a failing write is logged
WRITE_RETRY_S = 15.0    # how long after the last failed write /healthz tries one of its own
# A write that leaves nothing behind: Alembic's version row set to what it is. It writes a
# page (SQLite) or a row version (PostgreSQL) as any write does, a read-only server or
# transaction refuses it (SQLSTATE 25006), and the service's own role may make it, where a
# temporary table needs the TEMP privilege a hardened database takes away.
WRITE_PROBE = "UPDATE alembic_version SET version_num = version_num"


@dataclass
class WriteFailure:
    """The host trouble the last failed write met (``urls.storage_trouble``), since when."""

    kind: str           # full, read-only, damaged, io
    words: str          # the driver's own: "database or disk is full"
    since: float        # time.time() of the first failure of this run of them
    last: float
    said: bool = True   # logged (at most once a minute)


class Database:
    def __init__(self, url: str) -> None:
        self.url = url
        # What a reader worked out about ready dataset versions, which never change (a map
        # version's rows per level, its top levels): kept for this object's life, a process's,
        # and never shared with another. Keyed by URL and version id in the process, a database
        # emptied and loaded again under the same URL (as the tests do, and as an operator
        # might) was answered from the figures of the one before, with the same ids.
        self.memo: dict[str, dict] = {}
        self.write_failure: WriteFailure | None = None
        self._probe_said = False               # a probe write that failed for another reason, logged once
        self._failure_said_at = -FAILURE_SAID_S
        self.path: Path | None = None          # the SQLite file
        self._file_id: tuple[int, int] | None = None
        self._file_said: str | None = None
        self._file_checked = 0.0
        parsed = make_url(url)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        if self.is_sqlite:
            if parsed.database and parsed.database != ":memory:":
                self.path = Path(parsed.database).absolute()
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self.engine = _sqlite_engine(url, immediate=False, on_connect=self._connected)
            self.write_engine = _sqlite_engine(url, immediate=True, on_connect=self._connected)
        else:
            self.engine = _postgres_engine(url)
            self.write_engine = self.engine
        self._read = async_sessionmaker(self.engine, expire_on_commit=False)
        self._write = async_sessionmaker(self.write_engine, expire_on_commit=False)

    # -- the host under the database ---------------------------------------------
    def _connected(self) -> None:
        """A connection opened (on a driver thread): the file's identity is taken at the first."""
        if self.path is None or self._file_id is not None:
            return
        with contextlib.suppress(OSError):
            st = os.stat(self.path)
            self._file_id = (st.st_dev, st.st_ino)

    def file_problem(self) -> str | None:
        """Why the SQLite file this process opened is no longer the one at its path, or None
        (PostgreSQL, a file never opened yet, or the same file). Logged once when first seen."""
        if self.path is None or self._file_id is None:
            return None
        try:
            st = os.stat(self.path)
            problem = None if (st.st_dev, st.st_ino) == self._file_id else (
                f"the SQLite file {self.path} was replaced while the service runs: this process writes to the "
                "file it opened, no longer at that path; restart sis serve to serve the file there now")
        except FileNotFoundError:
            problem = (f"the SQLite file {self.path} is gone (deleted while the service runs): what is written "
                       "now is lost when it stops; stop sis serve and restore the file from a backup")
        except OSError as exc:
            problem = f"cannot see the SQLite file {self.path}: {exc.strerror}"
        if problem != self._file_said:
            if problem is not None:
                log.error("%s", problem)
            elif self._file_said is not None:
                log.warning("the SQLite file %s is the one this process opened again", self.path)
            self._file_said = problem
        return problem

    def _failed(self, exc: BaseException) -> None:
        trouble = storage_trouble(exc)
        if trouble is None:
            return
        now, before = time.time(), self.write_failure
        # The same failure while its kind is: PostgreSQL's words name the statement ("cannot execute
        # INSERT in a read-only transaction"), which differs write by write and restarted the record.
        if before is None or before.kind != trouble[0]:
            # Said at most once a minute: on a disk that is nearly full some writes still fit, and
            # failures and successes may alternate request by request.
            said = now - self._failure_said_at >= FAILURE_SAID_S
            if said:
                self._failure_said_at = now
                log.error("the database cannot write (%s): %s; /healthz says so until a write succeeds",
                          label_of(self.url), trouble[1])
            self.write_failure = WriteFailure(trouble[0], trouble[1], now, now, said)
        else:
            before.words, before.last = trouble[1], now

    def _wrote(self) -> None:
        if self.write_failure is not None:
            if self.write_failure.said:
                log.warning("the database takes writes again (%s), after %s since %s", label_of(self.url),
                            self.write_failure.words, iso_epoch(self.write_failure.since))
            self.write_failure = None
        if self.path is not None:
            now = time.monotonic()
            if now - self._file_checked >= FILE_CHECK_S:
                self._file_checked = now
                self.file_problem()

    async def retry_write(self) -> None:
        """When the last write failed for the host at least ``WRITE_RETRY_S`` ago, try a write
        that changes nothing (``WRITE_PROBE``), through ``write_core`` so
        that its outcome is recorded as any write's is: the failure mended, or still on record
        with a later ``last``. A failure of another kind (a locked database) leaves the record
        as it is."""
        failure = self.write_failure
        if failure is None or time.time() - failure.last < WRITE_RETRY_S:
            return
        try:
            async with self.write_core() as conn:
                await conn.exec_driver_sql(WRITE_PROBE)
        except Exception as exc:  # noqa: BLE001 - recorded by write_core where it is the host's
            if storage_trouble(exc) is None and not self._probe_said:
                self._probe_said = True       # the record then stays until a request's write succeeds
                log.warning("/healthz could not try a write of its own (%s): %s", label_of(self.url),
                            str(getattr(exc, "orig", None) or exc).splitlines()[0][:300])

    # -- sessions -------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncSession]:
        async with self._read() as session:
            yield session

    @contextlib.asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncSession]:
        """A write transaction: committed on success, rolled back on error."""
        try:
            async with self._write() as session:
                async with session.begin():
                    yield session
        except BaseException as exc:
            self._failed(exc)
            raise
        self._wrote()

    @contextlib.asynccontextmanager
    async def write_core(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction on a bare connection, for Core statements only: committed on
        success, rolled back on error. The ORM session of ``write`` costs about a tenth of a
        millisecond a statement more (bench/queue.py: the sweep queue's batches)."""
        try:
            async with self.write_engine.begin() as conn:
                yield conn
        except BaseException as exc:
            self._failed(exc)
            raise
        self._wrote()

    async def close(self, after_error: bool = False) -> None:
        """Close the pools. ``after_error``: the caller is ending on an exception, which may be a
        SQLite file that failed to open; its driver thread is let finish first
        (``sqlite_threads_done``)."""
        for engine in (self.engine,) if self.write_engine is self.engine else (self.engine, self.write_engine):
            try:   # a server that stopped answering must not hold the process's stop
                await asyncio.wait_for(engine.dispose(), CLOSE_TIMEOUT_S)
            except asyncio.TimeoutError:
                log.warning("the database did not let its connections close within %.0f s; left to the "
                            "operating system", CLOSE_TIMEOUT_S)
        if after_error and self.is_sqlite:
            await sqlite_threads_done()

    async def __aenter__(self) -> "Database":
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:  # noqa: ANN001
        await self.close(after_error=exc_type is not None)


SQLITE_THREADS_WAIT_S = 0.5


async def sqlite_threads_done(limit_s: float = SQLITE_THREADS_WAIT_S) -> None:
    """Wait, while the event loop still runs, for aiosqlite's worker threads to end (at most
    ``limit_s``). aiosqlite 0.22 stops the thread of a connection that failed to open without
    waiting for it, and the thread answers through the loop: when ``asyncio.run`` has closed
    the loop by then (a command ending on its one-line start-up error, a folder that cannot be
    written), the thread prints "Event loop is closed" tracebacks under that line. Threads of
    connections still open elsewhere in the process do not end, hence the cap."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit_s
    while loop.time() < end and any(t.is_alive() and t.name.endswith("(_connection_worker_thread)")
                                    for t in threading.enumerate()):
        await asyncio.sleep(0.01)
