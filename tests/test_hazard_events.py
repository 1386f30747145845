"""hazard_events against recorded GDACS and USGS GeoJSON served by a local fake."""
from __future__ import annotations

import copy
import time

from coordinator.demo.upstream import Canned, sample
from tests.support import make_settings, start_coordinator, stop_coordinator

GDACS = "/gdacs/events/geteventlist/EVENTS4APP"
USGS = "/usgs/4.5_week.geojson"


async def test_events_merge_both_sources_and_deduplicate_the_shared_quake(coordinator):
    r = await coordinator.get("/earth/events")
    assert r.status == 200
    body = r.json()
    assert list(body)[0] == "caveats", "caveats come first, before the numbers"
    ids = [e["id"] for e in body["events"]]
    # 6 GDACS events + 5 USGS features, of which one is deleted and one is the GDACS quake.
    assert body["count"] == len(ids) == 9
    assert "usgs:us7000r1a1" not in ids and "usgs:us7000r0zz" not in ids
    quake = next(e for e in body["events"] if e["id"] == "gdacs:EQ:1569499")
    assert quake["alsoKnownAs"] == ["usgs:us7000r1a1"]
    assert [p["source"] for p in quake["provenance"]] == ["GDACS", "USGS"]
    assert quake["from"] == "2026-10-04T20:27:25Z"  # naive GDACS UTC made explicit
    assert body["health"] == {"sourcesQueried": 2, "sourcesUsable": 2, "degraded": False,
                              "sources": [{"name": "GDACS", "ok": True, "license": "GDACS-terms-attribution",
                                           "records": 6},
                                          {"name": "USGS", "ok": True, "license": "public-domain", "records": 4}]}


async def test_direct_family_serves_a_fixed_square_as_modeled_bbox(coordinator):
    events = (await coordinator.get("/earth/events")).json()["events"]
    for e in events:
        w, s, east, n = e["bbox"]
        assert e["posQuality"] == "modeled-bbox" and e["bboxKind"] == "fixed-square"
        assert round(east - w, 6) == round(n - s, 6) == 0.5
        lon, lat = e["point"]["coordinates"]
        assert abs((w + east) / 2 - lon) < 1e-6 and abs((s + n) / 2 - lat) < 1e-6
    body = (await coordinator.get("/earth/events")).json()
    assert any("fixed square" in c for c in body["caveats"])


async def test_each_record_carries_its_license_and_unrated_alerts_stay_null(coordinator):
    events = (await coordinator.get("/earth/events")).json()["events"]
    by_id = {e["id"]: e for e in events}
    assert by_id["usgs:us7000r1b7"]["license"] == "public-domain"
    assert by_id["usgs:us7000r1b7"]["alertLevel"] is None   # PAGER has not rated it: unknown, not green
    assert by_id["usgs:us7000r1c2"]["alertLevel"] == "green"
    assert by_id["gdacs:TC:1001214"]["alertLevel"] == "orange"
    assert all(e["license"] for e in events)


async def test_healthy_answer_is_publicly_cacheable_and_served_from_the_server_cache(coordinator, upstream):
    r1 = await coordinator.get("/earth/events")
    assert r1.headers["Cache-Control"] == "public, max-age=60"
    hits = upstream.hits[GDACS]
    r2 = await coordinator.get("/earth/events")
    assert r2.status == 200 and upstream.hits[GDACS] == hits, "second read came from the server cache"


async def test_degraded_answer_is_never_cached(coordinator, upstream):
    upstream.set(GDACS, Canned(status=503, body=b"busy", content_type="text/plain"))
    r1 = await coordinator.get("/earth/events")
    body = r1.json()
    assert r1.status == 200
    assert r1.headers["Cache-Control"] == "no-store"
    assert body["health"]["sourcesUsable"] == 1 < body["health"]["sourcesQueried"] == 2
    gdacs = body["health"]["sources"][0]
    assert gdacs == {"name": "GDACS", "ok": False, "license": "GDACS-terms-attribution", "error": "HTTP 503"}
    assert body["caveats"][0].startswith("Degraded: 1 of 2 sources did not answer (GDACS)")
    assert {e["id"].split(":")[0] for e in body["events"]} == {"usgs"}
    hits = upstream.hits[GDACS]
    await coordinator.get("/earth/events")
    assert upstream.hits[GDACS] == hits + 1, "a degraded answer must not be served from the server cache"
    assert len(coordinator.services.cache._entries) == 0
    # Once the source is back, a retry gives the full read.
    upstream.set_json(GDACS, sample("gdacs", "events/geteventlist/EVENTS4APP"))
    full = (await coordinator.get("/earth/events")).json()
    assert full["health"]["sourcesUsable"] == 2 and full["count"] == 9


async def test_garbage_and_empty_answers(coordinator, upstream):
    upstream.set(USGS, Canned(body=b"<html>oops</html>", content_type="text/html"))
    upstream.set(GDACS, Canned(status=204))  # GDACS's empty list
    body = (await coordinator.get("/earth/events")).json()
    usgs = body["health"]["sources"][1]
    assert usgs["ok"] is False and usgs["error"] == "answer is not JSON"
    assert body["health"]["sources"][0] == {"name": "GDACS", "ok": True, "license": "GDACS-terms-attribution",
                                            "records": 0}
    assert body["count"] == 0


