"""Coral bleaching alert: NOAA Coral Reef Watch's 7-day maximum Bleaching Alert Area inside a
bbox, in its five steps (UPSTREAMS.md §4).

Read from ERDDAP (dataset ``noaacrwbaa7dDaily``, the same 0.05 deg grid as the
``ct5km_baa5-max-7d`` NetCDF files) as griddap JSON: ``{"table": {"columnNames": ["time",
"latitude", "longitude", "bleaching_alert_area"], "rows": [...]}}``, the newest day only
(``[(last)]``). Each grid cell is served with its step named: 0 No Stress, 1 Bleaching Watch, 2
Bleaching Warning, 3 Alert Level 1, 4 Alert Level 2. Codes 5-7 of the ``baa5`` product (Alert
Levels 3-5) are named as such with a caveat that the mapping is unverified; a null or the fill
value 251 (land, no data) is unknown, never "No Stress".

The product is daily and dated on the last day of its 7-day window; ERDDAP keeps serving its
newest day when updates stop, so the answer names the product's ``date``, its age (``ageS``, to
the answer's ``asOf``) and ``stale``, true past ``STALE_AFTER`` (null when the date cannot be
read, or is ahead of the clock past ``freshness.CLOCK_SKEW``), with a caveat saying the alerts are of that window, not now.

The recorded sample (``samples/crw/griddap/noaacrwbaa7dDaily.json``) is a constructed sample in
ERDDAP's griddap JSON format, made for this project, not a real recording: 25 cells off north
Bali (115-115.25 E, 8.25-8 S), one of them land (null). The fake serves it whatever the query.
"""
from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any
from urllib.parse import quote

from coordinator.core.context import ToolContext
from coordinator.core.honesty import Answer, Health, License
from coordinator.core.registry import Tool, bbox, tool
from coordinator.core.times import iso
from coordinator.panels.freshness import CLOCK_SKEW_TEXT, age, ahead, parse_utc, utc_now
from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register

TOOLS: list[Tool] = []

LICENSE = License.PUBLIC_DOMAIN.value
STEPS = {0: "No Stress", 1: "Bleaching Watch", 2: "Bleaching Warning", 3: "Alert Level 1", 4: "Alert Level 2"}
BAA5_EXTRA = {5: "Alert Level 3", 6: "Alert Level 4", 7: "Alert Level 5"}     # mapping UNVERIFIED
FILL = 251
VARIABLE = "bleaching_alert_area"
# The product is daily (NOAA: "updated daily and dated on the last day of the 7-day period"): day
# D's is stamped D 12:00 UTC on ERDDAP and posted during D+1 (that lag is assumed, not documented),
# so until D+1's is posted (during D+2) D's is the newest there is, up to the end of D+2, 60 h
# after its stamp. Older than that, at least one daily update is missing: not the current alerts.
STALE_AFTER = timedelta(hours=60)


def alert(code: Any) -> dict[str, Any]:
    """A cell's alert: its code and its step's name, or unknown (land, fill, no data)."""
    if code is None or code == FILL or isinstance(code, float) and code != code:
        return {"code": None, "name": "unknown (land or no data)"}
    code = int(code)
    if code in STEPS:
        return {"code": code, "name": STEPS[code], "step": code}
    if code in BAA5_EXTRA:
        return {"code": code, "name": BAA5_EXTRA[code], "step": 4, "unverified": True}
    return {"code": code, "name": "unknown code", "step": None}


def parse_table(doc: Any) -> list[dict[str, Any]]:
    table = doc["table"]
    names = table["columnNames"]
    if VARIABLE not in names or "latitude" not in names or "longitude" not in names:
        raise SourceError(f"answer is not griddap JSON of {VARIABLE}")
    ti, yi, xi, vi = (names.index(n) if n in names else None for n in ("time", "latitude", "longitude", VARIABLE))
    return [{"latitude": float(r[yi]), "longitude": float(r[xi]), "date": (r[ti] if ti is not None else None),
             "alert": alert(r[vi]), "license": LICENSE} for r in table["rows"]]


@register
class CoralReefWatch(Source[dict]):
    name = "crw"
    label = "NOAA Coral Reef Watch"
    license = LICENSE
    default_base_url = "https://coastwatch.noaa.gov/erddap"
    description = "NOAA Coral Reef Watch 7-day max Bleaching Alert Area (ERDDAP griddap JSON)"
    options = {"dataset": "noaacrwbaa7dDaily", "latitude_descending": "true"}

    async def fetch(self, query: Query) -> list[dict]:
        w, s, e, n = query.bbox
        lat = f"[({n}):1:({s})]" if str(self.option("latitude_descending")).lower() == "true" else f"[({s}):1:({n})]"
        q = f"{VARIABLE}[(last)]{lat}[({w}):1:({e})]"
        doc = await self.get_json(f"/griddap/{self.option('dataset')}.json?{quote(q, safe='')}")
        return [c for c in parse_table(doc) if w <= c["longitude"] <= e and s <= c["latitude"] <= n]


@tool(TOOLS, name="coral", title="Coral bleaching alert", routes={"public": "/coral"},
      description="NOAA Coral Reef Watch bleaching alert (7-day maximum) for each 0.05 deg cell inside a bbox, "
                  "in its five steps: No Stress, Bleaching Watch, Bleaching Warning, Alert Level 1, Alert Level 2; "
                  "with the product's date and age, flagged stale when a daily update is missing.",
      params=(bbox(),), scopes=("earth.coral",), cache_ttl_s=3600, tags=("panels",))
async def coral(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    read = await ctx.services.sources["crw"].read(Query(bbox=params["bbox"]))
    now = utc_now()
    cells = read.records
    date = cells[0]["date"] if cells else None
    fresh = age(parse_utc(date), now, STALE_AFTER) if cells else {"ageS": None, "stale": None}
    known = [c for c in cells if c["alert"].get("step") is not None]     # a code outside the table is unknown too
    highest = max(known, key=lambda c: c["alert"]["code"])["alert"] if known else None
    counts = Counter(c["alert"]["name"] for c in cells)
    caveats = ["Alerts are satellite sea-surface heat stress over 5 km cells, not observed bleaching; a cell "
               "over land or without data is unknown.",
               "Steps: 0 No Stress, 1 Bleaching Watch, 2 Bleaching Warning, 3 Alert Level 1, 4 Alert Level 2."]
    if any(c["alert"].get("unverified") for c in cells):
        caveats.append("Codes 5-7 (Alert Levels 3-5 of the baa5 product) are named by an unverified mapping.")
    if read.report.ok and not known:
        caveats.append("No cell in this bbox has a known alert: unknown, not No Stress.")
    if fresh["stale"]:
        caveats.append(f"The product is dated {date}, {fresh['ageS'] / 86400:.1f} days before {iso(now)} "
                       "(stale: true): Coral Reef Watch updates it daily, so at least one update is missing here "
                       "and these alerts are of the 7 days ending on its date, not current.")
    elif cells and ahead(parse_utc(date), now):
        caveats.append(f"The product is dated {date}, more than {CLOCK_SKEW_TEXT} after {iso(now)}: a date that "
                       "cannot be right, so how old these alerts are is unknown (stale: null).")
    elif cells and fresh["stale"] is None:
        caveats.append("The product's date could not be read: how old these alerts are is unknown (stale: null).")
    return Answer({"date": date,
                   "highest": highest, "byStep": dict(counts) if read.report.ok else None,
                   "cells": cells, "asOf": iso(now), **fresh,
                   "staleAfterS": int(STALE_AFTER.total_seconds())},
                  caveats=caveats, health=Health([read.report]))
