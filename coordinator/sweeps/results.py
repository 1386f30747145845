"""Submitting a result on a lease: idempotent, validated whole, compared with replicas.

One result per lease (``sweep_results.lease_id`` is unique). The same body sent
again gets the first answer again (``duplicate: true``); a different body on a
lease that already has a result is a conflict. Because the lease, the node's
token and the job live in the database, a coordinator restarted between a lease
and its submission accepts the submission as if nothing happened.

A lease is accepted while it is active; it lapses only when the sweeper finds
it past its expiry, so a result that arrives a little late but before the sweep
is still taken.

Submissions that arrive together are decided in one write transaction
(``submit_batch`` behind a ``batching.Batcher``), one after another in the
order they came, exactly as separate transactions would decide them: each sees
what the ones before it in the batch did to its job and its node. Two
submissions on one lease never share a batch, so a repeat sees the first.
"""
from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, or_, select, update

from sweep_engine.schema import Fact, Result

from coordinator.core import jsontext
from coordinator.core.db.models import Node
from coordinator.core.errors import Conflict, NotFound, ServiceError
from coordinator.sweeps.tokens import Bearer, admit
from . import trust
from . import transitions as tr
from .leases import Claim, _settle, claim_in, fail_job, relook, retrying
from .records import JOBS, LEASES, NODES, RESULTS, Record, record
from .validation import accepted_builds, validate_result


THIS = "(this result)"   # stands for a new result's id until it is written


@dataclass
class SubmitOutcome:
    accepted: bool
    result_state: str
    job_state: str
    reasons: list[str] = field(default_factory=list)
    duplicate: bool = False
    # With ``then_claim``: the node's next lease (``leases.Claim``), or None when no job
    # waits for it; always None for a result not accepted, which leases nothing.
    next: Claim | None = None
    # With ``then_claim``, for a repeat of an accepted result whose engine build is withdrawn
    # since: that build, to which no next job was leased (``withdrawn_since``).
    refused_build: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "resultState": self.result_state, "jobState": self.job_state,
                "reasons": self.reasons, "duplicate": self.duplicate}


@dataclass
class Submission:
    """One submission as it arrived. ``node``: the node, or the ``Bearer`` token the
    request presented (looked up in the batch's transaction). ``too_large``: the body was
    over the limit and not kept (``body`` then only identifies it, ``size`` is what arrived)."""

    node: Node | Bearer
    lease_id: str
    body: bytes
    too_large: bool = False
    size: int | None = None
    refused: str | None = None   # why the face refused to read the body (nested too deep): invalid
    then_claim: bool = False     # also lease the node's next job when the result is accepted (?next=1)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.body).hexdigest()


def _facts(body: dict) -> list[Fact]:
    return Result.from_dict(body).facts


async def submit(sweeps, node: Node | Bearer, lease_id: str, body: bytes, *, too_large: bool = False,
                 size: int | None = None, refused: str | None = None, then_claim: bool = False) -> SubmitOutcome:
    """Record and decide one submission (raises ``NotFound`` or ``Conflict``; given a
    ``Bearer`` token, ``Unauthorized`` or ``Forbidden`` when it does not admit a node).
    ``then_claim``: an accepted result also leases the node's next job, in the same
    transaction (``SubmitOutcome.next``)."""
    return await sweeps.submits(Submission(node, lease_id, body, too_large, size, refused, then_claim))


