"""The hazard-event history: polled snapshots and the changes derived from them.

GDACS has no escalation field. Each poll compares what a source lists now
with the stored state of each event (its last episode and alert level):

- an id not seen before, or seen before and since resolved, is ``new``;
- a rise in alert level is ``escalated``, a fall ``deescalated``
  (a level that is unknown on either side is neither);
- an active event that a source which *answered* no longer lists is
  ``resolved``. A source that did not answer resolves nothing: its silence is
  unknown, not an all-clear.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select, text

from coordinator.core.db import Database
from coordinator.core.honesty import Health
from coordinator.core.text import one_line
from coordinator.core.times import aware, iso, utcnow
from coordinator.core.db.leader import LeaderLoop, lock_key
from coordinator.core.db.models import EventChange, EventPoll, HazardEvent
from ..sources import Sources
from ..sources.registry import load_adapters
from ..sources.events import EventRecord, rank
from .feed import Feed, read_feed

log = logging.getLogger("sis.history")

CHANGE_KINDS = ("new", "escalated", "deescalated", "resolved")


@dataclass
class PollOutcome:
    poll_id: int
    changes: list[tuple[str, str]]  # (event id, kind)
    feed: Feed


async def record_poll(db: Database, feed: Feed, *, started: datetime, keep: int) -> PollOutcome:
    now = utcnow()
    answered = {s.name for s in feed.health.sources if s.ok}
    changes: list[tuple[str, str]] = []
    async with db.write() as s:
        if not db.is_sqlite:
            # One poll's record at a time (a SQLite write transaction holds the database already):
            # `sis poll` from cron runs beside the leader's poller, and two polls that read the known
            # events side by side both inserted the new ones (a unique violation) or both recorded
            # each change (4 polls at once: every escalation 4 times in /earth/event-changes).
            await s.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock_key("hazard-history")})
        poll = EventPoll(started_at=started, finished_at=now, sources_queried=feed.health.queried,
                         sources_usable=feed.health.usable, events_seen=len(feed.events),
                         health=feed.health.as_json())
        s.add(poll)
        await s.flush()
        known = {e.id: e for e in (await s.scalars(select(HazardEvent))).all()}
        # An earthquake merged into a GDACS event answers to its USGS id too; when GDACS is
        # silent the USGS record stands alone, and it is the same event, not a new one.
        alias_of = {a: row.id for row in known.values() if row.active for a in row.data.get("aliases", [])}
        seen: set[str] = set()

        def change(ev: EventRecord | HazardEvent, kind: str, **kw: Any) -> None:
            eid = ev.id
            title = ev.title
            etype = ev.event_type
            s.add(EventChange(event_id=eid, kind=kind, at=now, poll_id=poll.id, title=title,
                              event_type=etype, **kw))
            changes.append((eid, kind))

        for rec in feed.events:
            if rec.id not in known and rec.id in alias_of:
                seen.add(alias_of[rec.id])
                continue
            seen.add(rec.id)
            seen.update(a.id for a in rec.also)
            row = known.get(rec.id)
            data = {"lon": rec.lon, "lat": rec.lat, "country": rec.country, "aliases": [a.id for a in rec.also]}
            if row is None:
                s.add(HazardEvent(id=rec.id, source=rec.source, event_type=rec.event_type, title=rec.title,
                                  alert_level=rec.alert_level, episode=rec.episode, active=True,
                                  first_seen=now, last_seen=now, data=data))
                change(rec, "new", to_level=rec.alert_level, to_episode=rec.episode)
                continue
            if not row.active:
                change(rec, "new", from_level=row.alert_level, to_level=rec.alert_level,
                       from_episode=row.episode, to_episode=rec.episode)
            else:
                old, new = rank(row.alert_level), rank(rec.alert_level)
                if old is not None and new is not None and new != old:
                    change(rec, "escalated" if new > old else "deescalated", from_level=row.alert_level,
                           to_level=rec.alert_level, from_episode=row.episode, to_episode=rec.episode)
            row.active, row.alert_level, row.episode = True, rec.alert_level, rec.episode
            row.title, row.last_seen, row.data = rec.title, now, data

        for row in known.values():
            if row.active and row.id not in seen and row.source in answered:
                row.active = False
                change(row, "resolved", from_level=row.alert_level, from_episode=row.episode)

        # Keep the newest `keep` polls; changes outlive them (their poll_id goes null).
        cutoff = await s.scalar(select(EventPoll.id).order_by(EventPoll.id.desc()).offset(keep).limit(1))
        if cutoff is not None:
            await s.execute(delete(EventPoll).where(EventPoll.id <= cutoff))
        poll_id = poll.id
    return PollOutcome(poll_id, changes, feed)


async def poll_once(db: Database, sources: Sources, *, keep: int = 2016) -> PollOutcome:
    started = utcnow()
    feed = await read_feed(sources)
    return await record_poll(db, feed, started=started, keep=keep)


async def recent_changes(db: Database, limit: int = 200) -> list[dict[str, Any]]:
    async with db.read() as s:
        rows = (await s.scalars(select(EventChange).order_by(EventChange.at.desc(), EventChange.id.desc())
                                .limit(limit))).all()
    return [{"eventId": r.event_id, "kind": r.kind, "at": iso(r.at), "type": r.event_type,
             "title": r.title, "fromLevel": r.from_level, "toLevel": r.to_level,
             "fromEpisode": r.from_episode, "toEpisode": r.to_episode, **provenance(r.event_id)} for r in rows]


def provenance(event_id: str) -> dict[str, str | None]:
    """The source and license of a change: those of the upstream whose event it is, named by
    the event id's prefix (``gdacs:TC:1001214``), read off the source's adapter (SPEC.md rule 5:
    every record carries its license)."""
    adapter = load_adapters().get(event_id.split(":", 1)[0])
    if adapter is None:
        return {"source": None, "license": "unknown"}
    return {"source": adapter.label or adapter.name, "license": adapter.license}


async def history_status(db: Database, interval_s: float, running: bool) -> tuple[dict[str, Any], dict | None]:
    """The history subsystem's status, and the health of the last poll (None before any)."""
    async with db.read() as s:
        count = await s.scalar(select(func.count()).select_from(EventPoll)) or 0
        polls = (await s.execute(select(EventPoll.started_at, EventPoll.sources_usable, EventPoll.sources_queried,
                                        EventPoll.health).order_by(EventPoll.id.desc()).limit(500))).all()
    status: dict[str, Any] = {"running": running, "pollIntervalS": interval_s, "pollsKept": count,
                              "lastPoll": None, "lastCompletePoll": None, "oldestPoll": None,
                              "gaps": [], "partialPolls": 0}
    if not polls:
        return status, None
    status["lastPoll"] = iso(polls[0].started_at)
    status["oldestPoll"] = iso(polls[-1].started_at)
    complete = next((p for p in polls if p.sources_usable == p.sources_queried), None)
    status["lastCompletePoll"] = iso(complete.started_at) if complete else None
    status["partialPolls"] = sum(1 for p in polls if p.sources_usable < p.sources_queried)
    if interval_s > 0:
        limit = timedelta(seconds=2 * interval_s)
        times = [aware(p.started_at) for p in reversed(polls)]
        gaps = [{"from": iso(a), "to": iso(b), "seconds": int((b - a).total_seconds())}
                for a, b in zip(times, times[1:]) if b - a > limit]
        if running and utcnow() - times[-1] > limit:
            gaps.append({"from": iso(times[-1]), "to": None, "seconds": int((utcnow() - times[-1]).total_seconds())})
        status["gaps"] = gaps[-50:]
    return status, polls[0].health