async def test_gdacs_events_no_longer_current_are_left_out(coordinator, upstream):
    doc = copy.deepcopy(sample("gdacs", "events/geteventlist/EVENTS4APP"))
    doc["features"][1]["properties"]["iscurrent"] = "false"
    upstream.set_json(GDACS, doc)
    ids = [e["id"] for e in (await coordinator.get("/earth/events")).json()["events"]]
    assert "gdacs:TC:1001214" not in ids


async def test_unreachable_sources_answer_degraded_within_the_timeout(sqlite_url):
    # Nothing listens on port 9 of loopback: the adapters fail fast, like a machine without internet.
    c = await start_coordinator(make_settings(sqlite_url, None, source_timeout_s=2))
    try:
        t0 = time.monotonic()
        r = await c.get("/earth/events")
        assert time.monotonic() - t0 < 5
        body = r.json()
        assert r.status == 200 and r.headers["Cache-Control"] == "no-store"
        assert body["health"]["sourcesUsable"] == 0 and body["health"]["sourcesQueried"] == 2
        assert all(s["ok"] is False and s["error"].startswith("unreachable") for s in body["health"]["sources"])
        assert body["count"] is None and body["events"] == []         # unknown, not none: nothing answered
    finally:
        await stop_coordinator(c)


async def test_slow_source_times_out_and_the_other_still_answers(sqlite_url, upstream):
    upstream.set_json(GDACS, sample("gdacs", "events/geteventlist/EVENTS4APP"), delay_s=3)
    c = await start_coordinator(make_settings(sqlite_url, upstream, source_timeout_s=0.5))
    try:
        body = (await c.get("/earth/events")).json()
        assert body["health"]["sources"][0]["ok"] is False
        assert body["health"]["sources"][1]["ok"] is True and body["count"] == 4
    finally:
        await stop_coordinator(c)


async def test_demo_mode_labels_its_answers(sqlite_url):
    from coordinator.core.settings import Settings
    c = await start_coordinator(Settings(database_url=sqlite_url, demo=True, poll_interval_s=0))
    try:
        body = (await c.get("/earth/events")).json()
        assert body["caveats"][0].startswith("Demo data")
        assert all(s["demo"] is True for s in body["health"]["sources"])
        assert body["health"]["sourcesUsable"] == 2 and body["count"] == 9
    finally:
        await stop_coordinator(c)


async def test_a_cached_answer_carries_a_stable_etag_and_answers_304(coordinator):
    r1 = await coordinator.get("/earth/events")
    etag = r1.headers["Etag"]
    r2 = await coordinator.get("/earth/events")
    assert r2.headers["Etag"] == etag
    r3 = await coordinator.get("/earth/events", headers={"If-None-Match": etag})
    assert r3.status == 304 and r3.body == b""


def test_gdacs_scores_the_episode_it_levels_and_a_severity_of_0_is_no_measure():
    """The level is the episode's, so its score must be too (the event-wide one can sit in
    another band); floods, volcanoes and droughts carry severity 0 for 'no measure'."""
    import copy
    import json
    from pathlib import Path

    from coordinator.sources.gdacs import parse_feature
    doc = json.loads((Path(__file__).resolve().parents[1] / "coordinator/sources/samples/gdacs/events/geteventlist"
                      / "EVENTS4APP.json").read_text())
    by = {f["properties"]["eventtype"]: f for f in doc["features"]}
    tc = copy.deepcopy(by["TC"])
    tc["properties"].update(episodealertlevel="Green", episodealertscore=0.5, alertlevel="Orange", alertscore=1.5)
    e = parse_feature(tc)
    assert e.alert_level == "green" and e.alert_score == 0.5
    for kind in ("FL", "VO", "DR"):
        assert parse_feature(by[kind]).severity["value"] is None, kind
    assert parse_feature(by["EQ"]).severity["value"] == 4.8


def test_the_merge_never_raises_on_a_value_it_cannot_read_and_keeps_each_id_once():
    """An odd value that reaches the merge (a magnitude as text, a date that does not parse)
    makes two records not the same quake, never a 500; an id met twice is served once."""
    from coordinator.hazards.feed import merge
    from coordinator.sources.events import EventRecord

    def quake(eid: str, source: str, when: str | None, mag) -> EventRecord:  # noqa: ANN001
        return EventRecord(eid, source, "EQ", eid, 10.0, 10.0, None, None, "x", from_time=when,
                           severity={"value": mag})
    g = quake("gdacs:EQ:1", "GDACS", "26/10/2026", "n/a")
    u = quake("usgs:a", "USGS", "2026-10-04T20:27:25Z", "big")
    assert [e.id for e in merge([g, g], [u, u])] == ["gdacs:EQ:1", "usgs:a"]
    g2 = quake("gdacs:EQ:2", "GDACS", "2026-10-04T20:27:25", "n/a")   # same time and place: one quake
    assert [e.id for e in merge([g2], [u])] == ["gdacs:EQ:2"] and g2.also == [u]
