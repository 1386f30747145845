"""Where the International Space Station is now: wheretheiss.at (UPSTREAMS.md §2.3).

``/v1/satellites/25544`` answers ``{"name": "iss", "id": 25544, "latitude", "longitude",
"altitude" (km), "velocity" (km/h), "visibility": "daylight"|"eclipsed", "footprint" (km),
"timestamp" (s, UTC), "units": "kilometers"}``. The position is the upstream's computed one at
``timestamp``; the station moves about 7.7 km every second, so the answer says when it was.
No license is stated by the upstream. Limits are unverified.

The recorded sample (``samples/wheretheiss/satellites/25544.json``) is the documented example.
"""
from __future__ import annotations

from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register
from coordinator.sources.values import epoch_utc

from .records import point

LICENSE = "unstated (wheretheiss.at)"
NORAD_ID = 25544


@register
class WhereTheIss(Source[dict]):
    name = "wheretheiss"
    label = "wheretheiss.at"
    license = LICENSE
    default_base_url = "https://api.wheretheiss.at/v1"
    description = "wheretheiss.at satellite position (JSON)"

    async def fetch(self, query: Query) -> list[dict]:
        doc = await self.get_json(f"/satellites/{NORAD_ID}")
        if not isinstance(doc, dict) or "latitude" not in doc:
            raise SourceError("answer is not a wheretheiss.at position")
        if doc.get("units", "kilometers") != "kilometers":
            raise SourceError(f"units {doc.get('units')!r}, not kilometers")
        # When the position was: unknown (null) where the timestamp is not a number Python's
        # clock functions place (10**20 raised OverflowError and failed the twin with a 500).
        at = epoch_utc(doc["timestamp"])
        return [point(f"norad:{doc.get('id', NORAD_ID)}", doc["longitude"], doc["latitude"], LICENSE,
                      name="ISS", at=at, altitudeKm=float(doc["altitude"]), velocityKmH=float(doc["velocity"]),
                      visibility=doc.get("visibility"), footprintKm=doc.get("footprint"))]
