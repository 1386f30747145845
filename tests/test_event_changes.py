"""event_changes: each change kind derived across successive polls, on SQLite and PostgreSQL."""
from __future__ import annotations

import copy

from coordinator.demo.upstream import Canned, sample
from coordinator.hazards.history import poll_once

GDACS = "/gdacs/events/geteventlist/EVENTS4APP"
USGS = "/usgs/4.5_week.geojson"


def gdacs_doc(**levels: str) -> dict:
    """The recorded GDACS sample with some events' episode levels changed (by event id)."""
    doc = copy.deepcopy(sample("gdacs", "events/geteventlist/EVENTS4APP"))
    for f in doc["features"]:
        p = f["properties"]
        key = f"{p['eventtype']}{p['eventid']}"
        if key in levels:
            p["episodealertlevel"] = p["alertlevel"] = levels[key]
            p["episodeid"] += 1
    return doc


async def poll(c) -> list[tuple[str, str]]:
    out = await poll_once(c.services.db, c.services.sources)
    return sorted(out.changes)


async def test_first_poll_reports_every_event_as_new(coordinator_db):
    changes = await poll(coordinator_db)
    assert len(changes) == 9 and {k for _, k in changes} == {"new"}
    body = (await coordinator_db.get("/earth/event-changes")).json()
    assert body["count"] == 9 and all(c["kind"] == "new" for c in body["changes"])
    licenses = {c["source"]: c["license"] for c in body["changes"]}
    assert licenses == {"GDACS": "GDACS-terms-attribution", "USGS": "public-domain"}   # rule 5: every record
    assert body["history"]["pollsKept"] == 1 and body["history"]["lastCompletePoll"] is not None


async def test_escalation_deescalation_and_resolution_across_polls(coordinator_db, upstream):
    c = coordinator_db
    await poll(c)
    upstream.set_json(GDACS, gdacs_doc(TC1001214="Red", DR1016890="Orange"))
    assert await poll(c) == [("gdacs:DR:1016890", "deescalated"), ("gdacs:TC:1001214", "escalated")]
    # The wildfire leaves GDACS's current list: resolved.
    doc = gdacs_doc(TC1001214="Red", DR1016890="Orange")
    doc["features"] = [f for f in doc["features"] if f["properties"]["eventtype"] != "WF"]
    upstream.set_json(GDACS, doc)
    assert await poll(c) == [("gdacs:WF:1022311", "resolved")]
    # It comes back: new again.
    upstream.set_json(GDACS, gdacs_doc(TC1001214="Red", DR1016890="Orange"))
    assert await poll(c) == [("gdacs:WF:1022311", "new")]

    body = (await c.get("/earth/event-changes")).json()
    kinds = [(ch["eventId"], ch["kind"]) for ch in body["changes"][:4]]
    assert kinds[0] == ("gdacs:WF:1022311", "new"), "newest first"
    assert kinds[1] == ("gdacs:WF:1022311", "resolved")
    esc = next(ch for ch in body["changes"] if ch["kind"] == "escalated")
    assert esc["fromLevel"] == "orange" and esc["toLevel"] == "red" and esc["toEpisode"] == "20"
    assert body["history"]["pollsKept"] == 4
    ats = [ch["at"] for ch in body["changes"]]
    assert ats == sorted(ats, reverse=True)


async def test_a_source_that_did_not_answer_resolves_nothing(coordinator_db, upstream):
    c = coordinator_db
    await poll(c)
    upstream.set(GDACS, Canned(status=500, body=b"error", content_type="text/plain"))
    assert await poll(c) == [], "GDACS's silence is unknown, not an all-clear"
    body = (await c.get("/earth/event-changes")).json()
    assert body["history"]["partialPolls"] == 1
    assert body["health"]["sourcesUsable"] == 1 and body["health"]["sourcesQueried"] == 2
    r = await c.get("/earth/event-changes")
    assert r.headers["Cache-Control"] == "no-store", "changes after a partial poll are incomplete: not cached"


async def test_unknown_alert_levels_are_neither_escalated_nor_deescalated(coordinator_db, upstream):
    c = coordinator_db
    await poll(c)
    doc = copy.deepcopy(sample("usgs", "4.5_week.geojson"))
    for f in doc["features"]:
        if f["id"] == "us7000r1b7":
            f["properties"]["alert"] = "yellow"      # null -> yellow: first rating, not an escalation
        if f["id"] == "us7000r1c2":
            f["properties"]["alert"] = "orange"      # green -> orange: escalated
    upstream.set_json(USGS, doc)
    assert await poll(c) == [("usgs:us7000r1c2", "escalated")]


async def test_history_before_any_poll_says_so(coordinator_db):
    r = await coordinator_db.get("/earth/event-changes")
    body = r.json()
    assert r.status == 200 and body["count"] is None and body["changes"] == []   # unknown, not 0
    assert body["health"]["degraded"]
    assert any(c.startswith("The history has no polls yet") for c in body["caveats"])
    assert body["history"]["lastPoll"] is None
    assert r.headers["Cache-Control"] == "no-store"


async def test_old_polls_are_pruned_but_changes_are_kept(coordinator_db, upstream):
    c = coordinator_db
    for level in ("Red", "Orange", "Red", "Orange"):
        upstream.set_json(GDACS, gdacs_doc(TC1001214=level))
        await poll_once(c.services.db, c.services.sources, keep=2)
    body = (await c.get("/earth/event-changes")).json()
    assert body["history"]["pollsKept"] == 2
    tc = [ch["kind"] for ch in body["changes"] if ch["eventId"] == "gdacs:TC:1001214"]
    assert tc == ["deescalated", "escalated", "deescalated", "new"]


async def test_an_odd_character_in_one_title_costs_that_character_not_the_history(coordinator_db, upstream):
    """A lone surrogate or a NUL in one upstream title failed every poll (neither encodes as
    UTF-8, PostgreSQL's text refuses U+0000), while /events went on serving the source."""
    doc = copy.deepcopy(sample("usgs", "4.5_week.geojson"))
    doc["features"][2]["properties"]["title"] = "M 6.1 - near \ud800 somewhere"    # [0] is merged with GDACS's
    doc["features"][1]["properties"]["title"] = "M 4.7 - off\x00shore\n"
    upstream.set_json(USGS, doc)
    changes = await poll(coordinator_db)
    assert len(changes) == 9
    titles = [c["title"] for c in (await coordinator_db.get("/earth/event-changes")).json()["changes"]]
    assert "M 6.1 - near \ufffd somewhere" in titles and "M 4.7 - offshore\n" in titles


async def test_concurrent_polls_record_each_event_and_change_once(coordinator_db, upstream):
    """`sis poll` from cron runs beside the leader's poller: on PostgreSQL, polls reading the known
    events side by side both inserted the new ones (3 of 4 failed on a unique violation) or both
    recorded each change (every escalation 4 times)."""
    import asyncio
    c = coordinator_db
    outs = await asyncio.gather(*(poll_once(c.services.db, c.services.sources) for _ in range(4)))
    assert sum(len(o.changes) for o in outs) == 9
    upstream.set_json(GDACS, gdacs_doc(TC1001214="Red"))
    outs = await asyncio.gather(*(poll_once(c.services.db, c.services.sources) for _ in range(4)))
    assert sorted(ch for o in outs for ch in o.changes) == [("gdacs:TC:1001214", "escalated")]