def usable_line(health: Health) -> str:
    """How many sources a poll read answered, and why each other did not: ``sources usable
    0/2 (GDACS: HTTP 500; USGS: unreachable: Connection refused)``. A poll that no source
    answered records no events and no changes, which alone would read as a quiet day."""
    down = "; ".join(f"{s.name}: {one_line(s.error or 'no answer', 120)}" for s in health.sources if not s.ok)
    return f"sources usable {health.usable}/{health.queried}" + (f" ({down})" if down else "")


class Poller(LeaderLoop):
    """Polls the event sources every ``interval_s`` seconds in the background, in one
    process at a time among coordinators sharing a PostgreSQL database (``LeaderLoop``).
    ``running`` is true on every process whose poller is started (leading or standing
    by): the history is being kept. A poll that fails is logged and the next one runs an
    interval later: one bad poll must not end the history."""

    ROLE = "hazard-poller"
    WHAT = "event poll"

    def __init__(self, db: Database, sources: Sources, interval_s: float, keep: int) -> None:
        self.db, self.sources, self.keep = db, sources, keep
        self.polls = 0            # polls this process ran
        super().__init__(db.url, interval_s)

    async def pass_once(self) -> None:
        out = await poll_once(self.db, self.sources, keep=self.keep)
        self.polls += 1
        log.info("event poll %s: %d events, %d changes, %s", out.poll_id, len(out.feed.events), len(out.changes),
                 usable_line(out.feed.health))
