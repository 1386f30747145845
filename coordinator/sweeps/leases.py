"""Leases: how a node claims a replica of a job, keeps it, and loses it.

A claim picks the oldest queued job that this node does not already hold or has
not already answered, and that is not closed to it (a reissued job is closed to
the nodes whose results were rejected: ``jobs.not_excluded``), takes a lease on
it, and moves the job to ``leased`` once every replica it needs is held. Claims
that arrive together are served by one write transaction (``claim_batch``
behind a ``batching.Batcher``); a node that asks for its next job with its
result (``?next=1``) is served by its submission batch's transaction instead
(``claim_in``, called by ``results.submit_batch`` after its writes). On
PostgreSQL the jobs are read ``FOR UPDATE SKIP LOCKED``, so concurrent batches
(of this process or another) take different rows without waiting; on SQLite the
transaction starts with ``BEGIN IMMEDIATE`` (``Database.write``), so batches are
serialised and none reads a row another is about to take.

A heartbeat extends an active lease by the TTL from now, or answers ``cancel``
when the lease is no longer wanted (it lapsed, was revoked, or the job was
parked). The sweeper returns leases past their expiry to the queue and counts a
failure on the job; a job that failed ``job_max_failures`` times is parked as
``failed`` with its reason, until an operator requeues it (``requeue``,
``sis jobs requeue``). A node may give a lease back unworked (``give_back``):
the replica is queued again at once, and nothing is counted against the job.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, bindparam, case, exists, func, insert, literal_column, select, text, union_all, update
from sqlalchemy.exc import DBAPIError

from coordinator.core.db.leader import LeaderLoop
from coordinator.core.db.models import Node, SweepJob, SweepLease, SweepResult
from coordinator.core.db.transactions import for_update, retrying
from coordinator.sweeps import tokens
from coordinator.sweeps.tokens import Bearer
from . import transitions as tr
from .jobs import excluded_pairs, locked_job, not_excluded
from .records import JOBS, LEASES, Record, record

log = logging.getLogger("sis.sweeps.leases")
ACTOR_SWEEPER = "sweeper"
LOCK_NOT_AVAILABLE = "55P03"     # PostgreSQL: lock_timeout passed
_PICK = JOBS.alias("pick")   # made once: a fresh alias per claim would defeat statement caching


@dataclass
class Claim:
    lease_id: str
    job: Record          # the job's row (``jobs.job_document`` makes what the node gets)
    expires_at: datetime


def _locked(db, q):
    return q if db.is_sqlite else q.with_for_update(skip_locked=True)


def _settle(job) -> str:
    """The job's state from its counters, while it is still being swept."""
    return tr.JOB_LEASED if job.active_leases + job.valid_results >= job.quorum else tr.JOB_QUEUED


async def claim(sweeps, node: Node | Bearer) -> Claim | None:
    """Lease the oldest queued job this node neither holds nor has answered, or None.
    Concurrent claims are served together: ``sweeps.claims`` is a ``Batcher`` in
    front of ``claim_batch``. Given the ``Bearer`` token of a request, the node is looked
    up in the claim's transaction (``Unauthorized`` or ``Forbidden`` when it may not
    claim)."""
    return await sweeps.claims(node)


# A batch reads the oldest queued jobs, this many more than it has claims: spare rows for
# nodes that already hold one of the first (an untrusted node waiting for a second replica).
CLAIM_SPARE = 4
# How long the second look of a claim that skipped locked rows waits for their locks (below).
RELOOK_LOCK_WAIT_S = 1.0


def queued(jobs):
    """``jobs.state = 'queued'`` with the value written into the statement, as
    ``models.QUEUED_JOBS_SQL`` is: only then may the database read the oldest queued jobs
    from the partial index ``ix_sweep_jobs_queued`` (a bound parameter does not imply the
    index's condition in PostgreSQL's generic plans)."""
    return jobs.c.state == literal_column(f"'{tr.JOB_QUEUED}'")


