"""End to end: sweep request -> results from test nodes -> validation -> review through the
API -> the seen layer. Approval makes facts live and ground covered; rejection serves nothing."""
from __future__ import annotations

import asyncio
import re

from sqlalchemy import func, select

from coordinator.cli import main as cli_main
from coordinator.core.db.models import SeenFact, SweepJob, SweepTransition
from tests.support import stop_coordinator
from tests.test_error_shape import assert_error_shape
from tests.test_review_kit import (RADIUS, photo_in_every_cell, review_db, review_sqlite, reviewer,  # noqa: F401
                                   rich_result, sweep_to_review)
from tests.test_sweeps_kit import CENTRE, enrolled, photos, request_sweep, start, sweeps_db, sweeps_sqlite  # noqa: F401

SEEN = f"/earth/seen?lat={CENTRE[0]}&lon={CENTRE[1]}&radius={RADIUS}"
KINDS = {"roadway", "kerbs", "gates", "entrances", "fences", "poles", "wires", "signage", "drainage", "vegetation"}


async def test_approval_covers_only_the_ground_its_result_read_and_sweeps_the_rest_again(review_db, photos):
    """A photo the nodes could not fetch is skipped: its cell, with no other photo read, is
    not seen ground. It stays queued under a job of its own instead of being called covered."""
    shot = photo_in_every_cell(photos)
    unread: list[str] = []

    def one_unread(node, lease, truth):
        body = rich_result(node, lease, truth)
        gone = lease["job"]["photos"][0]["id"]
        unread.append(gone)
        body["measurements"] = [m for m in body["measurements"] if m["photoId"] != gone]
        body["facts"] = [f for f in body["facts"] if gone not in f["source"]]
        body["skipped"].append({"photoId": gone, "reason": "fetch failed: timed out"})
        return body
    request = await sweep_to_review(review_db, photos, first_job=one_unread)
    auth = await reviewer(review_db)
    pending = (await review_db.get("/review/v1/pending", headers=auth)).json()["pending"]
    outs = [(await review_db.post(f"/review/v1/jobs/{p['jobId']}/approve", {}, headers=auth)).json()
            for p in pending]
    again = [o for o in outs if "sweptAgainBy" in o]
    assert len(again) == 1 and again[0]["cellsSweptAgain"] == 1
    body = (await review_db.get(SEEN)).json()
    assert body["covered"] is False and body["coverage"]["coveredCells"] == len(shot) - 1
    async with review_db.services.db.read() as s:
        job = await s.get(SweepJob, again[0]["sweptAgainBy"])
    assert job.state == "queued" and [p["id"] for p in job.photos] == unread[:1] and len(job.cells) == 1
    queue = (await review_db.get("/earth/sweep-queue?state=queued")).json()
    assert [x["id"] for x in queue["requests"]] == [request["id"]]
    progress = queue["requests"][0]["progress"]                  # the job made counts in the request's work
    assert progress["jobsTotal"] == len(pending) + 1 and progress["jobsDone"] == len(pending)
    assert progress["jobsInReview"] == 0                         # every swept job was approved


