"""Tornado's own log lines, bounded, so that what a client sends cannot inflate the log.

Tornado writes what a client sent into the log: a malformed head is logged on
``tornado.general`` at INFO as ``Malformed HTTP message from 1.2.3.4: Invalid header name
'<the whole name, escaped>'``, and the access log (``tornado.access``) holds each request's
URI. Heads are read up to 1 MB (``HEADER_READ_CEILING``, faces/app.py), so that a URI too long
is answered 414 rather than dropped; measured (the resource audit), one request with a 900 KB
invalid header name put about 2.4 MB in one line, the log growing 2.7 times what was sent.

A filter on each of those two loggers (``install``, called by ``make_server``):

- cuts a message longer than its logger's bound (``CUT_AT``: 300 characters on
  ``tornado.general``, well above an ordinary line; on ``tornado.access``, the longest URI
  served, 8 KB, and the rest of its line, so that only a URI refused 414 is cut) and says how
  long it was: ``... [cut: 3600104 characters in all]``;
- on ``tornado.general`` only, lets at most ``PER_WINDOW`` lines of one kind (one message
  template, ``Malformed HTTP message from %s: %s``) through a minute; the rest are counted,
  and one line at the minute's end (or before the next line of that kind, outside an event
  loop) says how many were left out. Short malformed heads sent in a loop would otherwise
  still write more log than they cost to send.

The access log is not rate limited: it is one line per request, each bounded. Ordinary lines
pass unchanged. The traceback of a record (``exc_info``) is never cut.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time

from coordinator.faces.http import MAX_URI

# The access log's bound is above the longest URI the service serves (MAX_URI, and the line's
# status, method, address and time): a request it answers is logged whole; one refused 414 is cut.
CUT_AT = {"tornado.general": 300, "tornado.access": MAX_URI + 200}
RATE_LIMITED = frozenset({"tornado.general"})
PER_WINDOW = 20           # lines of one kind let through a window
WINDOW_S = 60.0
MAX_KINDS = 512           # windows kept at once (templates are code's, but a message may come pre-formatted)


class _Window:
    __slots__ = ("start", "passed", "left_out", "level", "template")

    def __init__(self, start: float, template: str) -> None:
        self.start, self.passed, self.left_out, self.level, self.template = start, 0, 0, logging.INFO, template


class LogBound(logging.Filter):
    """Cuts long messages to ``cut_at`` characters; with ``per_window``, rate-limits each kind."""

    def __init__(self, cut_at: int, per_window: int = 0, window_s: float = WINDOW_S) -> None:
        super().__init__()
        self.cut_at, self.per_window, self.window_s = cut_at, per_window, window_s
        self._windows: dict[str, _Window] = {}
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self._windows.clear()

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "sis_summary", False):            # our own count of lines left out
            return True
        if self.per_window and not self._admit(record):
            return False
        self._cut(record)
        return True

    def _cut(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format: logging's handler reports it as it would have
            return
        if len(message) > self.cut_at:
            record.msg = f"{message[:self.cut_at]}... [cut: {len(message)} characters in all]"
            record.args = None

    def _admit(self, record: logging.LogRecord) -> bool:
        template = str(record.msg)
        key = template[:200]
        now = time.monotonic()
        due: list[tuple[str, _Window]] = []
        with self._lock:
            w = self._windows.get(key)
            if w is not None and now - w.start >= self.window_s:
                del self._windows[key]
                if w.left_out:
                    due.append((record.name, w))         # its count is written before this line
                w = None
            if w is None:
                if len(self._windows) >= MAX_KINDS:
                    due += self._expire(now, record.name)
                w = self._windows[key] = _Window(now, template)
            if w.passed < self.per_window:
                w.passed += 1
                admitted = True
            else:
                w.left_out += 1
                w.level = max(w.level, record.levelno)
                admitted = False
                if w.left_out == 1:
                    self._flush_later(key, w, record.name, w.start + self.window_s - now)
        for name, done in due:
            self._summarise(name, done)
        return admitted

    def _expire(self, now: float, name: str) -> list[tuple[str, _Window]]:
        """Drops the windows that have ended (under the lock), returning those with a count to write."""
        ended = [k for k, w in self._windows.items() if now - w.start >= self.window_s]
        out = [(name, self._windows.pop(k)) for k in ended]
        if len(self._windows) >= MAX_KINDS:           # all live: the oldest goes, its count written now
            k = next(iter(self._windows))
            out.append((name, self._windows.pop(k)))
        return [(n, w) for n, w in out if w.left_out]

    def _flush_later(self, key: str, w: _Window, name: str, delay: float) -> None:
        """At the window's end, the count of lines left out, where an event loop runs here (Tornado's
        lines are logged in it); elsewhere the next line of the kind writes it first."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        loop.call_later(max(0.0, delay), self._flush, key, w, name)

    def _flush(self, key: str, w: _Window, name: str) -> None:
        with self._lock:
            if self._windows.get(key) is not w:        # already written by the lazy path
                return
            del self._windows[key]
        if w.left_out:
            self._summarise(name, w)

    def _summarise(self, name: str, w: _Window) -> None:
        logging.getLogger(name).log(
            w.level, "%d more lines like %r were not logged over %.0f s (at most %d of one kind are, in that time)",
            w.left_out, w.template[:120], self.window_s, self.per_window, extra={"sis_summary": True})


def install() -> None:
    """Puts a ``LogBound`` on each of Tornado's loggers in ``CUT_AT``, once per process."""
    for name, cut_at in CUT_AT.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, LogBound) for f in logger.filters):
            logger.addFilter(LogBound(cut_at, PER_WINDOW if name in RATE_LIMITED else 0))