_HELD = (tr.LEASE_ACTIVE, tr.LEASE_SUBMITTED)
_SET_JOB = (update(JOBS).where(JOBS.c.id == bindparam("b_id"))
            .values(quorum=bindparam("b_quorum"), active_leases=bindparam("b_active"),
                    state=bindparam("b_state"), updated_at=bindparam("b_at")))
# A claim batch's statements, made once: SQLAlchemy keys its compiled-statement cache on a
# statement's structure, and a statement built anew per batch is walked again for that key.
_QUEUED = select(JOBS).where(queued(JOBS)).order_by(JOBS.c.id).limit(bindparam("n"))
_QUEUED_LOCKED = _QUEUED.with_for_update(skip_locked=True)
_SKIPPED_PAIRS = union_all(
    select(LEASES.c.job_id, LEASES.c.node_id).where(
        LEASES.c.job_id.in_(bindparam("jobs", expanding=True)), LEASES.c.node_id.in_(bindparam("nodes", expanding=True)),
        LEASES.c.state.in_(_HELD)),
    excluded_pairs(bindparam("x_jobs", expanding=True), bindparam("x_nodes", expanding=True)))
_NEW_LEASES = insert(LEASES)


async def claim_batch(sweeps, who: list[Node | Bearer]) -> list[Claim | None | Exception]:
    """Serve claims in one write transaction, in the order they came. A node may appear
    more than once in a batch and is still never given two replicas of one job. Claims
    made with a ``Bearer`` token have it looked up first, by one statement for the batch
    (``nodes.tokens.resolve``); one the token does not admit gets its error and nothing else.

    The oldest ``len(nodes) + CLAIM_SPARE`` queued jobs are read (and locked, skipping rows
    other transactions hold, on PostgreSQL), then the leases the batch's nodes hold on them
    and the exclusions closing them to those nodes, in one statement;
    each claim takes the first of those jobs with a replica free that its node neither
    holds nor has answered; the jobs, the new leases and their transitions are written
    with one statement each. A claim those rows cannot serve, while more queued jobs may
    lie beyond them, is served by ``_claim_one`` in the same transaction, after the
    batch's own writes.

    On PostgreSQL a claim left with nothing while a job it could take was locked by
    another transaction (``SKIP LOCKED`` passed it by: most often a concurrent batch's
    spare rows, which it reads and locks but does not take) is tried once more
    (``relook``): the node was told 204, "no job waits", with a job waiting, and came
    back only after ``Retry-After``. Claims that found a job, and claims with truly
    nothing to take, cost nothing more than one statement each for the latter."""
    db, settings = sweeps.db, sweeps.settings

    async def run() -> tuple[list[Claim | None | Exception], list[int]]:
        now = tr.utcnow()
        skipped: list[int] = []
        async with db.write_core() as s:
            logs: list[dict] = []
            claims = await claim_in(s, db, settings, await tokens.resolve(s, who), now, logs, skipped=skipped)
            await tr.record(s, *logs)
            return claims, skipped

    claims, skipped = await retrying(run)
    if skipped:
        for i, claim in zip(skipped, await relook(sweeps, [who[i] for i in skipped])):
            claims[i] = claim
    return claims


async def relook(sweeps, who: list[Node | Bearer]) -> list[Claim | None | Exception]:
    """The claims of nodes that a batch left with nothing while a job they could take was
    locked, in a transaction of their own once that batch has committed: each waits for
    that job's lock (``FOR UPDATE`` without ``SKIP LOCKED``) at most ``RELOOK_LOCK_WAIT_S``,
    then claims as ``_claim_one`` does. The lock is most often another batch's, held for
    milliseconds. Waiting and claiming are two statements: the claim's statement starts
    once the lock is held, and sees the leases the holder committed (one statement that
    waited would judge the row again as of its own start, and could give a node a second
    replica of a job its other request, in another process, had just been given). A lock
    held longer (an operator's transaction) leaves the claims with nothing, as before."""
    db, settings = sweeps.db, sweeps.settings

    async def run() -> list[Claim | None | Exception]:
        now = tr.utcnow()
        async with db.write_core() as s:
            await s.execute(text(f"SET LOCAL lock_timeout = '{round(RELOOK_LOCK_WAIT_S * 1000)}ms'"))
            logs: list[dict] = []
            claims: list[Claim | None | Exception] = []
            for node in await tokens.resolve(s, who):
                if isinstance(node, Exception):
                    claims.append(node)
                    continue
                await s.execute(_pick(node).with_for_update())
                claims.append(await _claim_one(s, db, node, now, settings, logs))
            await tr.record(s, *logs)
            return claims

    try:
        return await retrying(run)
    except DBAPIError as exc:
        if getattr(getattr(exc, "orig", None), "sqlstate", None) != LOCK_NOT_AVAILABLE:
            raise
        return [None] * len(who)


