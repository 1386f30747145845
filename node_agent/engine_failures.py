"""Consecutive engine failures: after ``engine_failure_limit`` of them the agent pauses itself.

An engine that fails on every job (a broken GPU driver, missing or corrupt weights,
a GPU out of memory) fails every job it leases: each lease lapses, counting a
failure on a good job at the coordinator, which parks the job after its failure
limit. So a run of failures pauses leasing, through the pause file of
``sis-node pause`` (``policy.set_paused``): it holds across restarts, ``sis-node
status`` shows its reason (what failed, the last error), and ``sis-node resume``
lifts it once the cause is fixed. A success ends the run; pausing starts the
count again, so a resumed agent gets the whole limit before it pauses again.
"""
from __future__ import annotations

import logging
from pathlib import Path

from .files import why_not_written
from .policy import set_paused

log = logging.getLogger("sis.node.engine")


class EngineFailures:
    def __init__(self, limit: int, pause_file: Path):
        self.limit = limit          # 0: never pause
        self.pause_file = pause_file
        self.in_a_row = 0

    def succeeded(self) -> None:
        self.in_a_row = 0

    def failed(self, job_id: str, why: str) -> str | None:
        """Count a failure (``why``: what the engine raised, in words); the pause's reason when
        this one reached the limit and the agent paused itself, else None."""
        self.in_a_row += 1
        if not self.limit or self.in_a_row < self.limit:
            return None
        reason = (f"the engine failed on {self.in_a_row} jobs in a row, the last ({job_id}) with {why}: fix its "
                  "cause first (the GPU driver, the engine's weights, the GPU's memory; see the log)")
        self.in_a_row = 0
        try:
            set_paused(self.pause_file, reason)
        except OSError as exc:
            log.error("%s; the agent should pause, and cannot write %s (%s)", reason, self.pause_file,
                      why_not_written(exc))
            return None
        log.error("paused: %s; then `sis-node resume`", reason)
        return reason


def in_words(exc: BaseException) -> str:
    """An engine's exception on one line: its type and the start of its message."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__