async def test_approved_sweep_makes_the_seen_layer_covered_with_its_facts(review_db, photos):
    shot = photo_in_every_cell(photos)
    request = await sweep_to_review(review_db, photos)
    before = (await review_db.get(SEEN)).json()
    assert before["covered"] is False and before["count"] == 0 and before["coverage"]["coveredCells"] == 0
    assert before["caveats"][0].startswith("Not covered")

    auth = await reviewer(review_db)
    pending = (await review_db.get("/review/v1/pending", headers=auth)).json()
    assert pending["count"] >= 1 and all(p["sweepId"] == request["id"] for p in pending["pending"])
    assert all(p["replicas"]["accepted"] == 2 and p["unanimous"] for p in pending["pending"])

    one = (await review_db.get(f"/review/v1/jobs/{pending['pending'][0]['jobId']}", headers=auth)).json()
    assert one["state"] == "in_review" and one["facts"] and one["measurements"]
    assert len(one["replicas"]) == 2
    other = next(r for r in one["replicas"] if not r["canonical"])
    assert other["agreement"]["share"] == 1.0 and other["agreement"]["agrees"] is True
    assert all(r["validation"] == {"passed": True, "reasons": []} for r in one["replicas"])
    assert all(p["url"].startswith(photos.api_url) for p in one["photos"])      # links to the provider
    assert any("in_review" in n for n in one["validationNotes"])

    for item in pending["pending"]:
        r = await review_db.post(f"/review/v1/jobs/{item['jobId']}/approve", {"reason": "looks right"}, headers=auth)
        assert r.status == 200, r.body
        assert r.json()["state"] == "approved" and r.json()["factsPublished"] > 0

    seen = await review_db.get(SEEN)
    assert seen.status == 200
    body = seen.json()
    assert body["covered"] is True and body["coverage"]["fraction"] == 1.0
    async with review_db.services.db.read() as s:
        live = (await s.execute(select(func.count()).select_from(SeenFact))).scalar_one()
    assert live == 2 * len(shot)                      # a roadway fact and a pole per photo
    # Photos stand at cell centres up to the circle's edge: a pole 6 m east of an edge photo
    # may lie just outside the circle, and is not served.
    assert 2 * len(shot) - 2 <= body["count"] <= live and body["truncated"] is False
    assert all(f["distanceM"] <= RADIUS for f in body["facts"])
    assert {f["kind"] for f in body["facts"]} == {"roadway", "poles"} <= KINDS
    f = next(x for x in body["facts"] if x["kind"] == "roadway")
    assert set(f) >= {"kind", "geometry", "value", "confidence", "source", "timestamp", "basis", "license"}
    assert f["basis"] == "measured" and f["license"] == "CC-BY-SA-4.0" and f["geometry"]["type"] == "Point"
    assert f["source"].startswith("panoramax:") and f["photos"][0] in f["source"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", f["timestamp"])   # the provider wrote +00:00
    assert [x["distanceM"] for x in body["facts"]] == sorted(x["distanceM"] for x in body["facts"])
    assert not any(c.startswith("Not covered") for c in body["caveats"])

    queue = (await review_db.get("/earth/sweep-queue?state=covered")).json()
    assert [x["id"] for x in queue["requests"]] == [request["id"]]
    again = (await request_sweep(review_db, radius=RADIUS)).json()
    assert again["queued"] is False and again["reasonCode"] == "covered"

    areas = await review_db.get("/public/v1/anon/seen-areas")
    assert areas.status == 200
    doc = areas.json()
    assert doc["type"] == "FeatureCollection" and doc["count"] == 1
    feature = doc["features"][0]
    assert feature["geometry"]["type"] == "Polygon" and feature["properties"]["cells"] == len(shot)
    lon0, lat0 = feature["geometry"]["coordinates"][0][0]
    assert abs(lat0 - CENTRE[0]) < 0.01 and abs(lon0 - CENTRE[1]) < 0.01       # [lon, lat] order

    m = (await review_db.get(f"/earth/street-measure?lat={shot[0].lat}&lon={shot[0].lon}&maxM=100")).json()
    assert m["measured"] is True
    assert m["roadWidth"]["value"] is not None and m["roadWidth"]["method"] == "kerb-to-kerb"
    assert m["roadWidth"]["spreadM"] >= 0.3 and m["roadWidth"]["basis"] == "measured"
    assert m["scenes"] and all(s["scaleTrust"] == "high" for s in m["scenes"])
    assert m["scenes"][0]["photoUrl"].startswith(photos.api_url)
    assert all(s["capturedAt"].endswith("Z") for s in m["scenes"])
    pole = m["objects"][0]
    assert pole["label"] == "pole" and pole["heightIsLowerBound"] is True and pole["size"]["heightM"] == 7.2
    assert pole["geometry"]["type"] == "Point" and 0 <= pole["bearingDeg"] <= 360 and pole["distanceM"] == 6.5


async def test_rejected_sweep_leaves_ground_uncovered_and_serves_nothing(sweeps_db, photos):
    photo_in_every_cell(photos)
    request = await sweep_to_review(sweeps_db, photos)
    auth = await reviewer(sweeps_db)
    pending = (await sweeps_db.get(f"/review/v1/pending?sweep={request['id']}", headers=auth)).json()["pending"]
    assert pending
    for item in pending:
        r = await sweeps_db.post(f"/review/v1/jobs/{item['jobId']}/reject",
                                 {"reason": "photos are of a car park, not this street"}, headers=auth)
        assert r.status == 200 and r.json()["state"] == "rejected"
    body = (await sweeps_db.get(SEEN)).json()
    assert body["covered"] is False and body["count"] == 0 and body["facts"] == []
    assert body["coverage"]["coveredCells"] == 0
    assert (await sweeps_db.get("/public/v1/anon/seen-areas")).json()["features"] == []
    m = (await sweeps_db.get(f"/earth/street-measure?lat={CENTRE[0]}&lon={CENTRE[1]}")).json()
    assert m["measured"] is False and m["roadWidth"]["value"] is None and m["roadWidth"]["confidence"] == "unknown"
    assert m["objects"] == [] and m["caveats"][0].startswith("Not measured")
    async with sweeps_db.services.db.read() as s:
        assert (await s.execute(select(func.count()).select_from(SeenFact))).scalar_one() == 0
        log = (await s.execute(select(SweepTransition).where(SweepTransition.to_state == "rejected"))).scalars().all()
    assert len(log) == len(pending) and all(x.actor.startswith("reviewer:key_") for x in log)
    assert all(x.reason == "photos are of a car park, not this street" for x in log)
    queue = (await sweeps_db.get("/earth/sweep-queue")).json()
    assert [x["id"] for x in queue["requests"]] == [request["id"]]          # still queued, not covered


async def test_partial_approval_gives_a_fraction_and_a_caveat_not_covered(review_sqlite, photos):
    photo_in_every_cell(photos)
    await sweep_to_review(review_sqlite, photos)
    auth = await reviewer(review_sqlite)
    pending = (await review_sqlite.get("/review/v1/pending", headers=auth)).json()["pending"]
    assert len(pending) >= 2
    await review_sqlite.post(f"/review/v1/jobs/{pending[0]['jobId']}/approve", {}, headers=auth)
    body = (await review_sqlite.get(SEEN)).json()
    assert body["covered"] is False and 0 < body["coverage"]["fraction"] < 1 and body["count"] > 0
    assert body["caveats"][0].startswith("Not covered")


async def test_approving_a_sweep_before_its_results_are_in_says_what_its_jobs_wait_for(review_db, photos):
    """It answered empty lists and 200, and nothing said the jobs still waited for nodes' results."""
    photo_in_every_cell(photos)
    asked = (await request_sweep(review_db, radius=RADIUS)).json()
    out = (await review_db.post(f"/review/v1/sweeps/{asked['request']['id']}/approve", {},
                                headers=await reviewer(review_db))).json()
    assert out["approved"] == [] and out["left"] == [] and out["factsPublished"] == 0
    assert out["notInReview"] == {"queued": asked["jobs"]} and asked["jobs"] > 0


async def test_approving_a_whole_sweep_skips_jobs_with_a_dissenting_replica(review_db, photos):
    photo_in_every_cell(photos)
    request = await sweep_to_review(review_db, photos, dissent_first=True)
    auth = await reviewer(review_db)
    async with review_db.services.db.read() as s:
        job = (await s.execute(select(SweepJob).order_by(SweepJob.id))).scalars().first()
    shown = (await review_db.get(f"/review/v1/jobs/{job.id}", headers=auth)).json()
    outvoted = next(x for x in shown["replicas"] if x["state"] == "outvoted")
    assert outvoted["agreement"]["agrees"] is False and outvoted["agreement"]["share"] < 0.8
    r = await review_db.post(f"/review/v1/sweeps/{request['id']}/approve", {}, headers=auth)
    assert r.status == 200, r.body
    out = r.json()
    assert [x["jobId"] for x in out["left"]] == [job.id]
    assert out["approved"] and out["factsPublished"] > 0 and out["notInReview"] == {}
    assert job.id not in [x["jobId"] for x in out["approved"]]
    left = (await review_db.get(f"/review/v1/pending?sweep={request['id']}", headers=auth)).json()
    assert [x["jobId"] for x in left["pending"]] == [job.id] and left["pending"][0]["unanimous"] is False


async def test_review_api_needs_a_reviewer_key_and_a_reason_to_reject(sweeps_sqlite, photos, capsys):
    photo_in_every_cell(photos)
    await sweep_to_review(sweeps_sqlite, photos)
    r = await sweeps_sqlite.get("/review/v1/pending")
    assert r.status == 401
    assert_error_shape(r.json(), "unauthorized")
    r = await sweeps_sqlite.get("/review/v1/pending", headers={"X-Api-Key": "sisr_nope"})
    assert r.status == 401

    url = sweeps_sqlite.services.settings.database_url
    rc = await asyncio.to_thread(cli_main, ["reviewers", "create", "Ann", "--database", url])
    out = capsys.readouterr().out
    assert rc == 0
    key = out.split("X-Api-Key): ")[1].split()[0]
    rid = out.split()[1]
    ok = await sweeps_sqlite.get("/review/v1/pending", headers={"X-Api-Key": key})
    assert ok.status == 200 and ok.json()["count"] >= 1
    job_id = ok.json()["pending"][0]["jobId"]
    r = await sweeps_sqlite.post(f"/review/v1/jobs/{job_id}/reject", {}, headers={"X-Api-Key": key})
    assert r.status == 400
    assert_error_shape(r.json(), "bad_parameter")
    r = await sweeps_sqlite.post(f"/review/v1/jobs/{job_id}/approve", {"reason": "ok"}, headers={"X-Api-Key": key})
    assert r.status == 200
    r = await sweeps_sqlite.post(f"/review/v1/jobs/{job_id}/reject", {"reason": "late"}, headers={"X-Api-Key": key})
    assert r.status == 409                                   # decided once
    assert_error_shape(r.json(), "conflict")

    rc = await asyncio.to_thread(cli_main, ["reviewers", "list", "--database", url])
    assert rc == 0 and rid in capsys.readouterr().out
    rc = await asyncio.to_thread(cli_main, ["reviewers", "revoke", rid, "--reason", "left", "--database", url])
    assert rc == 0
    r = await sweeps_sqlite.get("/review/v1/pending", headers={"X-Api-Key": key})
    assert r.status == 403
    assert_error_shape(r.json(), "forbidden")


async def test_ground_swept_without_imagery_counts_as_covered_in_the_seen_layer_as_in_the_queue(review_db, photos):
    """Half of the circle's cells have street photos. Once the sweep of the others is
    approved the queue says covered, and the seen layer must say so too, with the share
    of cells that had imagery given apart (it said covered:false before: cells without
    photos never counted)."""
    shot = photo_in_every_cell(photos)
    photos.photos[:] = shot[::2]                        # every other cell has no photo at all
    request = await sweep_to_review(review_db, photos)
    auth = await reviewer(review_db)
    pending = (await review_db.get("/review/v1/pending", headers=auth)).json()
    for item in pending["pending"]:
        assert (await review_db.post(f"/review/v1/jobs/{item['jobId']}/approve", {"reason": "ok"},
                                     headers=auth)).status == 200
    queue = (await review_db.get("/earth/sweep-queue?state=covered")).json()
    assert [x["id"] for x in queue["requests"]] == [request["id"]]
    body = (await review_db.get(SEEN)).json()
    cov = body["coverage"]
    assert body["covered"] is True and cov["fraction"] == 1.0, cov
    assert cov["withImageryCells"] == len(shot[::2]) and cov["noImageryCells"] == len(shot) - len(shot[::2])
    assert 0.4 < cov["imageryShare"] < 0.6
    assert any("no street imagery" in c for c in body["caveats"])
    again = (await request_sweep(review_db, radius=RADIUS)).json()
    assert again["queued"] is False and again["reasonCode"] == "covered"
    assert again["ground"]["coveredCells"] == again["ground"]["cells"] == cov["cells"]
