"""Submitting a result on a lease: idempotent, validated whole, compared with replicas.

One result per lease (``sweep_results.lease_id`` is unique). The same body sent
again gets the first answer again (``duplicate: true``); a different body on a
lease that already has a result is a conflict. Because the lease, the node's
token and the job live in the database, a coordinator restarted between a lease
and its submission accepts the submission as if nothing happened.

A lease is accepted while it is active; it lapses only when the sweeper finds
it past its expiry, so a result that arrives a little late but before the sweep
is still taken.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from sweep_engine.schema import Fact, Result

from ..db.models import Node, SweepJob, SweepLease, SweepResult
from ..errors import Conflict, NotFound
from . import jobs, trust
from . import transitions as tr
from .leases import _settle, fail_job, for_update, retrying
from .validation import validate_result


THIS = "(this result)"   # stands for the new result's id until it is written


@dataclass
class SubmitOutcome:
    accepted: bool
    result_state: str
    job_state: str
    reasons: list[str] = field(default_factory=list)
    duplicate: bool = False

    def as_json(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "resultState": self.result_state, "jobState": self.job_state,
                "reasons": self.reasons, "duplicate": self.duplicate}


def _facts(body: dict) -> list[Fact]:
    return Result.from_dict(body).facts


async def submit(sweeps, node: Node, lease_id: str, body: bytes, *, too_large: bool = False,
                 size: int | None = None) -> SubmitOutcome:
    """Record and decide one submission. ``too_large``: the body was over the limit and not
    kept (``body`` then only identifies it, ``size`` is what arrived)."""
    db, settings = sweeps.db, sweeps.settings
    digest = hashlib.sha256(body).hexdigest()

    async def run() -> SubmitOutcome:
        now = tr.utcnow()
        actor = f"node:{node.id}"
        async with db.write() as s:
            # The lease, its job and any earlier result, in one statement (locking the lease
            # and the job on PostgreSQL, in the same order as every other writer).
            q = (select(SweepLease, SweepJob, SweepResult).join(SweepJob, SweepJob.id == SweepLease.job_id)
                 .outerjoin(SweepResult, SweepResult.lease_id == SweepLease.id).where(SweepLease.id == lease_id))
            if not db.is_sqlite:
                q = q.with_for_update(of=[SweepLease, SweepJob])
            found = (await s.execute(q)).one_or_none()
            if found is None or found[0].node_id != node.id:
                raise NotFound("no such lease for this node", {"leaseId": lease_id})
            lease, job, prior = found
            if prior is None and lease.state != tr.LEASE_ACTIVE:
                # On PostgreSQL a submission that waited on the lease's lock sees the lease as
                # committed by the one before it, but the joined result as of its own start.
                prior = (await s.execute(select(SweepResult).where(SweepResult.lease_id == lease_id))) \
                    .scalar_one_or_none()
            if prior is not None:
                if prior.body_sha256 != digest:
                    raise Conflict("a different result was already submitted on this lease",
                                   {"leaseId": lease_id, "resultState": prior.state})
                return SubmitOutcome(prior.state != tr.RESULT_INVALID, prior.state, job.state,
                                     list(prior.reasons), duplicate=True)
            if lease.state != tr.LEASE_ACTIVE:
                raise Conflict(f"the lease is {lease.state}: its job went back to the queue; lease a job again",
                               {"leaseId": lease_id, "leaseState": lease.state})
            if too_large:
                parsed, reasons = None, [f"body: {size if size is not None else len(body)} bytes is over "
                                         f"the limit of {settings.result_max_bytes} bytes"]
            else:
                parsed, reasons = validate_result(body, job, node.id, tr.aware(lease.leased_at), now, settings)
            me = await s.get(Node, node.id, with_for_update=for_update(db))
            deciding = not reasons and job.state in (tr.JOB_QUEUED, tr.JOB_LEASED)
            earlier: list[SweepResult] = []
            if deciding and (job.quorum > 1 or job.valid_results > 0):
                earlier = list((await s.execute(select(SweepResult).where(
                    SweepResult.job_id == job.id, SweepResult.state == tr.RESULT_PENDING)
                    .order_by(SweepResult.id))).scalars())
            # Every row is changed in memory first and written in one flush: one statement per row.
            me.last_seen_at = now
            lease.state, lease.ended_at = tr.LEASE_SUBMITTED, now
            job.active_leases = max(0, job.active_leases - 1)
            before, reason_before = job.state, job.reason
            result = SweepResult(lease_id=lease.id, job_id=job.id, node_id=node.id, state=tr.RESULT_INVALID,
                                 reasons=reasons, body=None, body_sha256=digest,
                                 engine_build=parsed.engine_build if parsed else None,
                                 facts=len(parsed.facts) if parsed else 0, received_at=now)
            logs = [tr.row("lease", lease.id, tr.LEASE_ACTIVE, tr.LEASE_SUBMITTED, actor, "result received", now)]
            this = f"the result on lease {lease.id}"
            if reasons:
                logs.append(tr.row("result", THIS, None, tr.RESULT_INVALID, actor,
                                   "rejected: " + "; ".join(reasons[:20]), now))
                if trust.penalise(me):
                    logs.append(tr.row("node", me.id, "trusted", "untrusted", "coordinator", f"{this} is invalid",
                                       now))
                if job.state in (tr.JOB_QUEUED, tr.JOB_LEASED):
                    fail_job(job, f"{this} from node {node.id} is invalid", settings.job_max_failures)
            else:
                result.state, result.body = tr.RESULT_PENDING, parsed.to_dict()
                logs.append(tr.row("result", THIS, None, tr.RESULT_PENDING, actor, "passed validation", now))
                if deciding:
                    job.valid_results += 1
                    logs += await _quorum(s, sweeps, job, lease.id, result, parsed.facts, earlier, me, now)
                else:
                    logs.append(tr.row("result", THIS, tr.RESULT_PENDING, tr.RESULT_PENDING, "coordinator",
                                       f"kept for the record: job {job.id} is already {job.state}", now))
            job.updated_at = now
            if job.state != before:
                logs.append(tr.row("job", job.id, before, job.state, actor,
                                   job.reason if job.reason and (job.reason != reason_before
                                                                 or job.state == tr.JOB_FAILED)
                                   else this, now))
            s.add(result)
            await s.flush()
            for row in logs:
                if row["subject_id"] == THIS:
                    row["subject_id"] = str(result.id)
            await tr.record(s, *logs)
            return SubmitOutcome(result.state != tr.RESULT_INVALID, result.state, job.state, list(reasons))

    return await retrying(run)


async def _quorum(s, sweeps, job: SweepJob, lease_id: str, result: SweepResult, facts: list[Fact],
                  earlier: list[SweepResult], me: Node, now) -> list[dict]:
    """Decide the job once it has as many valid results as its quorum. ``result`` (this
    submission's, not yet written) and ``earlier`` (the job's pending results) are changed in
    memory; the caller writes them."""
    settings = sweeps.settings
    logs: list[dict] = []
    if job.valid_results < job.quorum:
        job.state = _settle(job)
        return logs
    pending = earlier + [result]
    facts_of = {id(r): (facts if r is result else _facts(r.body)) for r in pending}
    nodes: dict[str, Node] = {me.id: me}
    for nid in sorted({r.node_id for r in earlier} - {me.id}):
        nodes[nid] = await s.get(Node, nid, with_for_update=for_update(sweeps.db))
    need = 1 if job.quorum == 1 else 2
    group: list[SweepResult] = []
    for r in pending:
        agreeing = [o for o in pending if trust.results_agree(facts_of[id(r)], facts_of[id(o)])]
        if len(agreeing) >= need:
            group = agreeing
            break

    def rid(r: SweepResult) -> str:
        return THIS if r is result else str(r.id)

    if group:
        job.canonical_lease_id = group[0].lease_id
        job.state = tr.JOB_IN_REVIEW
        job.reason = None
        for r in pending:
            node = nodes[r.node_id]
            if any(r is g for g in group):
                r.state = tr.RESULT_ACCEPTED
                logs.append(tr.row("result", rid(r), tr.RESULT_PENDING, tr.RESULT_ACCEPTED, "coordinator",
                                   f"quorum of {len(group)} for job {job.id}", now))
                if trust.credit(node, settings.trust_streak):
                    logs.append(tr.row("node", node.id, "untrusted", "trusted", "coordinator",
                                       f"{node.streak} consecutive accepted results", now))
            else:
                r.state = tr.RESULT_OUTVOTED
                logs.append(tr.row("result", rid(r), tr.RESULT_PENDING, tr.RESULT_OUTVOTED, "coordinator",
                                   f"disagrees with the quorum of job {job.id}", now))
                if trust.penalise(node):
                    logs.append(tr.row("node", node.id, "trusted", "untrusted", "coordinator",
                                       f"the result on lease {r.lease_id} was outvoted", now))
        return logs
    if job.quorum < settings.quorum_max:
        job.quorum += 1
        job.state = _settle(job)
        job.reason = f"{len(pending)} replicas disagree: one more is asked for (quorum {job.quorum})"
        return logs
    job.state = tr.JOB_FAILED
    job.reason = f"{len(pending)} replicas disagree and the quorum cannot grow past {settings.quorum_max}"
    for r in pending:
        r.state = tr.RESULT_DISAGREED
        logs.append(tr.row("result", rid(r), tr.RESULT_PENDING, tr.RESULT_DISAGREED, "coordinator", job.reason, now))
    return logs
