"""hazard_events and event_changes."""
from __future__ import annotations

from typing import Any

from coordinator.core.context import ToolContext
from coordinator.hazards.feed import event_json, read_feed
from coordinator.hazards.history import history_status, recent_changes
from coordinator.core.honesty import Answer, Health, SourceReport
from coordinator.core.registry import Tool, tool

TOOLS: list[Tool] = []

EVENTS_CAVEATS_DIRECT = (
    "Each event's bbox is a fixed square around the event's point (posQuality 'modeled-bbox'): it is not "
    "the hazard's extent, and no affected-area polygon is served.",
)
EVENTS_CAVEATS_EXTENT = (
    "Each event's bbox is an extent rectangle taken from the upstream alert feed where it has one "
    "(bboxKind 'upstream-extent'), else a fixed square around the event's point (bboxKind 'fixed-square'); "
    "posQuality is 'modeled-bbox' either way: no affected-area polygon is served.",
)
EVENTS_CAVEATS = (
    "Events merge GDACS alerts with USGS earthquakes; an earthquake reported by both is served once, "
    "with both in its provenance.",
    "alertLevel is the upstream's: GDACS impact alerts (green/orange/red) or USGS PAGER levels "
    "(green/yellow/orange/red); null means the upstream has not rated the event, not that it is harmless.",
    "An empty list from sources that answered means no active events were listed, not that nothing happened.",
)

# The contract: an event's bbox is the upstream alert feed's rectangle; in the direct family
# a fixed square. So the legacy and credentialed families serve the extent.
EXTENT_DESCRIPTION = ("Active global hazard events (GDACS alerts merged with USGS earthquakes), each with id, type, "
                      "alert level, an extent bbox taken from the upstream alert feed (posQuality 'modeled-bbox'; "
                      "bboxKind says whether the upstream gave an extent or a fixed square stands in), provenance "
                      "and license.")

EVENT_OUTPUT = {
    "type": "object",
    "required": ["caveats", "events", "count", "health"],
    "properties": {
        "caveats": {"type": "array", "items": {"type": "string"}},
        "count": {"type": ["integer", "null"]},
        "events": {"type": "array", "items": {"type": "object", "required": ["id", "type", "bbox", "posQuality"]}},
        "health": {"type": "object"},
    },
}


@tool(TOOLS, name="hazard_events", title="Active hazard events",
      description="Active global hazard events (GDACS alerts merged with USGS earthquakes), each with id, type, "
                  "alert level, a modeled bbox, provenance and license.",
      family_descriptions={"earth": "Active global hazard events (GDACS alerts merged with USGS earthquakes), "
                                    "each with id, type, alert level, a modeled bbox (posQuality 'modeled-bbox': "
                                    "a fixed square around the event's point, not the hazard's extent; no "
                                    "affected-area polygon is served), provenance and license.",
                           "legacy": EXTENT_DESCRIPTION, "public": EXTENT_DESCRIPTION},
      routes={"earth": "/events", "legacy": "/events", "public": "/events"},
      scopes=("earth.events",), cache_ttl_s="events_cache_s", http_max_age_s=60, output_schema=EVENT_OUTPUT,
      tags=("events",))
async def hazard_events(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    settings = ctx.services.settings
    extent = ctx.family != "earth"
    feed = await read_feed(ctx.services.sources)
    events = [event_json(e, square_deg=settings.event_square_deg, extent_bbox=extent) for e in feed.events]
    events.sort(key=lambda e: (e["from"] or "", e["id"]), reverse=True)
    caveats = list(EVENTS_CAVEATS_EXTENT if extent else EVENTS_CAVEATS_DIRECT) + list(EVENTS_CAVEATS)
    # No source answered: how many events there are is unknown, not 0 (the list is empty either way).
    count = len(events) if feed.health.usable else None
    return Answer({"count": count, "events": events}, caveats=caveats, health=feed.health)


@tool(TOOLS, name="event_changes", title="Hazard event changes",
      description="Changes of hazard events, newest first, each of kind new, escalated, deescalated or resolved, "
                  "derived from polled snapshots, with the status of the history subsystem.",
      routes={"earth": "/event-changes", "legacy": "/event-changes", "public": "/event-changes"},
      scopes=("earth.event-changes",), http_max_age_s=30, tags=("events",))
async def event_changes(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    svc = ctx.services
    status, last_health = await history_status(svc.db, svc.settings.poll_interval_s, svc.poller.running)
    changes = await recent_changes(svc.db)
    caveats = [
        "Changes are derived by comparing successive polls of the upstream feeds: an escalation between two "
        "polls is seen at the second; an event that rose and fell between polls is not seen at all.",
        "A source that did not answer a poll resolves none of its events; see history.gaps and partialPolls.",
    ]
    health = None
    if last_health is None:
        caveats.insert(0, "The history has no polls yet: no change can be reported, which is not the same as "
                          "no change having happened.")
        health = Health([SourceReport("event-history", "n/a", ok=False, error="no polls yet")])
    else:
        health = Health([SourceReport(s["name"], s["license"], ok=s["ok"], error=s.get("error"),
                                      demo=bool(s.get("demo"))) for s in last_health["sources"]])
    # With no poll stored, how many changes there were is unknown (null), not 0.
    return Answer({"count": len(changes) if last_health is not None else None, "changes": changes,
                   "history": status}, caveats=caveats, health=health)
