"""The normalised hazard event both event adapters produce."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("sis.sources")

# Ordering of alert levels for escalation. GDACS uses green/orange/red, USGS
# PAGER green/yellow/orange/red. A missing level (None) has no rank: an event
# going from or to "unknown" is neither escalated nor de-escalated.
LEVEL_RANK = {"green": 0, "yellow": 1, "orange": 2, "red": 3}

EVENT_TYPES = {
    "EQ": "earthquake", "TC": "tropical cyclone", "FL": "flood", "VO": "volcano",
    "DR": "drought", "WF": "wildfire", "TS": "tsunami",
}


@dataclass
class EventRecord:
    id: str
    source: str
    event_type: str
    title: str
    lon: float
    lat: float
    alert_level: str | None
    episode: str | None
    license: str
    from_time: str | None = None
    to_time: str | None = None
    updated: str | None = None
    country: str | None = None
    alert_score: float | None = None
    severity: dict[str, Any] | None = None
    upstream_bbox: tuple[float, float, float, float] | None = None
    url: str | None = None
    upstream_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    also: list["EventRecord"] = field(default_factory=list)

    def provenance(self) -> list[dict[str, Any]]:
        out = []
        for rec in [self, *self.also]:
            p = {"source": rec.source, "upstreamId": rec.upstream_id, "license": rec.license}
            if rec.url:
                p["url"] = rec.url
            if rec.episode is not None:
                p["episode"] = rec.episode
            out.append(p)
        return out


def rank(level: str | None) -> int | None:
    return LEVEL_RANK.get(level) if level else None


def unique(records: list[EventRecord], source: str) -> list[EventRecord]:
    """``records`` with each id once, the first kept: an upstream that lists a feature twice
    (GDACS and USGS have) would otherwise serve and count one event as two. What is dropped is
    logged (no answer counts an adapter's dropped records)."""
    seen: set[str] = set()
    out = []
    for r in records:
        if r.id in seen:
            continue
        seen.add(r.id)
        out.append(r)
    if len(out) < len(records):
        log.info("%s: dropped %d repeated record(s) of the same id", source, len(records) - len(out))
    return out
