"""Leadership: background work that must run in one coordinator process at a time.

Several coordinators may share one PostgreSQL database (``sis serve --workers N``, or N
``sis serve`` behind a load balancer). The hazard poller and the lease sweeper must
still run once, not once per process: two pollers would record every poll twice, and
two sweepers would race to return the same lapsed lease. Each such role takes a
PostgreSQL session advisory lock (``pg_try_advisory_lock``) on a connection of its own,
opened for that purpose and held for as long as the process leads. The process that
holds the lock runs the work; the others try again every ``retry_s`` seconds. A leader
that stops unlocks and closes its connection, so another takes over within ``retry_s``;
a leader that dies loses its session, and with it the lock, as soon as PostgreSQL sees
the connection close. A leader checks its connection every ``retry_s`` too: when the
connection is gone the lock may be another's already, so the work is stopped at once.

On SQLite a single coordinator process is assumed (``sis serve --workers`` refuses more
than one there), so the work simply runs.
"""
from __future__ import annotations

import abc
import asyncio
import contextlib
import hashlib
import logging
import time
from typing import Awaitable, Callable

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from coordinator.core.db.urls import connection_problem, label
from coordinator.core.text import one_line

log = logging.getLogger("sis.leader")

RETRY_S = 5.0


def unreachable_reason(exc: BaseException, url: str) -> str:
    """Why the database could not be asked, in one line: what ``connection_problem`` says of a
    start-up mistake (nothing listening, an unknown host or database, refused credentials), else
    the driver's own exception, never SQLAlchemy's text (it adds the statement, its parameters and
    a link, on lines of their own)."""
    try:
        said = connection_problem(exc, url)
    except Exception:  # noqa: BLE001 - a reason it cannot read must not end the role's tries
        said = None
    if said:
        return one_line(said)
    driver = getattr(exc, "orig", None) or exc
    words = next((ln.strip() for ln in str(driver).splitlines() if ln.strip()), "")
    return one_line(f"{type(driver).__name__}: {words}" if words else type(driver).__name__, 300)


def lock_key(role: str) -> int:
    """The advisory lock's 64-bit key for a role: stable across processes and releases.
    Advisory locks belong to one database, so coordinators of other databases on the same
    server never contend."""
    return int.from_bytes(hashlib.sha256(f"sis:{role}".encode()).digest()[:8], "big", signed=True)


