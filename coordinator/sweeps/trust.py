"""Replication and trust, as volunteer-computing systems do it (BOINC's adaptive replication).

Rule: a node is *trusted* once it has ``trust_streak`` (default 10) consecutive
accepted results. One invalid result (failed validation) or one outvoted result
(a quorum of replicas disagreed with it) resets its streak to 0 and takes its
trust away. Lapsed leases do not count either way. A job leased by an untrusted
node needs a quorum of two results from different nodes; a trusted node's
result alone is enough.

Failures are weighed by trust too (``counts_against_job``): an invalid result
counts toward parking its job only when its node was trusted. Enrolment is open,
so an untrusted node costs an attacker nothing; if its invalid results counted,
five fresh nodes submitting ``[]`` would park any job for good.

Replicas are compared fact by fact, per kind: a fact of one result agrees with a
fact of the other when both are of the same kind, lie within the kind's position
tolerance, and have values within the kind's value tolerance (absolute or
relative, whichever is larger; null agrees only with null). Facts are matched
greedily, nearest first; two results agree when at least ``AGREE_SHARE`` of the
larger result's facts are matched (two empty results agree).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from sweep_engine.schema import FACT_KINDS, Fact

from . import coverage

AGREE_SHARE = 0.8


@dataclass(frozen=True)
class Tolerance:
    position_m: float
    abs_m: float
    rel: float


_POINTLIKE = Tolerance(position_m=8.0, abs_m=0.3, rel=0.15)
_LINEAR = Tolerance(position_m=15.0, abs_m=0.5, rel=0.15)
TOLERANCE: dict[str, Tolerance] = {
    "roadway": Tolerance(position_m=15.0, abs_m=0.5, rel=0.10),
    "kerbs": _LINEAR, "fences": _LINEAR, "wires": Tolerance(position_m=15.0, abs_m=0.75, rel=0.15),
    "vegetation": Tolerance(position_m=12.0, abs_m=1.0, rel=0.25),
    "gates": _POINTLIKE, "entrances": _POINTLIKE, "poles": _POINTLIKE, "signage": _POINTLIKE,
    "drainage": _POINTLIKE,
}
assert set(TOLERANCE) == set(FACT_KINDS)


def _distance_m(a: Fact, b: Fact) -> float:
    dy = (a.lat - b.lat) * coverage.M_PER_DEG
    dx = (a.lon - b.lon) * coverage.M_PER_DEG * math.cos(math.radians((a.lat + b.lat) / 2))
    return math.hypot(dx, dy)


def _close(x: float, y: float, tol: Tolerance) -> bool:
    return abs(x - y) <= max(tol.abs_m, tol.rel * max(abs(x), abs(y)))


def values_agree(a: Fact, b: Fact) -> bool:
    tol = TOLERANCE[a.kind]
    if a.value is None or b.value is None:
        return a.value is None and b.value is None
    va = a.value if isinstance(a.value, dict) else {"": a.value}
    vb = b.value if isinstance(b.value, dict) else {"": b.value}
    if set(va) != set(vb):
        return False
    return all(_close(float(va[k]), float(vb[k]), tol) for k in va
               if va[k] is not None and vb[k] is not None) and \
        all((va[k] is None) == (vb[k] is None) for k in va)


def results_agree(a: list[Fact], b: list[Fact]) -> bool:
    if not a and not b:
        return True
    unmatched = list(b)
    matched = 0
    for fa in a:
        tol = TOLERANCE[fa.kind]
        best, best_d = None, math.inf
        for j, fb in enumerate(unmatched):
            if fb.kind != fa.kind:
                continue
            d = _distance_m(fa, fb)
            if d <= tol.position_m and d < best_d and values_agree(fa, fb):
                best, best_d = j, d
        if best is not None:
            unmatched.pop(best)
            matched += 1
    return matched >= AGREE_SHARE * max(len(a), len(b))


def credit(node, streak_needed: int) -> bool:
    """An accepted result. Returns True when the node has just become trusted."""
    node.streak += 1
    node.valid_total += 1
    became = not node.trusted and node.streak >= streak_needed
    if became:
        node.trusted = True
    return became


def counts_against_job(node) -> bool:
    """Whether an invalid result from ``node`` counts as a failure of its job (toward
    ``job_max_failures``): only when the node is trusted, asked before ``penalise`` takes
    the trust away. An untrusted node's invalid result is still recorded and resets its
    streak, and its replica goes back to the queue; it does not bring the job nearer to
    being parked. Accepted results alone are not enough standing: two fresh nodes that
    agree with each other earn them at once. Lapsed leases count whoever held them
    (``leases.sweep_lapsed``): a job that crashes every engine that takes it must park."""
    return bool(node.trusted)


def penalise(node) -> bool:
    """An invalid or outvoted result. Returns True when the node has just lost its trust."""
    lost = node.trusted
    node.streak = 0
    node.invalid_total += 1
    node.trusted = False
    return lost
