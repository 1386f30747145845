"""Upcoming launches: Launch Library 2 by The Space Devs (UPSTREAMS.md §2.3).

``/2.2.0/launch/upcoming/?limit=`` answers a page ``{"count", "next", "previous", "results":
[...]}``; each launch has ``id``, ``name``, ``status{abbrev}``, ``net``, ``window_start``,
``window_end``, ``probability``, ``launch_service_provider{name}``, ``rocket.configuration
{full_name}``, ``mission{name, type, orbit{abbrev}}|null`` and ``pad{name, latitude,
longitude, location{name, country_code}}``. In 2.2.0 the pad's latitude and longitude are
strings ("28.56194122"), in 2.3.0 numbers: both are read. A launch is placed at its pad.

The path is asked without its trailing slash (the fake upstream serves files, not folders);
the real server redirects it to the slash form (followed; unverified). The free tier allows 15
calls an hour, so the twin keeps a read for 10 minutes (``feeds``). No license is stated.

The recorded sample (``samples/launch_library/launch/upcoming.json``) is constructed for this
project in the 2.2.0 format, not a real recording.
"""
from __future__ import annotations

from typing import Any

from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register

from .records import point

LICENSE = "unstated (The Space Devs, Launch Library 2)"


def parse_launch(r: dict[str, Any]) -> dict[str, Any] | None:
    pad = r.get("pad") or {}
    if pad.get("latitude") in (None, "") or pad.get("longitude") in (None, ""):
        return None                       # no pad position: not placed rather than placed at 0,0
    mission = r.get("mission") or {}
    config = (r.get("rocket") or {}).get("configuration") or {}
    return point(r["id"], float(pad["longitude"]), float(pad["latitude"]), LICENSE,
                 name=r.get("name"), net=r.get("net"), windowStart=r.get("window_start"),
                 windowEnd=r.get("window_end"), status=(r.get("status") or {}).get("abbrev"),
                 probability=r.get("probability"), provider=(r.get("launch_service_provider") or {}).get("name"),
                 rocket=config.get("full_name") or config.get("name"), mission=mission.get("name"),
                 orbit=(mission.get("orbit") or {}).get("abbrev"), pad=pad.get("name"),
                 location=(pad.get("location") or {}).get("name"), webcastLive=r.get("webcast_live"))


@register
class LaunchLibrary(Source[dict]):
    name = "launch_library"
    label = "Launch Library 2"
    license = LICENSE
    default_base_url = "https://ll.thespacedevs.com/2.2.0"
    description = "Launch Library 2 upcoming launches (JSON)"
    options = {"limit": "50"}

    async def fetch(self, query: Query) -> list[dict]:
        doc = await self.get_json("/launch/upcoming", {"limit": self.option("limit"), "mode": "normal"})
        if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
            raise SourceError("answer is not a Launch Library page")
        return [f for r in doc["results"] if (f := parse_launch(r)) is not None]
