"""GDACS current events (UPSTREAMS.md §1), GeoJSON from ``geteventlist/EVENTS4APP``."""
from __future__ import annotations

from typing import Any

from ..core.times import iso
from .base import Query, Source, SourceError
from .events import EventRecord, unique
from .registry import register
from .values import finite, iso_utc

LICENSE = "GDACS-terms-attribution"


def _utc(text: Any) -> str | None:
    """GDACS dates are naive UTC strings: served in UTC with a Z, as every time is. One with an
    offset is turned to UTC (``…-05:00`` was served as ``…-05:00Z``, which no reader parses, and
    sorted among the others as text). A date that does not parse as ISO 8601 ("26/10/2026") is
    unknown (None): passed on, it failed the merge with USGS."""
    return iso(iso_utc(text))


def _level(text: Any) -> str | None:
    if not isinstance(text, str) or not text.strip():
        return None
    return text.strip().lower()


def parse_feature(feature: dict[str, Any]) -> EventRecord | None:
    p = feature["properties"]
    if str(p.get("iscurrent", "true")).lower() != "true":
        return None
    etype = str(p["eventtype"]).upper()
    lon, lat = feature["geometry"]["coordinates"][:2]
    bbox = feature.get("bbox")
    urls = p.get("url") or {}
    sev = p.get("severitydata") or {}
    return EventRecord(
        id=f"gdacs:{etype}:{p['eventid']}",
        source="GDACS",
        event_type=etype,
        title=p.get("name") or p.get("eventname") or f"{etype} {p['eventid']}",
        lon=float(lon), lat=float(lat),
        alert_level=_level(p.get("episodealertlevel")) or _level(p.get("alertlevel")),
        episode=str(p["episodeid"]) if p.get("episodeid") is not None else None,
        license=LICENSE,
        from_time=_utc(p.get("fromdate")), to_time=_utc(p.get("todate")),
        updated=_utc(p.get("datemodified")),
        country=p.get("country") or None,
        # The episode's score, as the level is the episode's (the event-wide one can be another band).
        alert_score=_score(p.get("episodealertscore")) if p.get("episodealertlevel") else _score(p.get("alertscore")),
        severity=_severity(sev),
        upstream_bbox=tuple(float(x) for x in bbox) if bbox and len(bbox) == 4 else None,  # type: ignore[arg-type]
        url=urls.get("report") if isinstance(urls, dict) else None,
        upstream_id=f"{etype}{p['eventid']}",
        extra={"eventAlertLevel": _level(p.get("alertlevel")), "upstreamSource": p.get("source") or None,
               "iso3": p.get("iso3") or None},
    )


def _score(raw: Any) -> float | None:
    """The alert score; one that is not a finite number ("high") is unknown."""
    score = finite(raw)
    return None if score is None else float(score)


def _severity(sev: dict) -> dict | None:
    """GDACS's severity, its value null where it is 0: floods (GLoFAS), volcanoes and droughts
    carry 0 for "no measure", which served as a value read as a zero severity. A value that is
    not a finite number ("n/a") is unknown too: passed on, it failed the merge with USGS."""
    if not sev:
        return None
    value = finite(sev.get("severity"))
    return {"value": None if value in (0, 0.0, None) else value, "text": sev.get("severitytext") or None,
            "unit": sev.get("severityunit") or None}


@register
class GdacsSource(Source[EventRecord]):
    name = "gdacs"
    label = "GDACS"
    license = LICENSE
    default_base_url = "https://www.gdacs.org/gdacsapi/api"
    description = "GDACS current hazard alerts (GeoJSON)"
    path = "/events/geteventlist/EVENTS4APP"

    async def fetch(self, query: Query) -> list[EventRecord]:
        doc = await self.get_json(self.path, empty_statuses=(204,))
        if doc is None:  # GDACS answers an empty list with 204 and no body (a JSON null is an error)
            return []
        if not isinstance(doc, dict) or doc.get("type") != "FeatureCollection":
            raise SourceError("answer is not a GeoJSON FeatureCollection")
        out = []
        for feature in doc.get("features") or []:
            rec = parse_feature(feature)
            if rec is not None:
                out.append(rec)
        return unique(out, self.report_name)
