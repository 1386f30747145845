"""Rows of the hot path read with SQLAlchemy Core, as plain objects.

The claim and submit batches read the rows they need in a few statements, decide in
memory (the same rules as ever: ``leases._settle``, ``leases.fail_job``, ``trust.credit``
and ``trust.penalise`` change attributes and do not care whether they hold an ORM object
or one of these), and write what changed back in a few more. Loading ORM objects, tracking
their changes and flushing them one row at a time cost more than the rest of a job.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from coordinator.core.db.models import Node, SweepJob, SweepLease, SweepResult

JOBS = SweepJob.__table__
LEASES = SweepLease.__table__
RESULTS = SweepResult.__table__
NODES = Node.__table__


class Record(SimpleNamespace):
    """One row as attributes (``job.state``, ``node.streak``), changed in memory by the
    deciding code; the batch that read it writes it back."""


def record(row: Any, **renamed: str) -> Record:
    """A ``Record`` of a Core row; ``renamed`` maps an attribute to the row's label for it."""
    m = row._mapping
    if not renamed:
        return Record(**m)
    return Record(**{attr: m[label] for attr, label in renamed.items()})