async def submit_batch(sweeps, subs: list[Submission]) -> list[SubmitOutcome | Exception]:
    """Decide submissions on distinct leases in one write transaction; one outcome (or
    the error to raise) per submission, in order.

    The accepted submissions that ask for their node's next job (``then_claim``, the node
    protocol's ``?next=1``) are then served by ``leases.claim_in`` in the same transaction,
    after the submissions' writes, so the claims see them as a claim transaction of their
    own committed after this one would: a node is never given the job it just answered,
    nor two replicas of one, and its trust is the one its result left it. One transaction
    instead of a submission's and a claim's: on PostgreSQL five round trips fewer a batch
    (the connection check, BEGIN, the token lookup, the transitions' insert, COMMIT), and
    a transaction's fixed cost in SQLAlchemy. A next claim left with nothing while a job it
    could take was locked by another transaction is looked for again once this one has
    committed (``leases.relook``, as ``claim_batch`` does): the node was told "no job
    waits" and slept through its ``Retry-After`` with a job waiting. A repeat of an accepted
    result whose engine build is withdrawn since is answered as before and claims nothing
    (``withdrawn_since``)."""
    async def run() -> tuple[list[SubmitOutcome | Exception], list[int]]:
        now = tr.utcnow()
        skipped: list[int] = []
        async with sweeps.db.write_core() as s:
            batch = _Batch(sweeps, now)
            await batch.load(s, subs)
            outcomes = [batch.decide(sub) for sub in subs]
            await batch.write(s)
            wanting = [i for i, (sub, out) in enumerate(zip(subs, outcomes))
                       if sub.then_claim and isinstance(out, SubmitOutcome) and out.accepted
                       and not (out.duplicate and withdrawn_since(sweeps.settings, sub, out))]
            if wanting:
                claims = await claim_in(s, sweeps.db, sweeps.settings, [batch.node_of(subs[i]) for i in wanting],
                                        now, batch.logs, skipped=skipped)
                for i, claim in zip(wanting, claims):
                    outcomes[i].next = claim
            await tr.record(s, *batch.logs)
            return outcomes, [wanting[k] for k in skipped]

    outcomes, again = await retrying(run)
    if again:
        for i, claim in zip(again, await relook(sweeps, [subs[i].node for i in again])):
            outcomes[i].next = claim
    return outcomes


def withdrawn_since(settings, sub: Submission, out: SubmitOutcome) -> bool:
    """Whether the repeat ``sub`` of an accepted result (``out.duplicate``) came from an engine
    build no longer accepted: then it gets no next job (its result would be refused 422 for
    that build, as a lease naming it is refused 403), and ``out.refused_build`` names it. A
    repeat is not validated again, so its build is read from its body here: the same body as
    the first submission's (their SHA-256 is equal), which passed validation. Asked only for a
    repeat with ``?next=1``: an accepted result's path reads no body for it."""
    try:
        build = jsontext.loads(sub.body).get("engineBuild")
    except (ValueError, AttributeError, RecursionError):
        return False
    if not isinstance(build, str) or build in accepted_builds(settings):
        return False
    out.refused_build = build
    return True


_LEASE_AND_JOB = (
    select(LEASES.c.id.label("lease_id"), LEASES.c.node_id.label("lease_node_id"),
           LEASES.c.state.label("lease_state"), LEASES.c.leased_at, *JOBS.c,
           RESULTS.c.id.label("prior_id"), RESULTS.c.state.label("prior_state"),
           RESULTS.c.body_sha256.label("prior_sha256"), RESULTS.c.reasons.label("prior_reasons"))
    .select_from(LEASES.join(JOBS, JOBS.c.id == LEASES.c.job_id)
                 .outerjoin(RESULTS, RESULTS.c.lease_id == LEASES.c.id))
    .where(LEASES.c.id.in_(bindparam("ids", expanding=True)))
    .order_by(JOBS.c.id, LEASES.c.id))
_JOB_ATTRS = {c.key: c.key for c in JOBS.c}
_PRIOR = select(RESULTS.c.lease_id, RESULTS.c.id, RESULTS.c.state, RESULTS.c.body_sha256, RESULTS.c.reasons)
_PENDING = (select(RESULTS.c.id, RESULTS.c.lease_id, RESULTS.c.job_id, RESULTS.c.node_id, RESULTS.c.state,
                   RESULTS.c.body)
            .where(RESULTS.c.job_id.in_(bindparam("jobs", expanding=True)), RESULTS.c.state == tr.RESULT_PENDING)
            .order_by(RESULTS.c.id))
