"""A progress bar for the current job, and the agent's live status for ``sis-node status``.

On a terminal the bar redraws in place on stderr; elsewhere (a service, a
log file) each phase is one log line, so logs do not fill with bars. The
same figures go to ``status.json`` so ``sis-node status`` can show them
from another process.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, TextIO

from .files import Unreadable, read_object, why_not_written, write_json

log = logging.getLogger("sis.node.progress")


def bar(done: int, total: int, width: int = 24) -> str:
    total = max(total, 1)
    filled = min(width, round(width * done / total))
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


class Progress:
    def __init__(self, stream: TextIO | None = None, tty: bool | None = None):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.job: str | None = None
        self.phase = ""
        self.done = self.total = 0
        self._drawn = False

    def start(self, job_id: str, total: int) -> None:
        self.job, self.total, self.done, self.phase = job_id, total, 0, "fetching photos"
        log.info("job %s: %d photos", job_id, total)
        self._draw()

    def step(self, phase: str, done: int, total: int | None = None) -> None:
        if phase != self.phase and not self.tty:
            log.info("job %s: %s", self.job, phase)
        self.phase, self.done = phase, done
        if total is not None:
            self.total = total
        self._draw()

    def finish(self, outcome: str) -> None:
        if self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
        self._drawn = False
        log.info("job %s: %s", self.job, outcome)
        self.job = None

    def _draw(self) -> None:
        if not self.tty:
            return
        self.stream.write(f"\r{self.job} {bar(self.done, self.total)} {self.phase:<24}")
        self.stream.flush()
        self._drawn = True

    def snapshot(self) -> dict[str, Any] | None:
        if self.job is None:
            return None
        return {"jobId": self.job, "phase": self.phase, "done": self.done, "total": self.total}


class StatusFile:
    """The running agent's state, rewritten atomically as it changes; read by ``sis-node status``."""

    def __init__(self, path: Path, on_update: Callable[[], None] | None = None):
        self.path = path
        self.doc: dict[str, Any] = {}
        self.on_update = on_update
        self._failing = False     # a write failed, and that was said once

    def update(self, **fields: Any) -> None:
        """Keep ``fields`` and rewrite the file. The file only reports: a write that fails (a full
        disk, a folder made read-only) is said once, in a warning, and the agent goes on; it
        raised, and the job loop's fault handler, writing the status itself, raised again."""
        self.doc.update(fields, pid=os.getpid(), updatedAt=time.time())
        try:
            write_json(self.path, self.doc, mode=0o644)
        except OSError as exc:
            if not self._failing:
                log.warning("the status file %s cannot be written (%s); sis-node status shows an old state "
                            "until it can", self.path, why_not_written(exc))
                self._failing = True
        else:
            if self._failing:
                log.info("the status file %s is written again", self.path)
            self._failing = False
        if self.on_update is not None:
            self.on_update()

    def read(self) -> dict[str, Any] | None:
        """The status as the agent last wrote it; None when there is none, or when it cannot be
        read (``"y"``, ``[1]``: AttributeError in ``status``), with a warning."""
        try:
            return read_object(self.path)
        except Unreadable as exc:
            log.warning("%s; taken as no status", exc)
            return None
