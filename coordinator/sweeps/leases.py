"""Leases: how a node claims a replica of a job, keeps it, and loses it.

A claim is one write transaction: pick the oldest queued job that this node does
not already hold or has not already answered, take a lease on it, and move the
job to ``leased`` once every replica it needs is held. On PostgreSQL the pick is
``SELECT ... FOR UPDATE SKIP LOCKED``, so concurrent claims take different rows
without waiting; on SQLite the transaction starts with ``BEGIN IMMEDIATE``
(``Database.write``), so claims are serialised and none reads a row another is
about to take.

A heartbeat extends an active lease by the TTL from now, or answers ``cancel``
when the lease is no longer wanted (it lapsed, was revoked, or the job was
parked). The sweeper returns leases past their expiry to the queue and counts a
failure on the job; a job that failed ``job_max_failures`` times is parked as
``failed`` with its reason.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, case, exists, insert, select, update
from sqlalchemy.orm import aliased
from sqlalchemy.exc import DBAPIError, OperationalError

from ..db.models import Node, SweepJob, SweepLease
from . import transitions as tr

log = logging.getLogger("sis.sweeps.leases")
ACTOR_SWEEPER = "sweeper"
_PICK = aliased(SweepJob, name="pick")   # made once: a fresh alias per claim would defeat statement caching


@dataclass
class Claim:
    lease_id: str
    job: SweepJob
    expires_at: datetime


def _retryable(exc: Exception) -> bool:
    orig = getattr(exc, "orig", None)
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if code in ("40P01", "40001"):
        return True
    return isinstance(exc, OperationalError) and "locked" in str(exc)


async def retrying(fn, attempts: int = 5):
    """Run a transaction function again when the database says to (deadlock, serialisation,
    SQLite busy past its timeout)."""
    for i in range(attempts):
        try:
            return await fn()
        except DBAPIError as exc:
            if i == attempts - 1 or not _retryable(exc):
                raise
            await asyncio.sleep(0.01 * (i + 1))
    raise AssertionError("unreachable")  # pragma: no cover


def for_update(db) -> bool | None:
    """``with_for_update`` for ``session.get``: a row lock on PostgreSQL; nothing on SQLite,
    where the whole write transaction already holds the database."""
    return None if db.is_sqlite else True


def _locked(db, q):
    return q if db.is_sqlite else q.with_for_update(skip_locked=True)


def _settle(job: SweepJob) -> str:
    """The job's state from its counters, while it is still being swept."""
    return tr.JOB_LEASED if job.active_leases + job.valid_results >= job.quorum else tr.JOB_QUEUED


async def claim(sweeps, node: Node) -> Claim | None:
    db, settings = sweeps.db, sweeps.settings

    async def run() -> Claim | None:
        now = tr.utcnow()
        async with db.write() as s:
            # One statement picks and takes the job: UPDATE ... WHERE id = (the oldest queued
            # job this node neither holds nor has answered [FOR UPDATE SKIP LOCKED]) RETURNING.
            j = _PICK
            held = exists().where(and_(SweepLease.job_id == j.id, SweepLease.node_id == node.id,
                                       SweepLease.state.in_((tr.LEASE_ACTIVE, tr.LEASE_SUBMITTED))))
            pick = select(j.id).where(j.state == tr.JOB_QUEUED, ~held).order_by(j.id).limit(1)
            if not db.is_sqlite:
                pick = pick.with_for_update(skip_locked=True)
            quorum = SweepJob.quorum if node.trusted else case((SweepJob.quorum < 2, 2), else_=SweepJob.quorum)
            stmt = (update(SweepJob).where(SweepJob.id == pick.scalar_subquery())
                    .values(quorum=quorum, active_leases=SweepJob.active_leases + 1, updated_at=now,
                            state=case((SweepJob.active_leases + 1 + SweepJob.valid_results >= quorum,
                                        tr.JOB_LEASED), else_=tr.JOB_QUEUED))
                    .returning(SweepJob).execution_options(synchronize_session=False))
            job = (await s.execute(stmt)).scalars().first()
            if job is None:
                return None
            lease_id = tr.new_id("ls")
            expires = now + timedelta(seconds=settings.lease_ttl_s)
            await s.execute(insert(SweepLease).values(id=lease_id, job_id=job.id, node_id=node.id,
                                                      state=tr.LEASE_ACTIVE, leased_at=now, expires_at=expires,
                                                      heartbeat_at=now, ended_at=None))
            actor = f"node:{node.id}"
            logs = [tr.row("lease", lease_id, None, tr.LEASE_ACTIVE, actor,
                           f"job {job.id} replica {job.active_leases + job.valid_results} of {job.quorum}"
                           + ("" if node.trusted else " (untrusted node: quorum 2)"), now)]
            if job.state != tr.JOB_QUEUED:
                logs.append(tr.row("job", job.id, tr.JOB_QUEUED, job.state, actor,
                                   f"every replica held ({job.quorum})", now))
            await tr.record(s, *logs)
            return Claim(lease_id, job, expires)

    return await retrying(run)


@dataclass
class Beat:
    action: str               # "continue" or "cancel"
    expires_at: datetime | None = None
    reason: str | None = None