# The nodes a batch touches: those named by id, and those whose token a submission presented.
_NODES = (select(NODES.c.id, NODES.c.last_seen_at, NODES.c.trusted, NODES.c.streak, NODES.c.valid_total,
                 NODES.c.invalid_total, NODES.c.token_hash, NODES.c.revoked_at, NODES.c.revoked_reason)
          .where(or_(NODES.c.id.in_(bindparam("ids", expanding=True)),
                     NODES.c.token_hash.in_(bindparam("digests", expanding=True))))
          .order_by(NODES.c.id))
_END_LEASES = (update(LEASES).where(LEASES.c.id.in_(bindparam("ids", expanding=True)))
               .values(state=tr.LEASE_SUBMITTED, ended_at=bindparam("at")))
_SET_JOB = (update(JOBS).where(JOBS.c.id == bindparam("b_id"))
            .values(state=bindparam("b_state"), quorum=bindparam("b_quorum"), active_leases=bindparam("b_active"),
                    valid_results=bindparam("b_valid"), failures=bindparam("b_failures"),
                    canonical_lease_id=bindparam("b_canonical"), reason=bindparam("b_reason"),
                    updated_at=bindparam("b_at")))
_SET_NODE = (update(NODES).where(NODES.c.id == bindparam("b_id"))
             .values(last_seen_at=bindparam("b_at"), trusted=bindparam("b_trusted"), streak=bindparam("b_streak"),
                     valid_total=bindparam("b_valid"), invalid_total=bindparam("b_invalid")))
_SET_RESULT = update(RESULTS).where(RESULTS.c.id == bindparam("b_id")).values(state=bindparam("b_state"))
_NEW_RESULTS = RESULTS.insert().returning(RESULTS.c.id, RESULTS.c.lease_id)


