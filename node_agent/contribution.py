"""The volunteer's contribution, counted when the coordinator acknowledges a result.

Counted at acknowledgement, not at computation, so a result resent after a
crash is counted once, and a result refused for good is counted apart.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from .files import Unreadable, read_object, write_json

log = logging.getLogger("sis.node.contribution")

FIELDS = ("jobs", "photos", "facts", "gpuSeconds", "cpuSeconds", "rejected", "refusedJobs")


class Contribution:
    def __init__(self, path: Path):
        self.path = path

    def read(self) -> dict[str, Any]:
        """The counts so far; a file that cannot be read (``"y"``, ``[1]``: TypeError in
        ``status``) counts as none, with a warning."""
        try:
            doc = read_object(self.path) or {}
        except Unreadable as exc:
            log.warning("%s; taken as no contribution counted yet", exc)
            doc = {}
        return {**{k: 0 for k in FIELDS}, "firstAt": None, "lastAt": None, **doc}

    def _add(self, **inc: float) -> dict[str, Any]:
        doc = self.read()
        for k, v in inc.items():
            doc[k] = doc.get(k, 0) + v
        now = time.time()
        doc["firstAt"] = doc["firstAt"] or now
        doc["lastAt"] = now
        write_json(self.path, doc, mode=0o644)
        return doc

    def acknowledged(self, photos: int, facts: int, seconds: float, on_gpu: bool) -> dict[str, Any]:
        return self._add(jobs=1, photos=photos, facts=facts,
                         **({"gpuSeconds": seconds} if on_gpu else {"cpuSeconds": seconds}))

    def rejected(self) -> dict[str, Any]:
        return self._add(rejected=1)

    def refused_job(self) -> dict[str, Any]:
        return self._add(refusedJobs=1)


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
