"""How far replicas of one job agree, for the reviewer's eye.

The sweep part decides agreement as a yes/no (``sweeps.trust.results_agree``:
at least 80 % of facts matched within tolerances per kind). A reviewer needs the
degree: how many facts of each replica found a partner in the canonical result,
and how far matched values and positions lie apart. The matching is the same
greedy nearest-first one, with the same tolerances.
"""
from __future__ import annotations

import math
from typing import Any

from sweep_engine.schema import PRIMARY_KEY, Fact

from ..sweeps import trust


def _primary(f: Fact) -> float | None:
    if f.value is None:
        return None
    if isinstance(f.value, dict):
        v = f.value.get(PRIMARY_KEY[f.kind])
        if v is None:
            v = next((x for x in f.value.values() if x is not None), None)
        return float(v) if v is not None else None
    return float(f.value)


def compare(canonical: list[Fact], other: list[Fact]) -> dict[str, Any]:
    unmatched = list(other)
    matched, offsets, diffs = 0, [], []
    for fa in canonical:
        tol = trust.TOLERANCE[fa.kind]
        best, best_d = None, math.inf
        for j, fb in enumerate(unmatched):
            if fb.kind != fa.kind:
                continue
            d = trust._distance_m(fa, fb)
            if d <= tol.position_m and d < best_d and trust.values_agree(fa, fb):
                best, best_d = j, d
        if best is not None:
            fb = unmatched.pop(best)
            matched += 1
            offsets.append(best_d)
            a, b = _primary(fa), _primary(fb)
            if a is not None and b is not None:
                diffs.append(abs(a - b))
    larger = max(len(canonical), len(other))
    share = 1.0 if larger == 0 else matched / larger
    return {"matchedFacts": matched, "canonicalFacts": len(canonical), "replicaFacts": len(other),
            "share": round(share, 3), "agrees": share >= trust.AGREE_SHARE,
            "meanOffsetM": round(sum(offsets) / len(offsets), 2) if offsets else None,
            "maxValueDiff": round(max(diffs), 3) if diffs else None}
