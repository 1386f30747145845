"""Freshness: how old a panel's data is by its own time, judged against one clock.

Upstreams keep answering after their data stops moving: a station feed keeps serving its last
hour, a daily product its last day, a forecast its periods after they have ended. Passed on as
it comes, that data reads as current, which the honesty rules forbid. So every panel whose data
carries a time of its own (a reading's time, a product's date, a period's end) reads the clock
here once per answer, names that instant in the answer (``asOf``, so a cached answer still says
when it was judged), and either drops what has ended (forecast periods and warnings) or flags
what is old: ``ageS`` (seconds, from the data's own time to ``asOf``) and ``stale`` (true past
the panel's documented threshold). A time that cannot be read, or that is ahead of the clock
by more than ``CLOCK_SKEW``, gives ``ageS`` and ``stale`` null: unknown, never presumed current.

Each panel imports ``utc_now`` by name and calls it as its own module function (as
``fires.utc_now`` always was), so a test fixes the clock of the panel it tests with
``monkeypatch.setattr(panel, "utc_now", ...)`` and never depends on today's date.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any


def utc_now() -> datetime:
    """The clock a panel judges its data's age against (imported by name into each panel
    module, so a test can fix it there)."""
    return datetime.now(timezone.utc)


def parse_utc(text: Any) -> datetime | None:
    """An ISO 8601 time with its offset (``Z`` or ``+07:00``) as an aware datetime; None when
    absent, unreadable or without an offset (a time that cannot be placed is unknown)."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        t = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return t if t.tzinfo is not None else None


# How far ahead of this service's clock a data time may be and still be read as a time: an
# upstream's clock that runs a little fast. Further ahead (a product dated 2099), the time is
# wrong, not new, and the data's age is unknown.
CLOCK_SKEW = timedelta(minutes=10)
CLOCK_SKEW_TEXT = "10 minutes"


def ahead(at: datetime | None, now: datetime) -> bool:
    """Whether ``at`` is ahead of ``now`` by more than ``CLOCK_SKEW`` (its age is unknown)."""
    return at is not None and at - now > CLOCK_SKEW


def age(at: datetime | None, now: datetime, stale_after: timedelta) -> dict[str, Any]:
    """``{"ageS", "stale"}`` of data timed ``at`` as of ``now``: stale when older than
    ``stale_after``; both null when ``at`` is unknown (its age is unknown, not current). A
    time ahead of the clock within ``CLOCK_SKEW`` has a small negative age and is not stale;
    one further ahead (``ahead``) is a time that cannot be right, so both are null too:
    served as fresh, data dated 2099 read as current. Callers say which in a caveat."""
    if at is None or ahead(at, now):
        return {"ageS": None, "stale": None}
    seconds = int((now - at).total_seconds())
    return {"ageS": seconds, "stale": seconds > stale_after.total_seconds()}


def ended(valid_to: datetime | None, now: datetime) -> bool | None:
    """Whether a validity that ends at ``valid_to`` is over at ``now`` (its end is exclusive);
    None when the end is unknown."""
    return None if valid_to is None else valid_to <= now