async def claim_in(s, db, settings, resolved: list[Node | Record | Exception], now: datetime,
                   logs: list[dict], skipped: list[int] | None = None) -> list[Claim | None | Exception]:
    """The claims of ``claim_batch`` in the caller's write transaction ``s``, for nodes
    already looked up (an ``Exception`` in ``resolved`` is that claim's answer, and costs
    nothing else). The transitions are added to ``logs`` for the caller to record: a
    submission batch whose nodes also ask for their next job (``results.submit_batch``,
    ``?next=1``) claims by this after its own writes, and records its transitions and the
    claims' in one statement. Given ``skipped`` (PostgreSQL), the places of the claims left
    with nothing while a job they could take is locked by another transaction are added
    to it, for ``claim_batch`` to look again."""
    nodes = [n for n in resolved if not isinstance(n, Exception)]
    if not nodes:
        return list(resolved)
    limit = len(nodes) + CLAIM_SPARE
    jobs = [record(r) for r in await s.execute(_QUEUED if db.is_sqlite else _QUEUED_LOCKED, {"n": limit})]
    held: set[tuple[int, str]] = set()
    if jobs:
        # The pairs a claim skips: the node holds or has answered a replica, or the
        # job is closed to it (a reissued job is never offered to the nodes whose
        # results were rejected); one statement for both. A statement of its own,
        # not joined into the one above: on PostgreSQL a statement reads as of its
        # start, and a job locked above may have had a replica leased by a
        # transaction that committed after that statement began. This one begins
        # once the locks are held and sees that lease.
        job_ids, node_ids = [j.id for j in jobs], sorted({n.id for n in nodes})
        held = {(jid, nid) for jid, nid in await s.execute(
            _SKIPPED_PAIRS, {"jobs": job_ids, "nodes": node_ids, "x_jobs": job_ids, "x_nodes": node_ids})}
    claims: list[Claim | None | Exception] = []
    new_leases: list[dict] = []
    taken: dict[int, Record] = {}
    for node in resolved:
        if isinstance(node, Exception):
            claims.append(node)
            continue
        job = next((j for j in jobs if j.state == tr.JOB_QUEUED and (j.id, node.id) not in held), None)
        if job is None:
            claims.append(None)
            continue
        held.add((job.id, node.id))
        taken[job.id] = job
        claims.append(_take(job, node, now, settings, new_leases, logs))
    if taken:
        await s.execute(_SET_JOB, [{"b_id": j.id, "b_quorum": j.quorum, "b_active": j.active_leases,
                                    "b_state": j.state, "b_at": now} for j in taken.values()])
        await s.execute(_NEW_LEASES, new_leases)
    if len(jobs) == limit:          # more queued jobs may lie beyond the rows read
        for i, node in enumerate(resolved):
            if claims[i] is None:
                claims[i] = await _claim_one(s, db, node, now, settings, logs)
    if skipped is not None and not db.is_sqlite:
        for i, node in enumerate(resolved):
            # A job this node could take, read without locking: one no claim above was given
            # is one that SKIP LOCKED passed by (or was queued after the batch read the queue).
            if claims[i] is None and (await s.execute(_pick(node))).first() is not None:
                skipped.append(i)
    return claims