class Leadership:
    """Runs ``work`` while this process holds the role's lock (always, on SQLite)."""

    def __init__(self, database_url: str, role: str, *, retry_s: float = RETRY_S) -> None:
        self.url = database_url
        self.role = role
        self.retry_s = retry_s
        self.is_sqlite = make_url(database_url).get_backend_name() == "sqlite"
        self.key = lock_key(role)
        self.leading = False
        self.terms = 0                      # how many times this process became the leader
        self._engine: AsyncEngine | None = None
        self._conn: AsyncConnection | None = None
        self.unreachable_since: float | None = None   # when its tries began failing (monotonic); None: they reach it
        self.failed_tries = 0                          # tries failed since

    async def run(self, work: Callable[[], Awaitable[None]]) -> None:
        """Forever (until cancelled): wait to lead, then run ``work`` for as long as the lock
        is held. ``work`` is cancelled when the lock is lost; it is not expected to return."""
        if self.is_sqlite:
            self.leading = True
            self.terms += 1
            try:
                await work()
            finally:
                self.leading = False
            return
        try:
            while True:
                won = await self._try()
                if won:
                    await self._lead(work)
                await asyncio.sleep(self.retry_s)
        finally:                           # a standby keeps its connection between tries
            await self._drop()

    async def _try(self) -> bool:
        """One try for the lock. A database that cannot be reached is said once, in one line, when
        a try first fails (per role: each tries on a connection of its own), then not again until a
        try reaches it, which is said too: tried every ``retry_s`` in every worker, it wrote a
        warning per role and worker every 5 s, the first of them SQLAlchemy's lines of SQL."""
        kept = self._conn is not None
        try:
            won = await self._try_lock()
        except Exception as exc:   # noqa: BLE001 - the database is unreachable: stand by, try again
            await self._drop()
            if not kept:
                return await self._unreachable(exc)
            # A standby's kept connection can go stale (a server restarted, an idle connection cut)
            # while the database is well: tried again at once on a fresh one before it is said.
            try:
                won = await self._try_lock()
            except Exception as again:  # noqa: BLE001
                await self._drop()
                return await self._unreachable(again)
        if self.unreachable_since is not None:
            log.warning("%s: reaches the database again (%s), after %d failed tries in %.0f s",
                        self.role, label(self.url), self.failed_tries, time.monotonic() - self.unreachable_since)
            self.unreachable_since, self.failed_tries = None, 0
        return won

    async def _unreachable(self, exc: BaseException) -> bool:
        self.failed_tries += 1
        if self.unreachable_since is None:
            self.unreachable_since = time.monotonic()
            # connection_problem may connect once more to tell a silent host from a silent server
            # (a blocking socket, up to a few seconds): off the event loop.
            reason = await asyncio.to_thread(unreachable_reason, exc, self.url)
            log.warning("%s: cannot reach the database to try for leadership: %s; standing by, trying again "
                        "every %g s (said again when it reaches it)", self.role, reason, self.retry_s)
        return False

    async def _lead(self, work: Callable[[], Awaitable[None]]) -> None:
        self.leading = True
        self.terms += 1
        log.info("%s: this process leads (advisory lock %d)", self.role, self.key)
        task = asyncio.get_running_loop().create_task(work(), name=f"{self.role}-work")
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.retry_s)
                if done:
                    if not task.cancelled() and task.exception() is not None:
                        log.error("%s: the work ended with an error; leadership given up",
                                  self.role, exc_info=task.exception())
                    return
                if not await self._alive():
                    log.warning("%s: the leader's connection is gone; work stopped, leadership lost",
                                self.role)
                    return
        finally:
            self.leading = False
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            await self._release()

    async def _try_lock(self) -> bool:
        if self._engine is None:
            self._engine = create_async_engine(self.url, poolclass=NullPool)
        if self._conn is None:
            self._conn = await self._engine.connect()
            await self._conn.execution_options(isolation_level="AUTOCOMMIT")
        got = (await self._conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": self.key})).scalar()
        return bool(got)

    async def _alive(self) -> bool:
        try:
            assert self._conn is not None
            await self._conn.execute(text("SELECT 1"))
            return True
        except Exception:
            return False

    async def _release(self) -> None:
        """Unlock and close the connection (closing alone would unlock too; unlocking first
        says so whatever becomes of the connection)."""
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self.key})
        await self._drop()

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:            # the session is gone already: discard the connection
                with contextlib.suppress(Exception):
                    await conn.invalidate()
        engine, self._engine = self._engine, None
        if engine is not None:
            with contextlib.suppress(Exception):
                await engine.dispose()

    async def backend_pid(self) -> int | None:
        """The PostgreSQL backend holding the lock, while leading (for operators and tests)."""
        if self._conn is None:
            return None
        return (await self._conn.execute(text("SELECT pg_backend_pid()"))).scalar()


class LeaderLoop(abc.ABC):
    """A pass every ``interval_s`` seconds, run by one process at a time among coordinators
    sharing a database (``Leadership``; on SQLite, always this one): the others stand by and
    take over when it stops. The hazard poller, the lease sweeper and the access prune are
    these; a subclass sets
    ``ROLE`` and ``WHAT`` and writes ``pass_once``. A pass that fails is logged and the next
    one runs an interval later. ``passes`` wakes waiters after each pass, so tests await it
    instead of sleeping."""

    ROLE = ""
    WHAT = ""                                  # how the log names a pass

    def __init__(self, database_url: str, interval_s: float) -> None:
        self.interval_s = interval_s
        self.leader = Leadership(database_url, self.ROLE)
        self.task: asyncio.Task | None = None
        self.passes = asyncio.Condition()
        self.pass_count = 0

    @abc.abstractmethod
    async def pass_once(self, **kw):  # noqa: ANN003, ANN201
        """One pass of the work (``kw``: what ``run_once`` was given)."""

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    @property
    def leading(self) -> bool:
        return self.leader.leading

    def start(self) -> None:
        if self.interval_s > 0 and not self.running:
            self.task = asyncio.get_running_loop().create_task(self.leader.run(self._loop), name=self.ROLE)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None

    async def run_once(self, **kw):  # noqa: ANN003, ANN201
        """One pass now, whoever leads (``kw`` for the subclass's pass: tests set its clock)."""
        out = await self.pass_once(**kw)
        async with self.passes:
            self.pass_count += 1
            self.passes.notify_all()
        return out

    async def wait_for(self, predicate: Callable[[], bool], timeout: float) -> None:
        """Wait until ``predicate()`` holds after a pass (or raise TimeoutError)."""
        async def waiting() -> None:
            async with self.passes:
                await self.passes.wait_for(predicate)
        await asyncio.wait_for(waiting(), timeout)

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s pass failed; trying again next interval", self.WHAT)
            await asyncio.sleep(self.interval_s)