async def heartbeat(sweeps, node: Node, lease_id: str) -> Beat | None:
    """None when the lease is not this node's (answered 404)."""
    db, settings = sweeps.db, sweeps.settings

    async def run() -> Beat | None:
        now = tr.utcnow()
        async with db.write() as s:
            q = select(SweepLease).where(SweepLease.id == lease_id)
            lease = (await s.execute(q if db.is_sqlite else q.with_for_update())).scalar_one_or_none()
            if lease is None or lease.node_id != node.id:
                return None
            if lease.state != tr.LEASE_ACTIVE:
                return Beat("cancel", reason=f"the lease is {lease.state}")
            job = await s.get(SweepJob, lease.job_id, with_for_update=for_update(db))
            if job.state not in (tr.JOB_QUEUED, tr.JOB_LEASED):
                lease.state, lease.ended_at = tr.LEASE_CANCELLED, now
                job.active_leases = max(0, job.active_leases - 1)
                await tr.record(s, tr.row("lease", lease.id, tr.LEASE_ACTIVE, tr.LEASE_CANCELLED,
                                          "coordinator", f"job {job.id} is {job.state}", now))
                return Beat("cancel", reason=f"the job is {job.state}")
            lease.expires_at = now + timedelta(seconds=settings.lease_ttl_s)
            lease.heartbeat_at = now
            await s.execute(update(Node).where(Node.id == node.id).values(last_seen_at=now))
            return Beat("continue", expires_at=lease.expires_at)

    return await retrying(run)


def fail_job(job: SweepJob, why: str, max_failures: int) -> str:
    """Count one failure on a job being swept; park it once it failed too often. Returns the new state."""
    job.failures += 1
    if job.failures >= max_failures:
        job.state = tr.JOB_FAILED
        job.reason = f"failed {job.failures} times; last: {why}"
    else:
        job.state = _settle(job)
    return job.state


async def release(s, lease: SweepLease, job: SweepJob, to_state: str, actor: str, why: str, now: datetime,
                  max_failures: int, count_failure: bool) -> list[dict]:
    """End an active lease (lapsed or cancelled) and put its replica back in the queue."""
    logs = [tr.row("lease", lease.id, lease.state, to_state, actor, why, now)]
    lease.state, lease.ended_at = to_state, now
    job.active_leases = max(0, job.active_leases - 1)
    if job.state in (tr.JOB_QUEUED, tr.JOB_LEASED):
        before = job.state
        after = fail_job(job, why, max_failures) if count_failure else _settle(job)
        job.state, job.updated_at = after, now
        if after != before:
            logs.append(tr.row("job", job.id, before, after, actor,
                               job.reason if after == tr.JOB_FAILED else why, now))
    return logs


async def sweep_lapsed(sweeps, batch: int = 500) -> int:
    """Return every lease past its expiry to the queue. Returns how many lapsed."""
    db, settings = sweeps.db, sweeps.settings
    total = 0
    while True:
        async def run() -> int:
            now = tr.utcnow()
            async with db.write() as s:
                q = (select(SweepLease).where(SweepLease.state == tr.LEASE_ACTIVE, SweepLease.expires_at < now)
                     .order_by(SweepLease.expires_at).limit(batch))
                leases = list((await s.execute(_locked(db, q))).scalars())
                logs = []
                for lease in leases:
                    job = await s.get(SweepJob, lease.job_id, with_for_update=for_update(db))
                    logs += await release(s, lease, job, tr.LEASE_LAPSED, ACTOR_SWEEPER,
                                          f"lease {lease.id} of node {lease.node_id} lapsed with no heartbeat "
                                          f"since {tr.iso(lease.heartbeat_at)}", now,
                                          settings.job_max_failures, count_failure=True)
                await tr.record(s, *logs)
                return len(leases)

        n = await retrying(run)
        total += n
        if n < batch:
            return total


class Sweeper:
    """The background task that runs ``sweep_lapsed`` every ``lease_sweep_interval_s``.
    ``passes`` wakes waiters after each pass, so tests await it instead of sleeping."""

    def __init__(self, sweeps) -> None:
        self.sweeps = sweeps
        self.task: asyncio.Task | None = None
        self.lapsed_total = 0
        self.passes = asyncio.Condition()
        self.pass_count = 0

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    def start(self) -> None:
        if self.sweeps.settings.lease_sweep_interval_s > 0 and not self.running:
            self.task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
            self.task = None

    async def run_once(self) -> int:
        n = await sweep_lapsed(self.sweeps)
        self.lapsed_total += n
        async with self.passes:
            self.pass_count += 1
            self.passes.notify_all()
        if n:
            log.info("sweeper: %d lapsed leases returned to the queue", n)
        return n

    async def wait_for(self, predicate, timeout: float) -> None:
        """Wait until ``predicate()`` holds after a pass (or raise TimeoutError)."""
        async def waiting() -> None:
            async with self.passes:
                await self.passes.wait_for(predicate)
        await asyncio.wait_for(waiting(), timeout)

    async def _loop(self) -> None:
        interval = self.sweeps.settings.lease_sweep_interval_s
        while True:
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sweeper pass failed; trying again next interval")
            await asyncio.sleep(interval)