def _take(job: Record, node: Node, now: datetime, settings, new_leases: list[dict], logs: list[dict]) -> Claim:
    """One replica of ``job`` for ``node``, in memory: an untrusted node's claim asks for a
    quorum of two; the job is ``leased`` once every replica it needs is held."""
    before = job.state
    if not node.trusted and job.quorum < 2:
        job.quorum = 2
    job.active_leases += 1
    job.state = _settle(job)
    job.updated_at = now
    return _lease(job, node, before, now, settings, new_leases, logs)


def _lease(job, node: Node, before: str, now: datetime, settings, new_leases: list[dict],
           logs: list[dict]) -> Claim:
    """The new lease's row and transitions, for a job already counted as taken."""
    lease_id = tr.new_id("ls")
    expires = now + timedelta(seconds=settings.lease_ttl_s)
    new_leases.append({"id": lease_id, "job_id": job.id, "node_id": node.id, "state": tr.LEASE_ACTIVE,
                       "leased_at": now, "expires_at": expires, "heartbeat_at": now, "ended_at": None})
    actor = f"node:{node.id}"
    logs.append(tr.row("lease", lease_id, None, tr.LEASE_ACTIVE, actor,
                       f"job {job.id} replica {job.active_leases + job.valid_results} of {job.quorum}"
                       + ("" if node.trusted else " (untrusted node: quorum 2)"), now))
    if job.state != before:
        logs.append(tr.row("job", job.id, before, job.state, actor, f"every replica held ({job.quorum})", now))
    return Claim(lease_id, job, expires)


def _pick(node: Node):
    """The oldest queued job this node neither holds nor has answered, nor is closed to."""
    j = _PICK
    held = exists().where(and_(LEASES.c.job_id == j.c.id, LEASES.c.node_id == node.id, LEASES.c.state.in_(_HELD)))
    return (select(j.c.id).where(queued(j), ~held, not_excluded(j.c.id, node.id))
            .order_by(j.c.id).limit(1))


async def _claim_one(s, db, node: Node, now: datetime, settings, logs: list[dict]) -> Claim | None:
    """One claim by one statement: UPDATE ... WHERE id = (the oldest queued job this node
    neither holds nor has answered [FOR UPDATE SKIP LOCKED]) RETURNING. It sees what its
    transaction wrote before it."""
    quorum = JOBS.c.quorum if node.trusted else case((JOBS.c.quorum < 2, 2), else_=JOBS.c.quorum)
    stmt = (update(JOBS).where(JOBS.c.id == _locked(db, _pick(node)).scalar_subquery())
            .values(quorum=quorum, active_leases=JOBS.c.active_leases + 1, updated_at=now,
                    state=case((JOBS.c.active_leases + 1 + JOBS.c.valid_results >= quorum, tr.JOB_LEASED),
                               else_=tr.JOB_QUEUED))
            .returning(*JOBS.c))
    row = (await s.execute(stmt)).first()
    if row is None:
        return None
    job = record(row)
    new_leases: list[dict] = []
    claim = _lease(job, node, tr.JOB_QUEUED, now, settings, new_leases, logs)
    await s.execute(insert(LEASES), new_leases)
    return claim


@dataclass
class Beat:
    action: str               # "continue" or "cancel"
    expires_at: datetime | None = None
    reason: str | None = None


async def _own_lease(s, db, node: Node, lease_id: str) -> SweepLease | None:
    """The lease, locked for this transaction, if it is this node's; else None."""
    q = select(SweepLease).where(SweepLease.id == lease_id)
    lease = (await s.execute(q if db.is_sqlite else q.with_for_update())).scalar_one_or_none()
    return lease if lease is not None and lease.node_id == node.id else None


async def heartbeat(sweeps, node: Node, lease_id: str) -> Beat | None:
    """None when the lease is not this node's (answered 404)."""
    db, settings = sweeps.db, sweeps.settings

    async def run() -> Beat | None:
        now = tr.utcnow()
        async with db.write() as s:
            lease = await _own_lease(s, db, node, lease_id)
            if lease is None:
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


