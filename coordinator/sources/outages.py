"""What the log says of a source that fails: once when it starts failing, then a count.

A source that is down or answers what its parser cannot read fails on every request that reads
it, and every request wrote its lines: measured (the log audit), GDACS and USGS answering
malformed GeoJSON put a traceback per source per request in the log, 1,921 bytes a request on
average, and an upstream down one line per source per request. ``Outages`` (one per adapter)
says instead, of each source (or part of one: a WAQI feed, a BMKG sea area):

- its first failure, with the traceback where there is one, and what to check (its base URL
  setting, ``SIS_SOURCES__<NAME>__BASE_URL``, and where it points now);
- its repeats counted, and said at most once every ``SAID_EVERY_S`` (a minute):
  ``GDACS still unusable: 5,312 failures in the last 60 s: HTTP 503``; a failure of a kind not
  seen in the outage that carries a traceback (a parser's own bug, met once the upstream
  answers again but oddly) is said at once, with it, a few kinds at most;
- one line when it answers again, with how many failures the outage had.

A source that fails and answers by turns (one area read failing, another answering) would
start and end an outage on every request; an outage that starts within a minute of the last
one said is not said at once but counted, and the count said at the minute's end. So each
source or part writes a few lines a minute at most, whatever the request rate.

The count is written when its minute ends, from the event loop the failures came on; outside
one (a script), before the next line about the source. Only logs change here: what answers
say of a source (health, caveats) is the adapter's, unchanged.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Callable

from coordinator.core.text import one_line

SAID_EVERY_S = 60.0        # a source's repeats are said at most once in this time
NEW_KINDS_SAID = 4         # failures of a new kind, with a traceback, said at once in one outage
REASON_MAX = 300           # characters of a reason a line quotes


def duration(seconds: float) -> str:
    """``42 s``, ``12 min 3 s``, ``3 h 5 min``: how long an outage lasted."""
    s = max(0, int(round(seconds)))
    if s < 120:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")


def failures(n: int) -> str:
    return f"{n:,} failure" + ("" if n == 1 else "s")


@dataclass
class _Outage:
    """One source's (or part's) failures, and what of them the log has been told."""

    failing: bool = False
    since: float = 0.0             # this run of failures began
    count: int = 0                 # failures in this run
    reason: str = ""               # the last one's
    said_at: float = -math.inf     # the last line about it
    opened_at: float = -math.inf   # the last line that said it started failing
    told: bool = False             # whether the log knows it is failing now (so that it is told it answers)
    unsaid: int = 0                # failures since the last line
    answered: int = 0              # answers between them, since the last line (a source failing by turns)
    kinds: set[str] = field(default_factory=set)    # reasons whose traceback the log has, this outage
    timer: asyncio.TimerHandle | None = None


class Outages:
    """The failures of one adapter's reads (and of its parts), said to ``log`` as the module says."""

    def __init__(self, log: logging.Logger, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.log = log
        self.clock = clock
        self._of: dict[str, _Outage] = {}

    def failed(self, name: str, reason: str, *, check: str = "", detail: str = "",
               exc: BaseException | None = None, level: int = logging.WARNING) -> None:
        """``name`` failed, for ``reason`` (as its health says it). ``check``: what the operator
        should look at, said with its first failure; ``detail``: what the first line adds to the
        reason (the parser's exception); ``exc``: its traceback, logged with the first failure of
        each kind."""
        now = self.clock()
        o = self._of.setdefault(name, _Outage())
        self._due(name, o, now)
        reason = one_line(reason, REASON_MAX)
        what = f"{reason}: {one_line(detail, REASON_MAX)}" if detail and detail != reason else reason
        if not o.failing:
            o.failing, o.since, o.count = True, now, 0
            if now - o.opened_at >= SAID_EVERY_S:
                o.count, o.reason, o.kinds = 1, reason, {reason} if exc is not None else set()
                o.opened_at = o.said_at = now
                o.told, o.unsaid, o.answered = True, 0, 0
                self.log.log(level, "%s unusable: %s%s; its failures are counted and said at most once every "
                             "%.0f s until it answers again", name, what, f"; check {check}" if check else "",
                             SAID_EVERY_S, exc_info=exc)
                return
            o.told = False                              # started again within a minute: counted, said later
        o.count += 1
        o.reason = reason
        if exc is not None and reason not in o.kinds and len(o.kinds) < NEW_KINDS_SAID:
            o.kinds.add(reason)
            o.told = True                               # its answer will be said
            self.log.log(level, "%s unusable, another kind of failure: %s (%s in this outage)", name, what,
                         failures(o.count), exc_info=exc)
            return
        o.unsaid += 1
        self._later(name, o, now)

    def answered(self, name: str) -> None:
        """``name`` answered: the log is told, if it was told that it failed."""
        o = self._of.get(name)
        if o is None or not o.failing:
            return
        now = self.clock()
        self._due(name, o, now)
        o.failing = False
        if o.told:
            self.log.warning("%s answers again, after %s in %s (the last: %s)", name, failures(o.count),
                             duration(now - o.since), o.reason)
            o.said_at, o.unsaid, o.answered, o.told = now, 0, 0, False
            self._cancel(o)
        else:
            o.answered += 1
            self._later(name, o, now)

    # ---- the count, said when its minute ends -------------------------------------------------

    def _later(self, name: str, o: _Outage, now: float) -> None:
        """The count said when its minute ends: at once if it has, else by a timer of the running
        loop; with none running, by the next line about the source (``_due``)."""
        left = o.said_at + SAID_EVERY_S - now
        if left <= 0:
            self._say(name, o, now)
            return
        if o.timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        o.timer = loop.call_later(left, self._tick, name, o)

    def _tick(self, name: str, o: _Outage) -> None:
        o.timer = None
        if self._of.get(name) is o:
            self._say(name, o, self.clock())

    def _due(self, name: str, o: _Outage, now: float) -> None:
        if (o.unsaid or o.answered) and now - o.said_at >= SAID_EVERY_S:
            self._cancel(o)
            self._say(name, o, now)

    @staticmethod
    def _cancel(o: _Outage) -> None:
        if o.timer is not None:
            with contextlib.suppress(Exception):       # its loop closed: nothing left to cancel
                o.timer.cancel()
            o.timer = None

    def _say(self, name: str, o: _Outage, now: float) -> None:
        if not o.unsaid and not o.answered:
            return
        n, between = failures(o.unsaid), (f"; it answered again {o.answered:,} times between them" if o.answered else "")
        span = duration(now - o.said_at) if o.said_at > -math.inf else duration(now - o.since)
        if o.failing:
            self.log.warning("%s still unusable: %s in the last %s: %s%s", name, n, span, o.reason, between)
            o.told = True                  # it is known to be failing: its answer will be said
        else:
            self.log.warning("%s answers again, after %s in the last %s (the last: %s)%s", name, n, span,
                             o.reason, between)
        o.said_at, o.unsaid, o.answered = now, 0, 0