class _Batch:
    """The rows a batch of submissions touches, read once, changed in memory one
    submission at a time, and written back once."""

    def __init__(self, sweeps, now: datetime) -> None:
        self.sweeps, self.settings, self.now = sweeps, sweeps.settings, now
        self.leases: dict[str, Record] = {}
        self.jobs: dict[int, Record] = {}
        self.prior: dict[str, Record] = {}
        self.pending: dict[int, list[Record]] = defaultdict(list)   # a job's pending results, oldest first
        self.nodes: dict[str, Record] = {}
        self.by_token: dict[str, Record] = {}                        # token hash -> node, for ``Bearer`` submissions
        self.facts: dict[int, list[Fact]] = {}                       # id(new result) -> its parsed facts
        self.new: list[Record] = []                                  # results to insert
        self.ended: list[str] = []                                   # leases now submitted
        self.changed_jobs: dict[int, Record] = {}
        self.changed_nodes: dict[str, Record] = {}
        self.changed_results: dict[int, Record] = {}                 # earlier results given a new state
        self.logs: list[dict] = []
        self.unnamed: list[tuple[dict, Record]] = []                 # log rows naming a result not yet written

    async def load(self, s, subs: list[Submission]) -> None:
        """The leases with their jobs and any earlier result on them (locking the leases
        and then the jobs on PostgreSQL, in job order, as every other writer locks them);
        the pending results of jobs that may be decided; the nodes involved, by id or by
        the token a submission presented (locked)."""
        db = self.sweeps.db
        q = _LEASE_AND_JOB if db.is_sqlite else _LEASE_AND_JOB.with_for_update(of=[LEASES, JOBS])
        for row in await s.execute(q, {"ids": [sub.lease_id for sub in subs]}):
            m = row._mapping
            job = self.jobs.get(m["id"]) or self.jobs.setdefault(m["id"], record(row, **_JOB_ATTRS))
            self.leases[m["lease_id"]] = Record(id=m["lease_id"], job_id=job.id, node_id=m["lease_node_id"],
                                                state=m["lease_state"], leased_at=m["leased_at"])
            if m["prior_id"] is not None:
                self.prior[m["lease_id"]] = Record(id=m["prior_id"], state=m["prior_state"],
                                                   body_sha256=m["prior_sha256"], reasons=m["prior_reasons"])
        # On PostgreSQL a submission that waited on a lease's lock sees the lease as committed
        # by the one before it, but the joined result as of its own start: read it again.
        again = [lid for lid, lease in self.leases.items()
                 if lid not in self.prior and lease.state != tr.LEASE_ACTIVE]
        if again:
            for row in await s.execute(_PRIOR.where(RESULTS.c.lease_id.in_(again))):
                self.prior[row.lease_id] = record(row)
        deciding = [j.id for j in self.jobs.values() if j.quorum > 1 or j.valid_results > 0]
        if deciding:
            for row in await s.execute(_PENDING, {"jobs": deciding}):
                self.pending[row.job_id].append(record(row))
        node_ids = ({sub.node.id for sub in subs if not isinstance(sub.node, Bearer)}
                    | {r.node_id for rs in self.pending.values() for r in rs})
        digests = {sub.node.digest for sub in subs if isinstance(sub.node, Bearer)}
        q = _NODES if db.is_sqlite else _NODES.with_for_update()
        for row in await s.execute(q, {"ids": sorted(node_ids), "digests": sorted(digests)}):
            node = self.nodes[row.id] = record(row)
            self.by_token[node.token_hash] = node

    def node_of(self, sub: Submission) -> Record:
        """The node row of an admitted submission, as this batch's decisions left it."""
        if isinstance(sub.node, Bearer):
            return self.by_token[sub.node.digest]
        return self.nodes[sub.node.id]

    def decide(self, sub: Submission) -> SubmitOutcome | Exception:
        """One submission, decided as its own transaction would: its outcome, or the
        error it gets (nothing of it is written then)."""
        settings, now = self.settings, self.now
        node = sub.node
        if isinstance(node, Bearer):
            try:
                node = admit(self.by_token.get(node.digest), node)
            except ServiceError as exc:
                return exc
        lease = self.leases.get(sub.lease_id)
        if lease is None or lease.node_id != node.id:
            return NotFound("no such lease for this node", {"leaseId": sub.lease_id})
        job = self.jobs[lease.job_id]
        prior = self.prior.get(lease.id)
        digest = sub.digest
        if prior is not None:
            if prior.body_sha256 != digest:
                return Conflict("a different result was already submitted on this lease",
                                {"leaseId": lease.id, "resultState": prior.state})
            return SubmitOutcome(prior.state not in tr.RESULT_REFUSED, prior.state, job.state,
                                 list(prior.reasons), duplicate=True)
        if lease.state != tr.LEASE_ACTIVE:
            return Conflict(f"the lease is {lease.state}: its job went back to the queue; lease a job again",
                            {"leaseId": lease.id, "leaseState": lease.state})
        if sub.too_large:
            parsed, reasons = None, [f"body: {sub.size if sub.size is not None else len(sub.body)} bytes is over "
                                     f"the limit of {settings.result_max_bytes} bytes"]
        elif sub.refused:
            parsed, reasons = None, [f"body: {sub.refused}"]
        else:
            try:
                parsed, reasons = validate_result(sub.body, job, node.id, tr.aware(lease.leased_at), now,
                                                  settings)
            except RecursionError:        # a body the face let through that still nests too deep: invalid
                parsed, reasons = None, ["body: the JSON nests too deeply to read"]
            except Exception as exc:      # a fault in validation fails this submission alone
                return exc

        unread = not reasons and parsed is not None and not parsed.measurements
        if unread:
            first = f" (the first: {parsed.skipped[0].reason[:200]})" if parsed.skipped else ""
            reasons = [f"photos: none of the job's {len(job.photos)} photos was read{first}; a result that read "
                       "no photo says nothing of the ground"]

        # From here on every change is in memory; ``write`` puts the batch's changes in the database.
        actor = f"node:{node.id}"
        me = self.nodes[node.id]
        me.last_seen_at = now
        deciding = not reasons and job.state in (tr.JOB_QUEUED, tr.JOB_LEASED)
        earlier = list(self.pending[job.id]) if deciding and (job.quorum > 1 or job.valid_results > 0) else []
        self.changed_nodes[me.id] = me
        self.changed_jobs[job.id] = job
        lease.state = tr.LEASE_SUBMITTED
        self.ended.append(lease.id)
        job.active_leases = max(0, job.active_leases - 1)
        before, reason_before = job.state, job.reason
        result = Record(id=None, lease_id=lease.id, job_id=job.id, node_id=node.id, state=tr.RESULT_INVALID,
                        reasons=reasons, body=None, body_sha256=digest,
                        engine_build=parsed.engine_build if parsed else None,
                        facts=len(parsed.facts) if parsed else 0, received_at=now)
        self.new.append(result)
        self.logs.append(tr.row("lease", lease.id, tr.LEASE_ACTIVE, tr.LEASE_SUBMITTED, actor, "result received",
                                now))
        this = f"the result on lease {lease.id}"
        if reasons:
            # Counted against the job as an invalid result is (trust-weighted: five fresh nodes
            # must not park a job by sending empty results); an unread one does not blame the node.
            counted = trust.counts_against_job(me)      # asked before penalise takes the trust away
            if unread:
                result.state = tr.RESULT_UNREAD
            self.log_result(result, None, result.state, actor, "rejected: " + "; ".join(reasons[:20])
                            + ("" if counted else " (not counted against the job: the node is not trusted)"))
            if not unread and trust.penalise(me):
                self.logs.append(tr.row("node", me.id, "trusted", "untrusted", "coordinator",
                                        f"{this} is invalid", now))
            if job.state in (tr.JOB_QUEUED, tr.JOB_LEASED):
                fail_job(job, f"{this} from node {node.id} " + ("read none of the job's photos" if unread
                                                                else "is invalid"),
                         settings.job_max_failures, counted)
        else:
            result.state, result.body = tr.RESULT_PENDING, parsed.to_dict()
            self.facts[id(result)] = parsed.facts
            self.log_result(result, None, tr.RESULT_PENDING, actor, "passed validation")
            if deciding:
                self.pending[job.id].append(result)
                job.valid_results += 1
                self.quorum(job, result, earlier)
            else:
                self.log_result(result, tr.RESULT_PENDING, tr.RESULT_PENDING, "coordinator",
                                f"kept for the record: job {job.id} is already {job.state}")
        job.updated_at = now
        if job.state != before:
            self.logs.append(tr.row("job", job.id, before, job.state, actor,
                                    job.reason if job.reason and (job.reason != reason_before
                                                                  or job.state == tr.JOB_FAILED)
                                    else this, now))
        return SubmitOutcome(result.state not in tr.RESULT_REFUSED, result.state, job.state, list(reasons))

    def log_result(self, r: Record, from_state: str | None, to_state: str, actor: str, why: str) -> None:
        row = tr.row("result", THIS if r.id is None else r.id, from_state, to_state, actor, why, self.now)
        self.logs.append(row)
        if r.id is None:
            self.unnamed.append((row, r))

    def set_state(self, r: Record, state: str) -> None:
        r.state = state
        if r.id is not None:
            self.changed_results[r.id] = r

    def quorum(self, job: Record, result: Record, earlier: list[Record]) -> None:
        """Decide the job once it has as many valid results as its quorum. ``result`` is this
        submission's; ``earlier`` the job's pending results before it (read from the database,
        or new in this batch)."""
        settings, now = self.settings, self.now
        if job.valid_results < job.quorum:
            job.state = _settle(job)
            return
        pending = earlier + [result]
        facts_of = {id(r): self.facts[id(r)] if id(r) in self.facts else _facts(r.body) for r in pending}
        need = 1 if job.quorum == 1 else 2
        group: list[Record] = []
        for r in pending:
            agreeing = [o for o in pending if o is r or trust.results_agree(facts_of[id(r)], facts_of[id(o)])]
            if len(agreeing) >= need:
                group = agreeing
                break
        if group:
            job.canonical_lease_id = group[0].lease_id
            job.state = tr.JOB_IN_REVIEW
            job.reason = None
            for r in pending:
                node = self.nodes[r.node_id]
                self.changed_nodes[node.id] = node
                if any(r is g for g in group):
                    self.set_state(r, tr.RESULT_ACCEPTED)
                    self.log_result(r, tr.RESULT_PENDING, tr.RESULT_ACCEPTED, "coordinator",
                                    f"quorum of {len(group)} for job {job.id}")
                    if trust.credit(node, settings.trust_streak):
                        self.logs.append(tr.row("node", node.id, "untrusted", "trusted", "coordinator",
                                                f"{node.streak} consecutive accepted results", now))
                else:
                    self.set_state(r, tr.RESULT_OUTVOTED)
                    self.log_result(r, tr.RESULT_PENDING, tr.RESULT_OUTVOTED, "coordinator",
                                    f"disagrees with the quorum of job {job.id}")
                    if trust.penalise(node):
                        self.logs.append(tr.row("node", node.id, "trusted", "untrusted", "coordinator",
                                                f"the result on lease {r.lease_id} was outvoted", now))
            self.pending[job.id] = []
            return
        if job.quorum < settings.quorum_max:
            job.quorum += 1
            job.state = _settle(job)
            job.reason = f"{len(pending)} replicas disagree: one more is asked for (quorum {job.quorum})"
            return
        job.state = tr.JOB_FAILED
        job.reason = f"{len(pending)} replicas disagree and the quorum cannot grow past {settings.quorum_max}"
        for r in pending:
            self.set_state(r, tr.RESULT_DISAGREED)
            self.log_result(r, tr.RESULT_PENDING, tr.RESULT_DISAGREED, "coordinator", job.reason)
        self.pending[job.id] = []

    async def write(self, s) -> None:
        """Every change of the batch, one statement per table (executemany where rows differ);
        the transitions (``self.logs``) are left for the caller to record."""
        now = self.now
        if self.new:
            cols = [c.key for c in RESULTS.c if c.key != "id"]
            ids = dict((lid, rid) for rid, lid in
                       (await s.execute(_NEW_RESULTS, [{k: getattr(r, k) for k in cols} for r in self.new])).all())
            for r in self.new:
                r.id = ids[r.lease_id]
            for row, r in self.unnamed:
                row["subject_id"] = str(r.id)
        if self.ended:
            await s.execute(_END_LEASES, {"ids": self.ended, "at": now})
        if self.changed_jobs:
            await s.execute(_SET_JOB, [
                {"b_id": j.id, "b_state": j.state, "b_quorum": j.quorum, "b_active": j.active_leases,
                 "b_valid": j.valid_results, "b_failures": j.failures, "b_canonical": j.canonical_lease_id,
                 "b_reason": j.reason, "b_at": j.updated_at} for j in self.changed_jobs.values()])
        if self.changed_nodes:
            await s.execute(_SET_NODE, [
                {"b_id": n.id, "b_at": n.last_seen_at, "b_trusted": n.trusted, "b_streak": n.streak,
                 "b_valid": n.valid_total, "b_invalid": n.invalid_total} for n in self.changed_nodes.values()])
        if self.changed_results:
            await s.execute(_SET_RESULT, [{"b_id": r.id, "b_state": r.state} for r in self.changed_results.values()])
