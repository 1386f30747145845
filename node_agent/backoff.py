"""The agent's backoff while the coordinator cannot be reached (or refuses for a while).

Apart from the agent's modules because each of them backs off through the one instance the
agent holds (``Agent.backoff``), and it is plain arithmetic, tested on its own.
"""
from __future__ import annotations

import random


class Backoff:
    """Exponential backoff with equal jitter: delay in [cap/2, cap], cap = base * 2^n up to max."""

    def __init__(self, base: float, maximum: float, rng: random.Random | None = None):
        self.base, self.maximum = base, maximum
        self.rng = rng or random.Random()
        self.failures = 0

    def next(self) -> float:
        cap = min(self.maximum, self.base * (2 ** self.failures))
        self.failures += 1
        return cap / 2 + self.rng.uniform(0, cap / 2)

    def reset(self) -> None:
        self.failures = 0
