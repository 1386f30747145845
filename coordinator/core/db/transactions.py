"""Transaction helpers every writer shares: run a transaction again when the database
says to, and lock a row where the database has row locks."""
from __future__ import annotations

import asyncio

from sqlalchemy.exc import DBAPIError, OperationalError


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
