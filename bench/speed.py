"""How fast this machine runs Python right now, printed by the benches beside their
figures: a shared machine's speed varies by half within minutes, so a figure is only
comparable with another taken at the same speed (or within the same run)."""
from __future__ import annotations

import time


def machine_speed() -> float:
    """Seconds for a plain Python loop of 5 M additions (about 0.25 s on a quiet, fast core)."""
    t0, s = time.perf_counter(), 0
    for i in range(5_000_000):
        s += i
    return time.perf_counter() - t0
