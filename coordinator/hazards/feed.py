"""Reading the event sources, merging them and de-duplicating earthquakes.

GDACS relays earthquakes from the USGS NEIC, so the same quake arrives twice.
A GDACS earthquake and a USGS one are the same event when they are within
``MATCH_KM`` and ``MATCH_S`` of each other and their magnitudes differ by at
most ``MATCH_MAG``; the GDACS record is kept (it carries the impact alert), the
USGS one becomes part of its provenance.
"""
from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

from coordinator.core.honesty import Health
from ..sources import Sources
from ..sources.events import EVENT_TYPES, EventRecord, unique
from ..sources.values import finite, iso_utc

MATCH_KM = 100.0
MATCH_S = 180.0
MATCH_MAG = 0.5


@dataclass
class Feed:
    events: list[EventRecord]
    health: Health


def _km(a: EventRecord, b: EventRecord) -> float:
    la1, la2 = math.radians(a.lat), math.radians(b.lat)
    dla, dlo = la2 - la1, math.radians(b.lon - a.lon)
    h = math.sin(dla / 2) ** 2 + math.cos(la1) * math.cos(la2) * math.sin(dlo / 2) ** 2
    return 2 * 6371.0 * math.asin(min(1.0, math.sqrt(h)))


def _ts(text: str | None) -> float | None:
    """A record's time in seconds; None when absent or unreadable (never raises)."""
    t = iso_utc(text)
    return None if t is None else t.timestamp()


def _same_quake(g: EventRecord, u: EventRecord) -> bool:
    """Whether a GDACS and a USGS record are one quake. A time or position that cannot be read
    makes them not the same (both are served); a magnitude that cannot be read does not stop
    the match (time and place decide). Never raises: an odd value of one record failed the
    whole merge, and with it every answer over the feed, with a 500."""
    tg, tu = _ts(g.from_time), _ts(u.from_time)
    try:
        if tg is None or tu is None or abs(tg - tu) > MATCH_S or not _km(g, u) <= MATCH_KM:
            return False
    except (TypeError, ValueError, ArithmeticError):
        return False
    mg = finite((g.severity or {}).get("value"))
    mu = finite((u.severity or {}).get("value"))
    return mg is None or mu is None or abs(mg - mu) <= MATCH_MAG


def merge(gdacs: list[EventRecord], usgs: list[EventRecord]) -> list[EventRecord]:
    """GDACS's events, then USGS's that are not one of GDACS's quakes; an id met again (an
    upstream listing a feature twice) is dropped, the first kept."""
    gdacs, usgs = unique(gdacs, "GDACS"), unique(usgs, "USGS")
    merged = list(gdacs)
    quakes = [e for e in gdacs if e.event_type == "EQ"]
    for u in usgs:
        match = next((g for g in quakes if _same_quake(g, u)), None)
        if match is None:
            merged.append(u)
        else:
            match.also.append(u)
    return merged


async def read_feed(sources: Sources) -> Feed:
    gdacs, usgs = await asyncio.gather(sources["gdacs"].read(), sources["usgs"].read())
    health = Health([gdacs.report, usgs.report])
    return Feed(merge(gdacs.records, usgs.records), health)


def _wrap(lon: float) -> float:
    return round((lon + 180.0) % 360.0 - 180.0, 6) if not -180.0 <= lon <= 180.0 else round(lon, 6)


def square(lon: float, lat: float, side_deg: float) -> list[float]:
    """The fixed square ``[w, s, e, n]`` around an event's point. Near 180 deg it crosses the
    antimeridian and is written as RFC 7946 section 5.2 writes such a box, west greater
    than east (a square cut at 180 deg would miss the ground beyond it); the latitudes stop
    at the poles."""
    h = side_deg / 2
    return [_wrap(lon - h), round(max(-90.0, lat - h), 6), _wrap(lon + h), round(min(90.0, lat + h), 6)]


def parts(box) -> list[tuple[float, float, float, float]]:  # noqa: ANN001
    """``box`` as boxes that do not cross the antimeridian: itself, or its two sides."""
    w, s, e, n = box
    return [(w, s, e, n)] if w <= e else [(w, s, 180.0, n), (-180.0, s, e, n)]


def holds(box, lon: float, lat: float) -> bool:  # noqa: ANN001
    return any(w <= lon <= e and s <= lat <= n for w, s, e, n in parts(box))


def meets(a, b) -> bool:  # noqa: ANN001
    """Whether two boxes share ground, either of them across the antimeridian."""
    return any(aw <= be and ae >= bw and as_ <= bn and an >= bs
               for aw, as_, ae, an in parts(a) for bw, bs, be, bn in parts(b))


def box_geometry(box) -> dict[str, Any]:  # noqa: ANN001
    """The box as GeoJSON: a Polygon, or a MultiPolygon of its two sides when it crosses
    the antimeridian (RFC 7946 section 3.1.9)."""
    rings = [[[[w, s], [e, s], [e, n], [w, n], [w, s]]] for w, s, e, n in parts(box)]
    return {"type": "Polygon", "coordinates": rings[0]} if len(rings) == 1 else \
        {"type": "MultiPolygon", "coordinates": rings}


def event_json(e: EventRecord, *, square_deg: float, extent_bbox: bool = False) -> dict[str, Any]:
    """An event as served. The direct family serves a fixed square around the
    event's point; ``extent_bbox`` (the legacy and credentialed families) serves the upstream's own
    rectangle where it has one with an extent."""
    bbox = square(e.lon, e.lat, square_deg)
    bbox_kind = "fixed-square"
    if extent_bbox and e.upstream_bbox and (e.upstream_bbox[0] < e.upstream_bbox[2]
                                           and e.upstream_bbox[1] < e.upstream_bbox[3]):
        bbox, bbox_kind = [round(x, 6) for x in e.upstream_bbox], "upstream-extent"
    out: dict[str, Any] = {
        "id": e.id,
        "type": e.event_type,
        "typeName": EVENT_TYPES.get(e.event_type, e.event_type),
        "title": e.title,
        "alertLevel": e.alert_level,
        "alertScore": e.alert_score,
        "point": {"type": "Point", "coordinates": [e.lon, e.lat]},
        "bbox": bbox,
        "posQuality": "modeled-bbox",
        "bboxKind": bbox_kind,
        "country": e.country,
        "from": e.from_time,
        "to": e.to_time,
        "updated": e.updated,
        "severity": e.severity,
        "episode": e.episode,
        "license": e.license,
        "provenance": e.provenance(),
    }
    if e.also:
        out["alsoKnownAs"] = [a.id for a in e.also]
    out.update({k: v for k, v in e.extra.items() if v is not None})
    return out
