"""A dataset version's rows, deleted in batches.

A version of a monthly map extract holds a million rows or more. Deleted in one
transaction (``sis datasets drop``, or a failed load's clean-up), on SQLite that held
the one write lock for the whole delete: every metered request, the hazard poller
and the sweep queue waited on it (4.2 s for 300,000 rows, measured), and past
``busy_timeout`` they would fail with "database is locked". Batches of
``BATCH_ROWS`` give the lock back between them, as the loader's moves do
(``features.store.MOVE_ROWS``).
"""
from __future__ import annotations

import sqlalchemy as sa

from coordinator.core.db import Database

BATCH_ROWS = 50_000


async def delete_version_rows(db: Database, table: sa.Table, version_id: int, batch: int = BATCH_ROWS) -> int:
    """Delete every row of ``table`` whose ``version_id`` is ``version_id``, ``batch`` rows per
    transaction (by its ``id``); returns how many were deleted."""
    ids = sa.select(table.c.id).where(table.c.version_id == version_id).limit(batch).scalar_subquery()
    deleted = 0
    while True:
        async with db.write_core() as conn:
            n = (await conn.execute(sa.delete(table).where(table.c.id.in_(ids)))).rowcount
        deleted += n
        if n < batch:
            return deleted
