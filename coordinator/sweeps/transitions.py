"""The states of every sweep object and the one place a state change is recorded.

Every change is a row of ``sweep_transitions`` (who, when, why), written in the
same transaction as the change itself, so the log cannot disagree with the state.
"""
from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncSession

from coordinator.core.db.models import SweepTransition
from coordinator.core.times import aware, iso, utcnow  # noqa: F401  (tr.iso, tr.utcnow: the sweep modules' clock)

# Sweep requests: the ground asked for. parked: none of its ground is queued any more and
# some of it is parked (below), so it cannot become covered until an operator acts.
REQUEST_QUEUED, REQUEST_COVERED, REQUEST_PARKED = "queued", "covered", "parked"

# Jobs (work units). queued: waits for a lease; leased: every replica it needs is held;
# in_review: a quorum of valid, agreeing results waits for a reviewer; failed: parked
# after too many lapsed leases or rejected results (its reason says which);
# approved / rejected: the reviewer's verdict. A rejected job's ground is reissued (a new
# job, ``jobs.reissue``) or parked (``coverage.park_cells``).
JOB_QUEUED, JOB_LEASED, JOB_IN_REVIEW, JOB_FAILED = "queued", "leased", "in_review", "failed"
JOB_APPROVED, JOB_REJECTED = "approved", "rejected"
JOB_STATES = (JOB_QUEUED, JOB_LEASED, JOB_IN_REVIEW, JOB_FAILED, JOB_APPROVED, JOB_REJECTED)
JOB_DONE = (JOB_IN_REVIEW, JOB_APPROVED)

# Leases: one node's hold on one replica of a job.
LEASE_ACTIVE, LEASE_SUBMITTED, LEASE_LAPSED, LEASE_CANCELLED = "active", "submitted", "lapsed", "cancelled"

# Results: pending (valid, awaits its quorum), accepted (part of the quorum that went to
# review), outvoted (valid but a quorum of replicas disagreed with it), disagreed (no two
# replicas agreed and the quorum could not grow: nobody is blamed), invalid (failed
# validation: reasons recorded, nothing goes forward), unread (valid, but it read none of the
# job's photos, every one skipped: it says nothing of the ground, so it goes no further and
# the replica goes back to the queue; the node is not blamed, as a provider's outage does it).
RESULT_PENDING, RESULT_ACCEPTED, RESULT_OUTVOTED = "pending", "accepted", "outvoted"
RESULT_DISAGREED, RESULT_INVALID, RESULT_UNREAD = "disagreed", "invalid", "unread"
RESULT_REFUSED = (RESULT_INVALID, RESULT_UNREAD)     # nothing of these goes forward

# Coverage of one H3 cell: queued for a sweep; covered (approved results from its photos); or
# swept with no imagery (a covered request asked the provider, which listed no usable photo
# in it). Both of the last two are swept ground, counted as covered by the queue and the seen
# layer alike; the share that had imagery is reported apart.
# A cell is parked when a job sweeping it was rejected past the reissue limit, or
# rejected without reissue, once no other job holding its photos is open (a cell split
# over several jobs, ``coverage.settle``): it is not swept again by itself, and a new request over it
# merges into the request that parked it (whose reason the public queue shows).
CELL_QUEUED, CELL_COVERED, CELL_NO_IMAGERY, CELL_PARKED = "queued", "covered", "no_imagery", "parked"
SWEPT = (CELL_COVERED, CELL_NO_IMAGERY)
HELD = (CELL_QUEUED, CELL_PARKED)      # ground a request owns without its being swept


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(10)}"


def row(subject: str, subject_id: Any, from_state: str | None, to_state: str, actor: str, reason: str,
        at: datetime) -> dict[str, Any]:
    return {"subject": subject, "subject_id": str(subject_id), "from_state": from_state, "to_state": to_state,
            "actor": actor[:80], "reason": reason, "at": at}


_INSERT = insert(SweepTransition.__table__)


async def record(session: AsyncSession, *rows: dict[str, Any]) -> None:
    """Write transition rows (built by ``row``) in the caller's transaction."""
    if rows:
        await session.execute(_INSERT, list(rows))


async def history(session: AsyncSession, subject: str, subject_id: Any) -> list[SweepTransition]:
    from sqlalchemy import select
    q = select(SweepTransition).where(SweepTransition.subject == subject,
                                      SweepTransition.subject_id == str(subject_id)).order_by(SweepTransition.id)
    return list((await session.execute(q)).scalars())
