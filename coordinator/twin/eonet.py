"""NASA EONET v3 open natural events (UPSTREAMS.md §2.1), the source of the ``ev:<category>``
layers.

``/events?status=open`` answers ``{"events": [{"id", "title", "closed", "categories": [{"id",
"title"}], "sources": [{"id", "url"}], "geometry": [{"magnitudeValue", "magnitudeUnit", "date",
"type": "Point"|"Polygon", "coordinates"}, ...]}]}``. ``geometry`` is time-ordered (a storm's
track is one Point per fix): the twin serves the latest, with how many fixes the track has.
An event in several categories is in each of their layers. EONET states no license (NASA
open data) and calls its extents "not official": both are said.

The recorded sample (``samples/eonet/events.json``) is constructed for this project in the
recorded v3 format, not a real recording.
"""
from __future__ import annotations

from typing import Any

from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register

from .records import feature

LICENSE = "unstated (NASA EONET open data)"


def parse_event(e: dict[str, Any]) -> dict[str, Any] | None:
    """One event as a feature at its latest geometry; None for an event with no geometry."""
    track = [g for g in e.get("geometry") or [] if isinstance(g, dict) and g.get("coordinates") is not None]
    if not track:
        return None
    latest = max(track, key=lambda g: g.get("date") or "")
    if latest.get("type") not in ("Point", "Polygon"):
        raise ValueError(f"event {e.get('id')}: geometry type {latest.get('type')!r}")
    value = latest.get("magnitudeValue")
    return feature(e["id"], {"type": latest["type"], "coordinates": latest["coordinates"]}, LICENSE,
                   title=e.get("title"), categories=[c["id"] for c in e.get("categories") or []],
                   date=latest.get("date"), closed=e.get("closed"), trackFixes=len(track),
                   magnitude={"value": value, "unit": latest.get("magnitudeUnit")} if value is not None else None,
                   sources=[{"id": s.get("id"), "url": s.get("url")} for s in e.get("sources") or []],
                   link=e.get("link"))


@register
class Eonet(Source[dict]):
    name = "eonet"
    label = "NASA EONET"
    license = LICENSE
    default_base_url = "https://eonet.gsfc.nasa.gov/api/v3"
    description = "NASA EONET v3 natural events (JSON)"
    options = {"limit": "500"}

    async def fetch(self, query: Query) -> list[dict]:
        doc = await self.get_json("/events", {"status": "open", "limit": self.option("limit")})
        if not isinstance(doc, dict) or not isinstance(doc.get("events"), list):
            raise SourceError("answer is not an EONET event list")
        return [f for e in doc["events"] if (f := parse_event(e)) is not None]
