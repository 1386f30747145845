"""The volunteer's contribution, counted when the coordinator acknowledges a result.

Counted at acknowledgement, not at computation, so a result resent after a
crash is counted once, and a result refused for good is counted apart.

A count that cannot be written (a full disk, the file refused) is kept in memory
and written with the next one that can be, or when the agent stops; the failure
is said once, and so is the first write that succeeds again. It raised, and the
agent, which had just been told its result was acknowledged, stopped. One
exception: on Windows, the file held by another process past the retries
(``files.windows_busy``, a moment's trouble) still raises, the count not kept,
so the result stays spooled and is counted when it is sent again (888d0bf);
a full disk lasts, and a result kept spooled for it took space and was resent
at every turn.

A lease's result is counted once: the file keeps the last ``COUNTED_LEASES`` leases
counted. A result counted and then not deleted (its spooled file held past the retries
on Windows, a disk refusing the delete) stays spooled, is sent again and answered as a
resend; the run remembered it, but after a restart in between it was counted again.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from .files import Unreadable, read_object, why_not_written, windows_busy, write_json

log = logging.getLogger("sis.node.contribution")

FIELDS = ("jobs", "photos", "facts", "gpuSeconds", "cpuSeconds", "rejected", "refusedJobs")
COUNTED_LEASES = 256    # the leases whose results the file says were counted, the latest


class Contribution:
    def __init__(self, path: Path):
        self.path = path
        self._unwritten: dict[str, float] = {}     # counted, not yet in the file
        self._unwritten_leases: list[str] = []     # the leases of those counts
        self._first_unwritten: float | None = None
        self._failing = False                       # a write failed, and that was said once

    def read(self) -> dict[str, Any]:
        """The counts so far; a file that cannot be read (``"y"``, ``[1]``: TypeError in
        ``status``) counts as none, with a warning."""
        doc = self._file()
        doc.pop("countedLeases", None)
        return doc

    def _file(self) -> dict[str, Any]:
        try:
            doc = read_object(self.path) or {}
        except Unreadable as exc:
            log.warning("%s; taken as no contribution counted yet", exc)
            doc = {}
        leases = doc.get("countedLeases")
        doc["countedLeases"] = [x for x in leases if isinstance(x, str)] if isinstance(leases, list) else []
        return {**{k: 0 for k in FIELDS}, "firstAt": None, "lastAt": None, **doc}

    def _add(self, lease_id: str | None, **inc: float) -> dict[str, Any]:
        if lease_id is not None and (lease_id in self._unwritten_leases
                                     or lease_id in self._file()["countedLeases"]):
            return self.flush()
        now = time.time()
        before = dict(self._unwritten), list(self._unwritten_leases), self._first_unwritten
        for k, v in inc.items():
            self._unwritten[k] = self._unwritten.get(k, 0) + v
        if lease_id is not None:
            self._unwritten_leases.append(lease_id)
        self._first_unwritten = self._first_unwritten or now
        try:
            return self.flush(now, busy_raises=True)
        except OSError:         # held by another process (Windows): this count is not kept
            self._unwritten, self._unwritten_leases, self._first_unwritten = before
            raise

    def flush(self, now: float | None = None, busy_raises: bool = False) -> dict[str, Any]:
        """The counts, with those kept in memory written to the file if it can be written now
        (else kept on, said once). Raises for the file only when ``busy_raises`` and Windows
        says another process holds it."""
        doc = self._file()
        leases = doc.pop("countedLeases")
        for k, v in self._unwritten.items():
            doc[k] = doc.get(k, 0) + v
        if not self._unwritten:
            return doc
        now = now or time.time()
        doc["firstAt"] = doc["firstAt"] or self._first_unwritten or now
        doc["lastAt"] = now
        try:
            write_json(self.path, {**doc, "countedLeases": [*leases, *self._unwritten_leases][-COUNTED_LEASES:]},
                       mode=0o644)
        except OSError as exc:
            if busy_raises and windows_busy(exc):
                raise
            if not self._failing:
                log.warning("the contribution file %s cannot be written (%s); the counts are kept in memory "
                            "and written once it can be", self.path, why_not_written(exc))
                self._failing = True
            return doc
        self._unwritten, self._unwritten_leases, self._first_unwritten = {}, [], None
        if self._failing:
            log.info("the contribution file %s is written again, with the counts kept meanwhile", self.path)
            self._failing = False
        return doc

    @property
    def unwritten(self) -> int:
        """Jobs counted and not yet in the file."""
        return int(self._unwritten.get("jobs", 0))

    def acknowledged(self, lease_id: str, photos: int, facts: int, seconds: float, on_gpu: bool) -> dict[str, Any]:
        """The result of ``lease_id`` acknowledged: counted, unless it was already."""
        return self._add(lease_id, jobs=1, photos=photos, facts=facts,
                         **({"gpuSeconds": seconds} if on_gpu else {"cpuSeconds": seconds}))

    def rejected(self, lease_id: str) -> dict[str, Any]:
        """The result of ``lease_id`` refused for good: counted, unless it was already."""
        return self._add(lease_id, rejected=1)

    def refused_job(self) -> dict[str, Any]:
        return self._add(None, refusedJobs=1)


def summary(doc: dict[str, Any]) -> str:
    hours = doc.get("gpuSeconds", 0) / 3600
    line = (f"{doc.get('jobs', 0)} jobs, {doc.get('photos', 0)} photos, {doc.get('facts', 0)} facts, "
            f"{hours:.2f} GPU hours")
    if doc.get("cpuSeconds"):
        line += f" (+{doc['cpuSeconds'] / 3600:.2f} CPU hours in development mode)"
    if doc.get("rejected"):
        line += f"; {doc['rejected']} results refused by the coordinator"
    if doc.get("refusedJobs"):
        line += f"; {doc['refusedJobs']} malformed jobs refused"
    return line
