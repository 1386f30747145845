"""Finding the event a brief is about, and its condition over time.

The event is read from the live feeds (GDACS and USGS, merged as ``hazard_events`` serves
them), so a brief carries the upstream's current alert level and latest update; an id the
feeds no longer list is read from the polled history, where it stays after it resolves. An
id is unknown (404) only when neither holds it and the id's own source answered: when that
source did not answer, the id may be current there, so the answer is 503, not a 404 that
would read as "no such event".

Its history is the changes the poller recorded (new, escalated, deescalated, resolved, each
with the episodes on either side): GDACS issues a new episode at each update, and an episode
that did not move the alert level is not a change, so it is not listed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, or_, select

from coordinator.core.db import Database
from coordinator.core.db.models import EventChange, EventPoll, HazardEvent
from coordinator.core.errors import NotFound, Unavailable
from coordinator.core.honesty import Health, SourceReport
from coordinator.hazards.feed import read_feed
from coordinator.core.times import iso
from coordinator.sources.events import EventRecord

SOURCE_OF_PREFIX = {"gdacs": "GDACS", "usgs": "USGS"}
HISTORY = "event-history"


@dataclass
class Found:
    record: EventRecord | None         # from the live feed
    stored: HazardEvent | None         # from the polled history
    feed_health: Health

    @property
    def active(self) -> bool | None:
        if self.record is not None:
            return True
        return bool(self.stored.active) if self.stored is not None else None


def _matches(rec: EventRecord, event_id: str) -> bool:
    return rec.id == event_id or any(a.id == event_id for a in rec.also)


async def find(services: Any, event_id: str) -> Found:
    feed = await read_feed(services.sources)
    record = next((r for r in feed.events if _matches(r, event_id)), None)
    stored = await _stored(services.db, record.id if record else event_id)
    if record is None and stored is None:
        source = SOURCE_OF_PREFIX.get(event_id.split(":", 1)[0])
        answered = {s.name: s.ok for s in feed.health.sources}
        if source is not None and not answered.get(source, False):
            raise Unavailable(f"{source} did not answer, so whether {event_id} is one of its events is unknown; "
                              "retry later", {"id": event_id, "source": source}, headers={"Retry-After": "60"})
        raise NotFound(f"no hazard event {event_id}: the feeds do not list it and the history never saw it",
                       {"id": event_id})
    return Found(record, stored, feed.health)


async def _stored(db: Database, event_id: str) -> HazardEvent | None:
    async with db.read() as s:
        row = await s.get(HazardEvent, event_id)
        if row is not None:
            return row
        # A USGS id merged into a GDACS event is kept as one of its aliases.
        for cand in (await s.scalars(select(HazardEvent).where(HazardEvent.source == "GDACS",
                                                               HazardEvent.event_type == "EQ"))).all():
            if event_id in (cand.data or {}).get("aliases", []):
                return cand
    return None


async def history(db: Database, found: Found) -> tuple[list[dict[str, Any]] | None, SourceReport, dict[str, Any]]:
    """The event's recorded changes, oldest first, the history's report, and when the history
    first and last saw the event. Before any poll the history is unknown (None)."""
    ids = {found.record.id} if found.record else set()
    if found.stored is not None:
        ids.add(found.stored.id)
        ids.update((found.stored.data or {}).get("aliases", []))
    if found.record is not None:
        ids.update(a.id for a in found.record.also)
    async with db.read() as s:
        polls = await s.scalar(select(func.count()).select_from(EventPoll)) or 0
        rows = (await s.scalars(select(EventChange).where(or_(*(EventChange.event_id == i for i in ids)))
                                .order_by(EventChange.at, EventChange.id))).all() if polls else []
    if not polls:
        return None, SourceReport(HISTORY, "n/a", ok=False, error="no poll of the hazard feeds yet"), {}
    seen = {}
    if found.stored is not None:
        seen = {"firstSeen": iso(found.stored.first_seen), "lastSeen": iso(found.stored.last_seen)}
    changes = [{"at": iso(r.at), "kind": r.kind, "fromLevel": r.from_level, "toLevel": r.to_level,
                "fromEpisode": r.from_episode, "toEpisode": r.to_episode} for r in rows]
    return changes, SourceReport(HISTORY, "n/a", ok=True, records=len(changes)), seen
