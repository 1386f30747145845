"""event_brief: exposure, lifelines, condition and observation of one hazard event.

The event's area is the fixed square the direct family serves as its modelled bbox
(``SIS_EVENT_SQUARE_DEG`` on a side around the event's point), in both families: it is the
same ground whatever family asks, so a brief's figures do not change with the route, and it
is never the hazard's extent. Every figure is ``{value, confidence, source}``; a source that
did not answer makes its figures unknown (null), never zero, and the brief degraded, so it is
not cached. A healthy brief is cached 30 minutes through the pipeline, one computation per id
however many ask at once (``cache_ttl_s``, single flight); a cold one is waited for 60 s at most.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import asyncio

from coordinator.core.context import ToolContext
from coordinator.core.honesty import Answer, Confidence, Health, SourceReport, figure
from coordinator.core.registry import STRING, Param, Tool, tool
from coordinator.core.times import iso
from coordinator.features import store
from coordinator.features.classes import INFRASTRUCTURE
from coordinator.hazards.feed import parts, square
from coordinator.panels import fires as fires_panel
from coordinator.sites import ground as site_ground
from coordinator.sites import population
from coordinator.sources.base import Query
from . import counts, coverage, event, lifelines

TOOLS: list[Tool] = []
TOP_CATEGORIES = 25
SEEN = "seen-layer"

HIGH, LOW, UNKNOWN = Confidence.HIGH, Confidence.LOW, Confidence.UNKNOWN

CAVEATS = [
    "The area is a fixed square around the event's point (area.sideDeg on a side), not the hazard's extent and not "
    "an affected-area polygon: figures count what lies in the square.",
    "Counts of places, roads and structures are of what is mapped in the loaded datasets: floors, not totals. A "
    "count that found none is unknown (null), not zero.",
    "Population is a gridded estimate, spread evenly over each grid cell; cells without a value are not counted.",
    "Fire detections are satellite hot spots of the last 24 h at overpass times; none detected is unknown, not no "
    "fire.",
    "The alert history lists the changes the service's poller recorded (new, escalated, deescalated, resolved); "
    "an episode that did not change the alert level is not a change.",
]


def _count(n: int | None, source: str, **extra: Any) -> dict[str, Any]:
    """A count of mapped things: none found is unknown (none mapped), not zero."""
    if n is None:
        return figure(None, UNKNOWN, source=source, **extra)
    if n == 0:
        return figure(None, UNKNOWN, source=source, note="none mapped: unknown, not zero", **extra)
    return figure(n, LOW, source=source, note="mapped features only: a floor", **extra)


async def _places(ctx: ToolContext, box) -> tuple[dict[str, int] | None, SourceReport]:  # noqa: ANN001
    v, report = await site_ground.covering(ctx.services.db, store.PLACES_KIND, box)
    if v is None:
        return None, report
    return await counts.by_prop(ctx.services.db, v.id, "place", "category", box), report


async def _osm(ctx: ToolContext, box) -> tuple[tuple[dict, dict] | None, SourceReport]:  # noqa: ANN001
    v, report = await site_ground.covering(ctx.services.db, store.OSM_KIND, box)
    if v is None:
        return None, report
    db = ctx.services.db
    return (await counts.by_prop(db, v.id, "road", "highway", box),
            await counts.by_class(db, v.id, INFRASTRUCTURE, box)), report


async def _population(ctx: ToolContext, box) -> tuple[dict[str, Any], SourceReport]:  # noqa: ANN001
    v, report = await site_ground.covering(ctx.services.db, population.KIND, box)
    if v is None:
        return figure(None, UNKNOWN, source=report.name), report
    try:
        grid = site_ground.population_grid(ctx.services.settings.data_dir, v)
        total = await asyncio.to_thread(lambda: population.sum_box(grid.window(box), box))
    except (OSError, ValueError) as exc:
        report = SourceReport(report.name, report.license, ok=False, error=f"the grid cannot be read: {exc}")
        return figure(None, UNKNOWN, source=report.name), report
    if total.no_value_share > 0.999:
        return figure(None, UNKNOWN, source=report.name, note="the grid has no value over this area"), report
    conf = LOW if total.no_value_share > 0.05 else HIGH
    return figure(round(total.people), conf, source=report.name, areaKm2=round(total.area_km2, 1),
                  noValueShare=round(total.no_value_share, 4), cellKm2=round(total.cell_km2, 5)), report


async def _fires(ctx: ToolContext, box) -> tuple[dict[str, Any], SourceReport]:  # noqa: ANN001
    src = ctx.services.sources["firms"]
    read = await src.read(Query(bbox=tuple(box)))
    if not read.report.ok:
        return figure(None, UNKNOWN, source=read.report.name), read.report
    now = fires_panel.utc_now()
    since = now - fires_panel.WINDOW
    rows, _ = fires_panel.in_window(read.records, now)
    if not rows:
        return figure(None, UNKNOWN, source=read.report.name, note="none detected: unknown, not no fire",
                      window={"from": iso(since), "to": iso(now)}), read.report
    frp = [r["frpMW"] for r in rows if r["frpMW"] is not None]
    return figure(len(rows), HIGH, source=read.report.name, window={"from": iso(since), "to": iso(now)},
                  newest=max(r["detectedAt"] for r in rows), maxFrpMW=max(frp) if frp else None,
                  product=src.option("product"), license=fires_panel.LICENSE), read.report


async def _seen(ctx: ToolContext, box) -> tuple[dict[str, Any], SourceReport]:  # noqa: ANN001
    cov = await coverage.covered(ctx.services.db, box)
    report = SourceReport(SEEN, "SIS-derived", ok=True, records=cov.cells)
    return figure(cov.cells, HIGH, source=SEEN, unit="swept H3 cells (resolution 10)",
                  coveredKm2=round(cov.covered_km2, 3), areaShare=round(cov.covered_km2 / cov.area_km2, 6)
                  if cov.area_km2 else None,
                  note="swept and approved ground only; unswept ground says nothing of what stands there"), report


def _lifelines(osm: tuple[dict, dict] | None, places: dict[str, int] | None, osm_src: str,
               places_src: str) -> dict[str, Any]:
    roads, structures = osm if osm is not None else (None, None)
    split = lifelines.split(places) if places is not None else None
    power = None if structures is None else {k: v for k, v in structures.items() if k != "comm_tower"}
    out = {
        "roads": _count(None if roads is None else sum(roads.values()), osm_src,
                        byClass=dict(sorted(roads.items())) if roads else None),
        "power": _count(None if power is None else sum(power.values()), osm_src,
                        byClass=dict(sorted(power.items())) if power else None),
        "communication": _count(None if structures is None else structures.get("comm_tower", 0), osm_src),
    }
    for kind in ("health", "education"):
        cats = split[kind] if split is not None else None
        out[kind] = _count(None if cats is None else sum(cats.values()), places_src,
                           byCategory=dict(sorted(cats.items())) if cats else None)
    return out


def _exposure_places(places: dict[str, int] | None, src: str) -> dict[str, Any]:
    if places is None:
        return {"total": figure(None, UNKNOWN, source=src), "byCategory": figure(None, UNKNOWN, source=src)}
    top = sorted(places.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = dict(top[:TOP_CATEGORIES])
    rest = sum(n for _, n in top[TOP_CATEGORIES:])
    if rest:
        shown["other"] = rest
    total = sum(places.values())
    return {"total": _count(total, src),
            "byCategory": figure(shown, LOW, source=src, categories=len(places)) if total else
            figure(None, UNKNOWN, source=src, note="none mapped: unknown, not zero")}


def _condition(found: event.Found, changes: list | None, seen: dict, hist: SourceReport) -> dict[str, Any]:
    rec, stored = found.record, found.stored
    src = rec.source if rec is not None else hist.name
    level = rec.alert_level if rec is not None else (stored.alert_level if stored is not None else None)
    episode = rec.episode if rec is not None else (stored.episode if stored is not None else None)
    live = HIGH if rec is not None else LOW     # from the history: as last polled
    return {
        "active": figure(found.active, HIGH if rec is not None else (LOW if stored is not None else UNKNOWN),
                         source=src),
        "alertLevel": figure(level, live if level else UNKNOWN, source=src,
                             **({"note": "the upstream has not rated this event"} if level is None else {})),
        "alertScore": figure(rec.alert_score if rec and rec.alert_score is not None else None,
                             HIGH if rec is not None and rec.alert_score is not None else UNKNOWN, source=src),
        "episode": figure(episode, live if episode else UNKNOWN, source=src),
        "history": figure(changes, HIGH if changes is not None else UNKNOWN, source=hist.name, **seen),
    }


@tool(TOOLS, name="event_brief", title="Event brief",
      description="A brief of one hazard event (id from hazard_events): exposure (population from the loaded "
                  "population grid, places by category), lifelines (roads by class, power and communication "
                  "structures, health and education places), condition (alert level and its recorded history) and "
                  "observation (fire detections, seen-layer coverage, the upstream's latest update) over the event's "
                  "modelled square; every figure {value, confidence, source}; caveats first; cached 30 min.",
      params=(Param("id", STRING, "Event id as hazard_events gives it (gdacs:TC:1001214, usgs:us7000cbyq)",
                    required=True, pattern=r"^(gdacs:[A-Z]{2}:[0-9]{1,12}|usgs:[a-z0-9]{2,30})$", max_length=40),),
      routes={"earth": "/event-brief", "legacy": "/event-brief"}, cache_ttl_s=1800, cold_bound_s=60,
      http_max_age_s=300, tags=("events",))
async def event_brief(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    found = await event.find(ctx.services, params["id"])
    rec, stored = found.record, found.stored
    lon, lat = (rec.lon, rec.lat) if rec is not None else (stored.data["lon"], stored.data["lat"])
    side = ctx.services.settings.event_square_deg
    area = square(lon, lat, side)
    # A square across the antimeridian: the layers are read on the event's side of it.
    box = next((p for p in parts(area) if p[0] <= lon <= p[2]), parts(area)[0])
    (places, places_rep), (osm, osm_rep), (people, pop_rep), (fires, fires_rep), (seen, seen_rep), hist = \
        await asyncio.gather(_places(ctx, box), _osm(ctx, box), _population(ctx, box), _fires(ctx, box),
                             _seen(ctx, box), event.history(ctx.services.db, found))
    changes, hist_rep, seen_times = hist
    health = Health([*found.feed_health.sources, hist_rep, osm_rep, places_rep, pop_rep, fires_rep, seen_rep])
    caveats = list(CAVEATS)
    if rec is None:
        caveats.insert(0, "The feeds no longer list this event: it is described as the history last saw it.")
    if list(box) != area:
        caveats.append(f"The event's square crosses the antimeridian: every figure counts only its part on the "
                       f"event's side ({', '.join(f'{x:g}' for x in box)}, 'measuredBbox'); what lies beyond 180 "
                       "deg is not counted, so the figures are floors there.")
    upstream = rec.source if rec is not None else event.HISTORY
    updated = rec.updated if rec is not None else None
    body = {
        "event": {"id": rec.id if rec else stored.id, "requestedId": params["id"],
                  "type": rec.event_type if rec else stored.event_type, "title": rec.title if rec else stored.title,
                  "point": {"type": "Point", "coordinates": [lon, lat]},
                  "area": {"bbox": area, "kind": "fixed-square", "sideDeg": side, "posQuality": "modeled-bbox",
                           **({"measuredBbox": list(box)} if list(box) != area else {})},
                  "country": rec.country if rec else stored.data.get("country"),
                  "provenance": rec.provenance() if rec else None,
                  "license": rec.license if rec else None},
        "exposure": {"population": people, "places": _exposure_places(places, places_rep.name)},
        "lifelines": _lifelines(osm, places, osm_rep.name, places_rep.name),
        "condition": _condition(found, changes, seen_times, hist_rep),
        "observation": {"fires": fires, "seenCoverage": seen,
                        "upstreamUpdated": figure(updated, HIGH if updated else UNKNOWN, source=upstream)},
        "generatedAt": iso(datetime.now(timezone.utc)),
    }
    return Answer(body, caveats=caveats, health=health)