async def give_back(sweeps, node: Node, lease_id: str, why: str) -> str | None:
    """A node hands back a lease it will not work (its agent is stopping with a job it
    was given in advance): an active lease ends as ``cancelled`` and its replica goes
    back to the queue at once, with no failure counted on the job, instead of waiting
    out the TTL and counting as a lapse. Any other lease is left as it is. Returns the
    lease's state afterwards, or None when it is not this node's lease (answered 404)."""
    db, settings = sweeps.db, sweeps.settings

    async def run() -> str | None:
        now = tr.utcnow()
        async with db.write() as s:
            lease = await _own_lease(s, db, node, lease_id)
            if lease is None:
                return None
            if lease.state == tr.LEASE_ACTIVE:
                job = await s.get(SweepJob, lease.job_id, with_for_update=for_update(db))
                await tr.record(s, *await release(s, lease, job, tr.LEASE_CANCELLED, f"node:{node.id}",
                                                  f"given back by its node: {why}", now,
                                                  settings.job_max_failures, count_failure=False))
                await s.execute(update(Node).where(Node.id == node.id).values(last_seen_at=now))
            return lease.state

    return await retrying(run)


def fail_job(job: SweepJob, why: str, max_failures: int, counted: bool = True) -> str:
    """Count one failure on a job being swept; park it once it failed too often. Returns the
    new state. ``counted`` False (an untrusted node's invalid result,
    ``trust.counts_against_job``) only puts the replica back in the queue."""
    if counted:
        job.failures += 1
    if job.failures >= max_failures:
        job.state = tr.JOB_FAILED
        job.reason = f"failed {job.failures} times; last: {why}"
    else:
        job.state = _settle(job)
    return job.state


async def requeue(db, job_id: int, actor: str, why: str) -> SweepJob:
    """Put a parked (``failed``) job back in the queue, for an operator (``sis jobs
    requeue``): its failures start again from 0; valid results still waiting for their
    quorum are kept and count toward it, and with none the quorum starts again at one
    (an untrusted node's claim raises it to two). The change is recorded with ``actor``.
    ``NotFound`` for no such job, ``Conflict`` for a job that is not parked."""
    async def run() -> SweepJob:
        now = tr.utcnow()
        async with db.write() as s:
            job = await locked_job(s, db, job_id, tr.JOB_FAILED,
                                   "job {job} is {state}: only a failed (parked) job is requeued")
            pending = (await s.execute(select(func.count()).select_from(SweepResult).where(
                SweepResult.job_id == job.id, SweepResult.state == tr.RESULT_PENDING))).scalar_one()
            job.valid_results, job.failures, job.reason, job.canonical_lease_id = pending, 0, None, None
            if not pending:
                job.quorum = 1
            job.state, job.updated_at = _settle(job), now
            await tr.record(s, tr.row("job", job.id, tr.JOB_FAILED, job.state, actor, f"requeued: {why}", now))
            return job

    return await retrying(run)


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


class Sweeper(LeaderLoop):
    """The background task that runs ``sweep_lapsed`` every ``lease_sweep_interval_s``, in
    one process at a time among coordinators sharing a PostgreSQL database (``LeaderLoop``).
    (Two sweepers would be safe, the lapsed leases are read ``FOR UPDATE SKIP LOCKED``, but
    would do the same work twice.)"""

    ROLE = "lease-sweeper"
    WHAT = "sweeper"

    def __init__(self, sweeps) -> None:
        self.sweeps = sweeps
        self.lapsed_total = 0
        db = sweeps.db.inner if hasattr(sweeps.db, "inner") else sweeps.db
        super().__init__(db.url, sweeps.settings.lease_sweep_interval_s)

    async def pass_once(self) -> int:
        n = await sweep_lapsed(self.sweeps)
        self.lapsed_total += n
        if n:
            log.info("sweeper: %d lapsed leases returned to the queue", n)
        return n
