"""Running the seen layer's read statements: the same SQLAlchemy Core statements on both
databases, with the driver path that is cheapest for each.

A read is a plain function of a synchronous ``Connection`` (two statements and the
row handling), and each statement sees the database as committed when it runs, on
both databases (SQLite's driver starts no transaction for a read either).

On PostgreSQL it runs through an async engine of its own (``run_sync``, asyncpg) in
autocommit, with connections not checked on checkout: the service's engine wraps a
read in BEGIN and ROLLBACK and checks each connection it hands out, three round trips
to the server that cost a large circle's read more than its coverage statement
(``bench/seen.py``). A connection found dead (the server restarted) fails its read,
is thrown away with the rest of the pool, and the read is run once more on a fresh one:
a read changes nothing, so running it again is safe.

On SQLite it runs whole in one worker thread on a synchronous engine over the same
file: aiosqlite hands every call (execute, fetch, close...) to its own thread and
back, and on a busy two-core machine those hand-offs cost more than the query
(``bench/seen.py``: 13.5 ms p50 at 450 m through aiosqlite, most of it waiting).
The database is in WAL mode, so these readers never block the writers. Reader
connections map the database file into memory (``mmap_size``): a large circle reads
a thousand rows scattered over the file, and mapped pages are read without a system
call each.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, TypeVar

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine

T = TypeVar("T")
MMAP_BYTES = 1 << 30      # address space, not memory: pages stay the OS's file cache


class Reader:
    def __init__(self, db) -> None:
        self.db = db
        self.sync = None
        self.engine = None
        if not db.is_sqlite:
            self.engine = create_async_engine(db.url, pool_size=4, max_overflow=4, isolation_level="AUTOCOMMIT")
        else:
            url = make_url(db.url).set(drivername="sqlite")
            self.sync = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30},
                                      pool_size=4, max_overflow=4)

            @event.listens_for(self.sync, "connect")
            def _on_connect(dbapi_conn, _record):  # noqa: ANN001
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA busy_timeout=30000")
                cur.execute("PRAGMA query_only=1")
                cur.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
                cur.close()

    def _run(self, fn: Callable[[Connection], T]) -> T:
        with self.sync.connect() as conn:
            return fn(conn)

    async def run(self, fn: Callable[[Connection], T]) -> T:
        if self.sync is not None:
            return await asyncio.to_thread(self._run, fn)
        try:
            return await self._run_async(fn)
        except DBAPIError as exc:
            if not exc.connection_invalidated:
                raise
            return await self._run_async(fn)

    async def _run_async(self, fn: Callable[[Connection], T]) -> T:
        async with self.engine.connect() as conn:
            return await conn.run_sync(fn)

    async def close(self) -> None:
        if self.sync is not None:
            self.sync.dispose()
        if self.engine is not None:
            await self.engine.dispose()


def reader_of(services: Any) -> Reader:
    """The process's reader, made on first use and closed with the services."""
    reader = services.extras.get("seen_reader")
    if reader is None:
        reader = services.extras["seen_reader"] = Reader(services.db)
        services._closers.append(reader.close)
    return reader
