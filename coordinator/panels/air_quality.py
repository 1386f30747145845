"""Air quality: measured station readings from the World Air Quality Index project's station
feeds (WAQI; UPSTREAMS.md §2.2), as each station reported them, never interpolated.

A feed is ``/feed/{city or @uid}?token=`` and answers ``{"status": "ok", "data": {"aqi",
"idx", "attributions", "city": {"name", ...}, "dominentpol", "iaqi": {"pm25": {"v": ...}, ...},
"time": {"s", "tz", "v", "iso"}}}``. Errors come with HTTP 200 as ``{"status": "error",
"data": "Invalid key"}`` (also ``"Unknown station"``, ``"no such station"``), and an unknown
``@uid`` as ``{"status": "ok", "data": {"status": "error", "msg": "Unknown ID"}}``: each is the
feed failing, named with WAQI's words. ``aqi`` is the string ``"-"`` when a station is offline,
``dominentpol`` may be ``""``, and ``time`` may hold only ``tz`` and ``v`` (no ``s``, no ``iso``:
its time unknown) [joostlek/python-waqi tests/fixtures]. The path is asked without a trailing
slash, as that client asks it (``feed/{city}``).

The values in ``iaqi`` are US-EPA AQI sub-indices, not concentrations: each reading says so
(``scale``) instead of giving a unit it does not have. ``t``, ``h``, ``p``, ``w`` and ``dew``
are weather, not air quality, and are left out.

The time is the station's own: ``time.s`` is its local clock time and ``time.tz`` that clock's
UTC offset (UPSTREAMS.md §2.2), served as ``time`` with its offset and as ``timeUtc``; where
``s`` or ``tz`` is missing, ``time.iso`` (local, with its offset) is read instead, and a time
with no offset is unknown. ``time.v`` is never read: in WAQI's feeds it is the local clock
time counted as if it were UTC (Kolkata's ``09:00 +05:30`` has ``v`` 09:00 UTC), so taking it
for an instant would put every station east of Greenwich hours in the future.

A station that stops reporting keeps serving its last reading, so a reading is never passed on
as current on WAQI's word alone: each station and reading carries ``ageS`` (seconds from its
time to the answer's ``asOf``) and ``stale``, true when older than ``STALE_AFTER`` (null when
its time is unknown, or ahead of the clock past ``freshness.CLOCK_SKEW``), and a caveat names the stations whose readings are stale or of unknown
age. A stale reading is still ``measured: true`` (it was measured, then): ``stale`` says it is
not now.

WAQI needs a token (``SIS_SOURCES__WAQI__API_KEY``), sent as the ``token`` query parameter;
without it the answer is degraded naming that setting. Its terms: non-commercial use, show the
attributions (carried on every record). Which feeds are read is the option ``stations``.

The recorded sample (``samples/waqi/feed/jakarta.json``) is a constructed sample in the
recorded WAQI feed format, made for this project, not a real recording.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from coordinator.core.context import ToolContext
from coordinator.core.honesty import Answer, Health
from coordinator.core.registry import Tool, tool
from coordinator.core.times import iso
from coordinator.panels.freshness import CLOCK_SKEW_TEXT, age, ahead, parse_utc, utc_now
from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register

TOOLS: list[Tool] = []

LICENSE = "WAQI terms (non-commercial, attribution required)"
POLLUTANTS = {"pm25": "PM2.5", "pm10": "PM10", "o3": "O3", "no2": "NO2", "so2": "SO2", "co": "CO"}
SCALE = "US EPA AQI sub-index (0-500), not a concentration"
# WAQI station readings are hourly. Allowing an hour for a reading to reach WAQI (the lag is not
# documented) and one late update, a reading older than 3 h has missed at least two hourly
# updates: it says what the air was, not what it is, and is flagged stale.
STALE_AFTER = timedelta(hours=3)
STALE_AFTER_TEXT = f"{STALE_AFTER.total_seconds() / 3600:g} h"


def _utc(text: str | None) -> str | None:
    """An ISO 8601 time with its offset in UTC; None without an offset (it cannot be placed)."""
    t = parse_utc(text)
    return iso(t) if t is not None else None


def station_time(t: Any) -> datetime | None:
    """A feed's ``time`` as an aware local time: ``s`` (local clock, ``"2026-11-25 13:00:00"``)
    at ``tz`` (its offset, ``"+07:00"``), else ``iso``; None when neither places it. Never
    ``v`` (the local clock counted as UTC, see the module's docstring)."""
    if not isinstance(t, dict):
        return None
    s, tz = str(t.get("s") or "").strip(), str(t.get("tz") or "").strip()
    if s and tz:
        local = parse_utc(s.replace(" ", "T", 1) + tz)
        if local is not None:
            return local
    return parse_utc(t.get("iso"))


def _index(v: Any) -> int | float | None:
    """An index value, or None for the offline mark ``"-"`` and anything not a number."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return v
    try:
        return float(v) if "." in str(v) else int(str(v))
    except ValueError:
        return None


def parse_feed(doc: Any, feed: str) -> dict[str, Any]:
    if not isinstance(doc, dict) or doc.get("status") != "ok":
        why = doc.get("data") if isinstance(doc, dict) else None
        raise SourceError(f"WAQI said {doc.get('status') if isinstance(doc, dict) else '?'}"
                          + (f" ({why})" if isinstance(why, str) else ""))
    d = doc["data"]
    if isinstance(d, dict) and d.get("status") == "error":
        # An unknown station id (``@123946``) is answered with an "ok" envelope holding the error:
        # ``{"status": "ok", "data": {"status": "error", "msg": "Unknown ID"}}`` [joostlek/python-waqi
        # tests/fixtures/station_number_feed_@123946.json, read in src/aiowaqi/waqi.py get_by_name].
        raise SourceError(f"WAQI said error ({d.get('msg') or d.get('data') or 'no reason given'})")
    local = station_time(d.get("time"))
    attributions = [{"name": a.get("name"), "url": a.get("url")} for a in d.get("attributions") or []]
    station = {"station": d["city"]["name"], "stationId": d.get("idx"), "feed": feed,
               "time": local.isoformat() if local is not None else None,
               "timeUtc": iso(local) if local is not None else None,
               "aqi": {"value": _index(d.get("aqi")), "scale": "US EPA AQI (0-500)"},
               "dominantPollutant": POLLUTANTS.get(str(d.get("dominentpol") or "").lower()),
               "attributions": attributions, "license": LICENSE}
    readings = []
    for key, name in POLLUTANTS.items():
        v = (d.get("iaqi") or {}).get(key)
        if isinstance(v, dict) and _index(v.get("v")) is not None:
            readings.append({"station": station["station"], "stationId": station["stationId"],
                             "time": station["time"], "timeUtc": station["timeUtc"], "pollutant": name,
                             "value": _index(v["v"]), "scale": SCALE, "measured": True,
                             "attributions": attributions, "license": LICENSE})
    return {**station, "readings": readings}


@register
class Waqi(Source[dict]):
    name = "waqi"
    label = "WAQI"
    license = LICENSE
    default_base_url = "https://api.waqi.info"
    description = "World Air Quality Index station feeds (JSON, needs a token)"
    needs_key = True
    demo_api_key = "demo"        # --demo: its recorded sample answers
    options = {"stations": "jakarta"}           # feeds: city names or @uid, comma-separated

    async def fetch(self, query: Query) -> list[dict]:
        feeds = [f.strip() for f in str(self.option("stations")).split(",") if f.strip()]

        async def one(part: str) -> list[dict]:
            feed = part.removeprefix("feed ")
            return [parse_feed(await self.get_json(f"/feed/{feed}", {"token": self.api_key}), feed)]

        return await self.read_parts([f"feed {f}" for f in feeds], one)


@tool(TOOLS, name="air_quality", title="Air quality (measured)", routes={"public": "/air-quality"},
      description="Measured air quality at monitoring stations: for each station its name, the time it "
                  f"reported (its own and UTC) and its age, flagged stale past {STALE_AFTER_TEXT}, and each "
                  "pollutant's value on the scale it is given in (US EPA AQI sub-indices, not concentrations). "
                  "Station readings only, never interpolated.",
      params=(), scopes=("earth.air-quality",), cache_ttl_s=600, tags=("panels",))
async def air_quality(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    read = await ctx.services.sources["waqi"].read(Query())
    now = utc_now()
    aged = [{**s, **age(parse_utc(s["timeUtc"]), now, STALE_AFTER)} for s in read.records]
    readings = [{**r, "ageS": s["ageS"], "stale": s["stale"]} for s in aged for r in s["readings"]]
    stations = [{k: v for k, v in s.items() if k != "readings"} for s in aged]
    caveats = ["Readings are what each station measured, at its place and time; nothing is interpolated, so "
               "air between stations is unknown.",
               "Values are US EPA AQI sub-indices (0-500), not concentrations in µg/m³ or ppm.",
               "WAQI data is for non-commercial use; show each record's attributions."]
    offline = [s["station"] for s in stations if s["aqi"]["value"] is None]
    if offline:
        caveats.append(f"No current index from {', '.join(offline)} (offline): unknown, not clean air.")
    stale = [s["station"] for s in stations if s["stale"]]
    if stale:
        caveats.append(f"The readings of {', '.join(stale)} are older than {STALE_AFTER_TEXT} at {iso(now)} "
                       "(stale: true, their age in ageS): they say what the air was at their time, not what it "
                       "is now.")
    early = [s["station"] for s in stations if ahead(parse_utc(s["timeUtc"]), now)]
    if early:
        caveats.append(f"The time of {', '.join(early)} is more than {CLOCK_SKEW_TEXT} after {iso(now)}: a time "
                       "that cannot be right, so how old its readings are is unknown (stale: null), and they may "
                       "not be current.")
    untimed = [s["station"] for s in stations if s["stale"] is None and s["station"] not in early]
    if untimed:
        caveats.append(f"The time of {', '.join(untimed)} could not be read: how old its readings are is unknown "
                       "(stale: null), so they may not be current.")
    return Answer({"count": len(readings) if read.report.ok else None, "readings": readings,
                   "stations": stations, "asOf": iso(now), "staleAfterS": int(STALE_AFTER.total_seconds())},
                  caveats=caveats, health=Health(read.reports))
