"""USGS earthquake summary GeoJSON (UPSTREAMS.md §2)."""
from __future__ import annotations

from typing import Any

from .base import Query, Source, SourceError
from .events import EventRecord, unique
from .registry import register
from .values import epoch_utc, finite

LICENSE = "public-domain"


def _iso(ms: Any) -> str | None:
    """USGS times are milliseconds since the epoch; one that is not a number, or past what
    Python's clock functions place (10**20), is unknown: the quake is still served."""
    ms = finite(ms)
    return None if ms is None else epoch_utc(ms / 1000)


def parse_feature(feature: dict[str, Any]) -> EventRecord | None:
    p = feature["properties"]
    if p.get("status") == "deleted" or (p.get("type") or "earthquake") != "earthquake":
        return None
    lon, lat = feature["geometry"]["coordinates"][:2]
    depth = finite(feature["geometry"]["coordinates"][2]) if len(feature["geometry"]["coordinates"]) > 2 else None
    mag = finite(p.get("mag"))    # a magnitude that is not a finite number ("big") is unknown
    return EventRecord(
        id=f"usgs:{feature['id']}",
        source="USGS",
        event_type="EQ",
        title=p.get("title") or f"M {mag} - {p.get('place')}",
        lon=float(lon), lat=float(lat),
        alert_level=p.get("alert") or None,   # PAGER level; null means PAGER has not rated it
        episode=str(p.get("updated")) if p.get("updated") is not None else None,
        license=LICENSE,
        from_time=_iso(p.get("time")), to_time=_iso(p.get("time")), updated=_iso(p.get("updated")),
        severity={"value": mag, "text": f"Magnitude {mag} {p.get('magType') or ''}".strip()
                  + (f", depth {depth} km" if depth is not None else ", depth unknown"),
                  "unit": p.get("magType")} if mag is not None else None,
        url=p.get("url"),
        upstream_id=feature["id"],
        extra={"magnitude": mag, "depthKm": depth, "tsunami": bool(p.get("tsunami")),
               "reviewStatus": p.get("status"), "place": p.get("place")},
    )


@register
class UsgsSource(Source[EventRecord]):
    name = "usgs"
    label = "USGS"
    license = LICENSE
    default_base_url = "https://earthquake.usgs.gov/earthquakes/feed/v1.0/summary"
    description = "USGS earthquake summary feeds (GeoJSON)"
    options = {"feed": "4.5_week"}   # {significant|4.5|2.5|1.0|all}_{hour|day|week|month}

    async def fetch(self, query: Query) -> list[EventRecord]:
        doc = await self.get_json(f"/{self.option('feed')}.geojson")
        if not isinstance(doc, dict) or doc.get("type") != "FeatureCollection":
            raise SourceError("answer is not a GeoJSON FeatureCollection")
        records = [r for f in doc.get("features") or [] if (r := parse_feature(f)) is not None]
        return unique(records, self.report_name)
