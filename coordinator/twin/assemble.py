"""Putting a twin together: read the feeds the selected layers need, cut each layer to the
plan's ``pointsPerLayer`` and the whole to its ``twinPoints``, and say what was cut and what
could not be served.

The points are shared out by water-filling: every layer gets up to the same share, a layer
that needs less leaves the rest to the others, so one large layer (airports) cannot crowd out
a small one (the ISS). Within a layer the order of its feed is kept (reference layers come
most important first, events as their upstream lists them). A layer whose source failed is
not served: it goes to the not-served list with the source's error and the answer is degraded,
while every other layer is served as usual.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coordinator.core.access.plans import Caps
from coordinator.core.honesty import Health

from .feeds import FeedRead, read_feeds
from .layers import EVENT, LAYERS, OVERLAY, category_of


@dataclass
class Twin:
    layers: dict[str, dict[str, Any]] = field(default_factory=dict)
    not_served: list[dict[str, str]] = field(default_factory=list)
    health: Health = field(default_factory=Health)
    caveats: list[str] = field(default_factory=list)
    points: int = 0


def allot(totals: dict[str, int], per_layer: int, twin_points: int) -> dict[str, int]:
    """How many points each layer may serve: at most ``per_layer`` each and ``twin_points`` in
    all, shared out evenly (water-filling), any remainder to the layers first in order."""
    want = {k: min(n, per_layer) for k, n in totals.items()}
    if sum(want.values()) <= twin_points:
        return want
    lo, hi = 0, max(want.values())
    while lo < hi:                                  # the largest even share that fits
        mid = (lo + hi + 1) // 2
        if sum(min(w, mid) for w in want.values()) <= twin_points:
            lo = mid
        else:
            hi = mid - 1
    out = {k: min(w, lo) for k, w in want.items()}
    spare = twin_points - sum(out.values())
    for k, w in want.items():
        if spare <= 0:
            break
        if w > out[k]:
            out[k] += 1
            spare -= 1
    return out


def _records(layer_id: str, read: FeedRead) -> list[dict[str, Any]]:
    layer = LAYERS[layer_id]
    if layer.kind == EVENT:
        cat = category_of(layer_id)
        return [r for r in read.records if cat in r["properties"]["categories"]]
    if layer_id == "cyclones":
        return [r for r in read.records if r["properties"]["eventType"] == "TC"]
    if layer_id == "disasters":
        return [r for r in read.records if r["properties"]["eventType"] != "TC"]
    return read.records


async def build(services: Any, layer_ids: list[str], caps: Caps, plan: str) -> Twin:
    """The layers ``layer_ids`` (known and servable: ``selection.select`` decided) within ``caps``."""
    names = list(dict.fromkeys(LAYERS[lid].feed for lid in layer_ids))
    reads = await read_feeds(services, names)                      # type: ignore[arg-type]
    out = Twin()
    for name in names:
        if reads[name].report is not None:
            out.health.add(reads[name].report)
    records: dict[str, list[dict[str, Any]]] = {}
    for lid in layer_ids:
        layer = LAYERS[lid]
        read = reads[layer.feed]                                   # type: ignore[index]
        if read.unavailable:
            out.not_served.append({"id": lid, "reason": read.unavailable})
        elif read.failed:
            out.not_served.append({"id": lid, "reason": f"its source {read.report.name} did not answer "
                                                         f"({read.report.error}); retry later"})
        elif layer.kind == OVERLAY:
            out.layers[lid] = {"id": lid, "kind": OVERLAY, "title": layer.title, **read.records[0]}
        else:
            records[lid] = _records(lid, read)
    share = allot({lid: len(r) for lid, r in records.items()}, caps.points_per_layer, caps.twin_points)
    for lid, recs in records.items():
        layer, read = LAYERS[lid], reads[LAYERS[lid].feed]        # type: ignore[index]
        n = share[lid]
        total = read.total if read.total is not None and layer.kind != EVENT and lid not in ("disasters", "cyclones") \
            else len(recs)
        cut_by = None
        if total > n:
            cut_by = "pointsPerLayer" if n >= caps.points_per_layer else "twinPoints"
            out.caveats.append(f"Layer {lid}: {n} of {total} records served, cut by the {plan} plan's {cut_by} "
                               f"({caps.points_per_layer if cut_by == 'pointsPerLayer' else caps.twin_points})"
                               + ("; the most important first" if read.dataset else "") + ".")
        body = {"id": lid, "kind": layer.kind, "title": layer.title, "source": read.report.name,
                "license": read.report.license, "count": n, "total": total, "truncated": cut_by is not None,
                "cutBy": cut_by, "type": "FeatureCollection", "features": recs[:n]}
        if read.dataset:
            body["dataset"] = read.dataset
        out.layers[lid] = body
        out.points += n
    out.layers = {lid: out.layers[lid] for lid in layer_ids if lid in out.layers}
    return out
