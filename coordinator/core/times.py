"""Time as the service keeps and serves it: aware UTC inside, ISO 8601 in UTC to the second
with a ``Z`` outside. One module, so that every answer writes an instant the same way (the
sweep queue and the review wrote microseconds and the panels seconds) and every reader of a
stored time meets SQLite's naive datetimes the same way."""
from __future__ import annotations

from datetime import datetime, timezone


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def aware(dt: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes for timezone-aware columns; every time stored is UTC."""
    if dt is not None and dt.tzinfo is None:
        return dt.replace(tzinfo=timezone.utc)
    return dt


def iso_epoch(t: float) -> str:
    """A ``time.time()`` instant as served."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso(dt: datetime | None) -> str | None:
    """An instant as served (``2026-06-01T08:13:32Z``); None stays None (unknown)."""
    dt = aware(dt)
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if dt is not None else None
