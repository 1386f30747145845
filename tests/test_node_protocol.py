"""The node protocol under /node/v1: enrolment, leases as data, heartbeats, idempotent
submission, revocation; and the faults: a silent node, a duplicate, a restarted coordinator."""
from __future__ import annotations

import asyncio
import hashlib
import json

import pytest
from sqlalchemy import select, text

from coordinator.cli import main as cli_main
from coordinator.core.db.models import Node, SweepJob, SweepLease, SweepResult, SweepTransition
from coordinator.sweeps.service import sweeps_of
from sweep_engine.schema import Job
from tests.support import stop_coordinator
from tests.test_error_shape import assert_error_shape
from tests.test_sweeps_kit import (CENTRE, SimNode, enrolled, node_row, photos, request_sweep, set_trusted,  # noqa: F401
                                   start, sweeps_db, sweeps_sqlite)


async def test_enrolment_records_the_node_and_stores_only_a_hash_of_its_token(sweeps_db):
    node = SimNode(sweeps_db)
    r = await node.enrol(name="kitchen box")
    assert r.status == 201
    body = r.json()
    assert body["token"].startswith("sisn_") and body["nodeId"].startswith("nd_") and body["trusted"] is False
    row = await node_row(sweeps_db, node.node_id)
    assert row.token_hash == hashlib.sha256(body["token"].encode()).hexdigest()
    assert (row.platform, row.gpu, row.engine_version, row.name) == \
        ("Linux-6.8-x86_64", "NVIDIA RTX 3060 12GB", "0.1.0", "kitchen box")
    async with sweeps_db.services.db.read() as s:
        dump = json.dumps([list(map(str, r)) for r in (await s.execute(text("SELECT * FROM nodes"))).all()])
    assert body["token"] not in dump
    me = await sweeps_db.get("/node/v1/me", headers=node.auth)
    assert me.status == 200 and me.json()["nodeId"] == node.node_id and "token" not in me.json()


async def test_enrolment_refuses_an_unpublished_engine_build_and_bad_fields(sweeps_sqlite):
    r = await SimNode(sweeps_sqlite).enrol(build="sha256:" + "f" * 64)
    assert r.status == 403
    assert_error_shape(r.json(), "forbidden")
    r = await SimNode(sweeps_sqlite).enrol(gpu="")
    assert r.status == 400
    r = await SimNode(sweeps_sqlite).enrol(colour="red")
    assert r.status == 400 and "colour" in r.json()["error"]["message"]


async def test_node_routes_need_a_valid_bearer_token(sweeps_sqlite):
    for headers in ({}, {"Authorization": "Bearer sisn_nope"}, {"Authorization": "Basic abc"}):
        for path in ("/node/v1/lease", "/node/v1/leases/ls_x/heartbeat", "/node/v1/leases/ls_x/result"):
            r = await sweeps_sqlite.post(path, {}, headers=headers)
            assert r.status == 401, path
            assert_error_shape(r.json(), "unauthorized")
            assert "WWW-Authenticate" in r.headers


async def test_an_empty_queue_answers_204_with_retry_after(sweeps_sqlite):
    (node,) = await enrolled(sweeps_sqlite)
    r = await sweeps_sqlite.post("/node/v1/lease", {}, headers=node.auth)
    assert r.status == 204 and r.headers["Retry-After"] == "30" and r.body == b""


async def test_a_lease_hands_the_job_over_as_data_only(sweeps_db, photos):
    photos.scatter(*CENTRE, radius_m=300, n=6, seed=1)
    await request_sweep(sweeps_db, radius=300)
    (node,) = await enrolled(sweeps_db)
    doc = await node.lease()
    job = Job.from_dict(doc["job"])           # the wire type, checked whole
    assert job.photos and all(p.url.startswith(photos.api_url.rsplit("/api", 1)[0]) for p in job.photos)
    assert doc["lease"]["ttlS"] == 600 and doc["lease"]["expiresAt"].endswith("Z")
    assert set(doc) == {"lease", "job"}


async def test_a_heartbeat_extends_the_lease(sweeps_db, photos):
    photos.scatter(*CENTRE, radius_m=300, n=6, seed=1)
    await request_sweep(sweeps_db, radius=300)
    (node,) = await enrolled(sweeps_db)
    doc = await node.lease()
    lid = doc["lease"]["leaseId"]
    r = await node.heartbeat(lid)
    assert r.status == 200 and r.json()["action"] == "continue"
    assert r.json()["expiresAt"] >= doc["lease"]["expiresAt"]
    other = (await enrolled(sweeps_db))[0]
    r = await other.heartbeat(lid)
    assert r.status == 404


async def test_an_honest_result_from_a_trusted_node_goes_to_review(sweeps_db, photos):
    photos.scatter(*CENTRE, radius_m=300, n=6, seed=1)
    await request_sweep(sweeps_db, radius=300)
    (node,) = await enrolled(sweeps_db, trusted=True)
    doc = await node.lease()
    r = await node.submit(doc["lease"]["leaseId"], node.honest(doc))
    assert r.status == 200, r.body
    assert r.json() == {"accepted": True, "resultState": "accepted", "jobState": "in_review", "reasons": [],
                        "duplicate": False}
    q = (await sweeps_db.get("/earth/sweep-queue")).json()["requests"][0]
    assert q["state"] == "queued" and q["progress"]["jobsDone"] == 1 and q["progress"]["jobsInReview"] == 1


async def test_a_duplicate_submission_gives_one_result(sweeps_db, photos):
    photos.scatter(*CENTRE, radius_m=300, n=6, seed=1)
    await request_sweep(sweeps_db, radius=300)
    (node,) = await enrolled(sweeps_db, trusted=True)
    doc = await node.lease()
    lid, body = doc["lease"]["leaseId"], json.dumps(node.honest(doc))
    answers = await asyncio.gather(*(node.submit(lid, body) for _ in range(4)))
    assert [a.status for a in answers] == [200] * 4
    assert sorted(a.json()["duplicate"] for a in answers) == [False, True, True, True]
    async with sweeps_db.services.db.read() as s:
        assert len((await s.execute(select(SweepResult))).scalars().all()) == 1
        assert (await node_row(sweeps_db, node.node_id)).valid_total == 1
    different = node.honest(doc)
    different["facts"][0]["value"]["widthM"] += 1
    r = await node.submit(lid, different)
    assert r.status == 409
    assert_error_shape(r.json(), "conflict")


@pytest.fixture
async def one_photo_jobs(db_url, photos):
    """A coordinator on each database whose jobs hold one photo each, four of them."""
    photos.scatter(*CENTRE, radius_m=300, n=4, seed=1)
    c = await start(db_url, photos, job_max_photos=1)
    assert (await request_sweep(c, radius=300)).json()["jobs"] == 4
    yield c
    await stop_coordinator(c)


async def test_a_result_can_ask_for_the_next_lease_in_the_same_request(one_photo_jobs):
    sweeps_db, jobs = one_photo_jobs, 4
    (node,) = await enrolled(sweeps_db, trusted=True)
    doc, seen = await node.lease(), set()
    for i in range(jobs):
        seen.add(doc["job"]["jobId"])
        r = await node.submit(doc["lease"]["leaseId"], node.honest(doc), next_="1")
        assert r.status == 200, r.body
        answer = r.json()
        assert answer["accepted"] and answer["jobState"] == "in_review"
        if i < jobs - 1:
            doc = answer["next"]
            assert set(doc) == {"lease", "job"} and Job.from_dict(doc["job"]).job_id not in seen
            node.leases[doc["lease"]["leaseId"]] = doc
        else:                               # the queue is empty: null, and when to ask again
            assert answer["next"] is None and r.headers["Retry-After"] == "30"
    async with sweeps_db.services.db.read() as s:
        assert {j.state for j in (await s.execute(select(SweepJob))).scalars()} == {"in_review"}
        assert len((await s.execute(select(SweepLease))).scalars().all()) == jobs


async def test_a_result_and_its_next_lease_are_one_transaction_that_never_offers_the_job_just_answered(one_photo_jobs):
    """An untrusted node's replica leaves its job queued for a second node's: the next lease,
    made in the submission's own transaction, sees the result and offers another job; the
    claim batcher is not used."""
    sweeps_db = one_photo_jobs
    sw = sweeps_of(sweeps_db.services)
    (node,) = await enrolled(sweeps_db)
    doc, answered = await node.lease(), []
    claims, submits = sw.claims.batches, sw.submits.batches
    while doc is not None:
        answered.append(doc["job"]["jobId"])
        lid, body = doc["lease"]["leaseId"], node.honest(doc)
        r = await node.submit(lid, body, next_="1")
        assert r.status == 200, r.body
        answer = r.json()
        assert (answer["resultState"], answer["jobState"]) == ("pending", "queued")
        doc = answer["next"]
        if doc is not None:
            assert doc["job"]["jobId"] not in answered
            node.leases[doc["lease"]["leaseId"]] = doc
    assert len(answered) == len(set(answered)) == 4 and r.headers["Retry-After"] == "30"
    assert (sw.claims.batches, sw.submits.batches) == (claims, submits + 4)
    again = await node.submit(lid, body, next_="1")      # a retry after a lost answer: the same answer
    assert again.status == 200 and again.json()["duplicate"] and again.json()["next"] is None


async def test_a_result_that_asks_for_no_next_lease_or_is_rejected_gets_none(one_photo_jobs):
    sweeps_db = one_photo_jobs
    (node,) = await enrolled(sweeps_db, trusted=True)
    doc = await node.lease()
    lid = doc["lease"]["leaseId"]
    r = await node.submit(lid, node.honest(doc), next_="maybe")
    assert r.status == 400
    assert_error_shape(r.json(), "bad_parameter")
    bad = node.honest(doc)
    bad["facts"][0]["lon"] += 1.0           # far outside the job's area
    r = await node.submit(lid, bad, next_="1")
    assert r.status == 422 and "next" not in r.json()
    async with sweeps_db.services.db.read() as s:
        assert len((await s.execute(select(SweepLease))).scalars().all()) == 1   # no lease was made
    doc = await node.lease()
    r = await node.submit(doc["lease"]["leaseId"], node.honest(doc), next_="0")
    assert r.status == 200 and "next" not in r.json()


async def test_a_node_that_stops_heartbeating_loses_its_job_after_the_ttl(db_url, photos):
    photos.scatter(*CENTRE, radius_m=100, n=1, seed=1)
    c = await start(db_url, photos, lease_ttl_s=1.0, lease_sweep_interval_s=0.1)
    try:
        sw = sweeps_of(c.services)
        sw.sweeper.start()
        await request_sweep(c, radius=200)
        silent, patient = await enrolled(c, 2, trusted=True)
        first = await silent.lease()
        assert await patient.lease() is None          # the only job is held
        await sw.sweeper.wait_for(lambda: sw.sweeper.lapsed_total >= 1, timeout=10)
        second = await patient.lease()
        assert second is not None and second["job"]["jobId"] == first["job"]["jobId"]
        beat = await silent.heartbeat(first["lease"]["leaseId"])
        assert beat.json() == {"action": "cancel", "reason": "the lease is lapsed"}
        late = await silent.submit(first["lease"]["leaseId"], silent.honest(first))
        assert late.status == 409
        r = await patient.submit(second["lease"]["leaseId"], patient.honest(second))
        assert r.status == 200 and r.json()["jobState"] == "in_review"
        async with c.services.db.read() as s:
            log = (await s.execute(select(SweepTransition).where(SweepTransition.subject == "lease",
                                                                 SweepTransition.to_state == "lapsed"))).scalars().all()
        assert len(log) == 1 and log[0].actor == "sweeper" and "lapsed" in log[0].reason
    finally:
        await stop_coordinator(c)


async def test_a_lease_given_back_is_queued_again_at_once_with_no_failure_counted(db_url, photos):
    photos.scatter(*CENTRE, radius_m=100, n=1, seed=1)
    c = await start(db_url, photos, job_max_failures=1)      # one lapse would park the job
    try:
        await request_sweep(c, radius=200)
        stopping, other = await enrolled(c, 2, trusted=True)
        first = await stopping.lease()
        assert await other.lease() is None                    # the only job is held
        lid = first["lease"]["leaseId"]
        assert (await other.release(lid)).status == 404       # not its lease
        for bad in ({"reason": ""}, {"reason": "x" * 201}, {"why": "no"}, {"reason": 3}, "[1]", "{"):
            r = await stopping.release(lid, bad)
            assert r.status == 400, bad
            assert_error_shape(r.json(), "bad_parameter")
        r = await stopping.release(lid)
        assert r.status == 200 and r.json() == {"leaseId": lid, "state": "cancelled"}
        again = await stopping.release(lid, {"reason": "sent twice"})
        assert again.status == 200 and again.json() == {"leaseId": lid, "state": "cancelled"}
        second = await other.lease()                          # at once, not after the TTL
        assert second is not None and second["job"]["jobId"] == first["job"]["jobId"]
        assert (await stopping.heartbeat(lid)).json() == {"action": "cancel", "reason": "the lease is cancelled"}
        assert (await stopping.submit(lid, stopping.honest(first))).status == 409
        r = await other.submit(second["lease"]["leaseId"], other.honest(second))
        assert r.status == 200 and r.json()["jobState"] == "in_review"
        async with c.services.db.read() as s:
            job = (await s.execute(select(SweepJob))).scalar_one()
            log = (await s.execute(select(SweepTransition).where(SweepTransition.subject == "lease",
                                                                 SweepTransition.subject_id == lid))).scalars().all()
        assert job.failures == 0
        actor = f"node:{stopping.node_id}"
        assert [(t.from_state, t.to_state, t.actor) for t in log] == [(None, "active", actor),
                                                                      ("active", "cancelled", actor)]
        assert log[1].reason == "given back by its node: the node is stopping"
    finally:
        await stop_coordinator(c)


async def test_a_job_that_fails_too_often_is_parked_with_its_reason(sqlite_url, photos):
    photos.scatter(*CENTRE, radius_m=100, n=1, seed=1)
    c = await start(sqlite_url, photos, lease_ttl_s=0.05, job_max_failures=3)
    try:
        sw = sweeps_of(c.services)
        await request_sweep(c, radius=200)
        (node,) = await enrolled(c, trusted=True)
        for _ in range(3):
            assert await node.lease() is not None
            await asyncio.sleep(0.06)   # the lease TTL passing is the point of this test
            assert await sw.sweeper.run_once() == 1
        assert await node.lease() is None
        async with c.services.db.read() as s:
            job = (await s.execute(select(SweepJob))).scalar_one()
        assert job.state == "failed" and job.failures == 3 and "failed 3 times" in job.reason
        q = (await c.get("/earth/sweep-queue")).json()["requests"][0]
        assert q["progress"]["jobsFailed"] == 1
    finally:
        await stop_coordinator(c)


async def test_a_restarted_coordinator_still_accepts_the_submission(db_url, photos):
    photos.scatter(*CENTRE, radius_m=300, n=6, seed=1)
    c = await start(db_url, photos)
    await request_sweep(c, radius=300)
    (node,) = await enrolled(c, trusted=True)
    doc = await node.lease()
    await stop_coordinator(c)
    c2 = await start(db_url, photos)
    try:
        node.c = c2
        r = await node.submit(doc["lease"]["leaseId"], node.honest(doc))
        assert r.status == 200 and r.json()["jobState"] == "in_review"
    finally:
        await stop_coordinator(c2)


async def test_revocation_from_the_cli_takes_effect_at_once_and_frees_the_nodes_jobs(sqlite_url, photos, capsys):
    photos.scatter(*CENTRE, radius_m=100, n=1, seed=1)
    c = await start(sqlite_url, photos)
    try:
        await request_sweep(c, radius=200)
        bad, good = await enrolled(c, 2, trusted=True)
        doc = await bad.lease()
        rc = await asyncio.to_thread(cli_main, ["nodes", "revoke", bad.node_id, "--reason", "submitted junk",
                                                "--database", sqlite_url])
        assert rc == 0 and "released 1 lease" in capsys.readouterr().out
        r = await c.post("/node/v1/lease", {}, headers=bad.auth)
        assert r.status == 403
        assert_error_shape(r.json(), "forbidden")
        assert r.json()["error"]["details"]["reason"] == "submitted junk"
        again = await good.lease()
        assert again is not None and again["job"]["jobId"] == doc["job"]["jobId"]
        rc = await asyncio.to_thread(cli_main, ["nodes", "list", "--database", sqlite_url])
        out = capsys.readouterr().out
        assert rc == 0 and bad.node_id in out and "revoked" in out
        async with c.services.db.read() as s:
            lease = (await s.execute(select(SweepLease).where(SweepLease.node_id == bad.node_id))).scalar_one()
            job = (await s.execute(select(SweepJob))).scalar_one()
        assert lease.state == "cancelled" and job.failures == 0
    finally:
        await stop_coordinator(c)


async def test_every_transition_is_recorded_with_who_when_and_why(sweeps_db, photos):
    photos.scatter(*CENTRE, radius_m=100, n=1, seed=1)
    await request_sweep(sweeps_db, radius=200)
    (node,) = await enrolled(sweeps_db, trusted=True)
    doc = await node.lease()
    await node.submit(doc["lease"]["leaseId"], node.honest(doc))
    async with sweeps_db.services.db.read() as s:
        rows = (await s.execute(select(SweepTransition).order_by(SweepTransition.id))).scalars().all()
        job_id = (await s.execute(select(SweepJob.id))).scalar_one()
    job_log = [(r.from_state, r.to_state, r.actor) for r in rows if r.subject == "job" and r.subject_id == str(job_id)]
    assert job_log == [(None, "queued", "api:sweep_request"), ("queued", "leased", f"node:{node.node_id}"),
                       ("leased", "in_review", f"node:{node.node_id}")]
    assert all(r.at is not None and r.reason for r in rows)
    assert {r.subject for r in rows} >= {"request", "job", "lease", "result", "node"}


async def test_node_routes_are_in_the_openapi_document_but_not_tools(sweeps_sqlite):
    from openapi_spec_validator import validate
    doc = (await sweeps_sqlite.get("/openapi.json")).json()
    validate(doc)
    assert "/node/v1/lease" in doc["paths"] and "/node/v1/leases/{leaseId}/result" in doc["paths"]
    assert "/earth/sweep-request" in doc["paths"] and "post" in doc["paths"]["/earth/sweep-request"]
    registry = sweeps_sqlite.services.registry
    assert not any("/node/" in path for t in registry for path in t.routes.values())
    assert "/node/v1/leases/{leaseId}/release" in doc["paths"]
    assert not {"node_enrol", "node_lease", "node_heartbeat", "node_result", "node_release"} & {t.name for t in registry}


def test_the_protocol_document_names_every_route_and_sweep_setting():
    from pathlib import Path

    from coordinator.faces.node_protocol import NODE_PATHS
    from coordinator.core.settings import Settings
    doc = (Path(__file__).resolve().parents[1] / "docs" / "node-protocol.md").read_text()
    for path in NODE_PATHS:
        assert path in doc, path
    for name in ("engine_builds", "fact_margin_m", "object_margin_m", "result_max_bytes", "trust_streak",
                 "quorum_max", "lease_sweep_interval_s", "job_max_failures", "node_enrol_secret",
                 "job_max_photos"):
        assert name in Settings.model_fields
        assert f"SIS_{name.upper()}" in doc, name
    assert "SIS_SOURCES__PANORAMAX__BASE_URL" in doc


async def test_demo_mode_serves_a_fake_photo_provider_and_accepts_the_development_build(sqlite_url):
    from coordinator.demo.photos import DEMO_CENTRE, DEV_ENGINE_BUILD
    from coordinator.sweeps.validation import accepted_builds
    from tests.support import make_settings, start_coordinator
    c = await start_coordinator(make_settings(sqlite_url, None, demo=True))
    try:
        sw = sweeps_of(c.services)
        assert DEV_ENGINE_BUILD in accepted_builds(sw.settings)   # with the local engine's builds (demo)
        r = await request_sweep(c, *DEMO_CENTRE, radius=400)
        assert r.json()["queued"] is True and r.json()["photos"] > 0
        node = SimNode(c)
        assert (await node.enrol()).status == 201
        doc = await node.lease()
        from tornado.httpclient import AsyncHTTPClient
        img = await AsyncHTTPClient().fetch(doc["job"]["photos"][0]["url"])
        assert img.headers["Content-Type"] == "image/jpeg" and img.body[:2] == b"\xff\xd8"
    finally:
        await stop_coordinator(c)


async def test_a_heartbeat_on_a_parked_job_answers_cancel(sqlite_url, photos):
    photos.scatter(*CENTRE, radius_m=100, n=3, seed=1)
    c = await start(sqlite_url, photos, job_max_failures=1)
    try:
        await request_sweep(c, radius=200)
        (b,) = await enrolled(c, 1)                   # untrusted: two replicas
        (a,) = await enrolled(c, 1, trusted=True)     # only a trusted node's invalid result counts
        lb, la = await b.lease(), await a.lease()
        bad = a.honest(la)
        bad["engineBuild"] = "0" * 64
        assert (await a.submit(la["lease"]["leaseId"], bad)).status == 422   # one failure parks the job
        r = await b.heartbeat(lb["lease"]["leaseId"])
        assert r.status == 200 and r.json() == {"action": "cancel", "reason": "the job is failed"}
        late = await b.submit(lb["lease"]["leaseId"], b.honest(lb))
        assert late.status == 409
    finally:
        await stop_coordinator(c)


async def test_a_revoked_node_is_refused_on_every_route(sweeps_sqlite, photos):
    photos.scatter(*CENTRE, radius_m=100, n=1, seed=1)
    await request_sweep(sweeps_sqlite, radius=200)
    (node,) = await enrolled(sweeps_sqlite, trusted=True)
    doc = await node.lease()
    from coordinator.sweeps import nodes as registry
    sw = sweeps_of(sweeps_sqlite.services)
    assert await registry.revoke(sw.db, node.node_id, "test", "operator:test", 5) == 1
    lid = doc["lease"]["leaseId"]
    for r in (await node.heartbeat(lid), await node.submit(lid, node.honest(doc)), await node.release(lid),
              await sweeps_sqlite.get("/node/v1/me", headers=node.auth),
              await sweeps_sqlite.post("/node/v1/lease", {}, headers=node.auth)):
        assert r.status == 403
        assert_error_shape(r.json(), "forbidden")
        assert r.json()["error"]["details"]["reason"] == "test"


async def test_a_lease_naming_an_engine_build_no_longer_accepted_is_refused_naming_it(one_photo_jobs):
    """A node enrolled with a build the operator then withdrew (a new node-app release, another
    SIS_ENGINE_BUILDS) was leased job after job, each result refused 422 for its build. A lease
    naming an accepted build, or none (an agent older than the field), is served as before."""
    from coordinator.demo.photos import DEV_ENGINE_BUILD
    sweeps_db = one_photo_jobs                             # four jobs: four leases for one node
    (node,) = await enrolled(sweeps_db)
    settings = sweeps_of(sweeps_db.services).settings

    async def lease(body):
        return await sweeps_db.post("/node/v1/lease", body, headers=node.auth)

    r = await lease({"engineBuild": DEV_ENGINE_BUILD})
    assert r.status == 200 and set(r.json()) == {"lease", "job"}
    settings.engine_builds = "sha256:" + "e" * 64          # the operator withdraws the node's build
    for body in ({"engineBuild": DEV_ENGINE_BUILD}, {"engineBuild": " " + DEV_ENGINE_BUILD + " "}):
        r = await lease(body)
        assert r.status == 403, r.body
        assert_error_shape(r.json(), "forbidden")
        err = r.json()["error"]
        assert err["details"] == {"engineBuild": DEV_ENGINE_BUILD}
        assert "download the current node app" in err["message"]
    async with sweeps_db.services.db.read() as s:
        assert len((await s.execute(select(SweepLease))).scalars().all()) == 1     # no lease was made
    assert (await lease({})).status == 200                 # no build named: served as before
    assert (await sweeps_db.post("/node/v1/lease", b"", headers=node.auth)).status == 200
    r = await lease({"engineBuild": "sha256:" + "e" * 64})   # the build accepted now
    assert r.status == 200
    for bad in ({"engineBuild": ""}, {"engineBuild": 7}, {"engineBuild": "x" * 129}):
        r = await lease(bad)
        assert r.status == 400 and r.json()["error"]["details"]["parameter"] == "engineBuild"
    # A token no node has is 401 and a revoked node is told why, its build withdrawn or not: the
    # build was checked first, and both were told to download the app.
    withdrawn = {"engineBuild": DEV_ENGINE_BUILD}
    r = await sweeps_db.post("/node/v1/lease", withdrawn, headers={"Authorization": "Bearer sisn_" + "x" * 40})
    assert r.status == 401, r.body
    from coordinator.sweeps import nodes as registry
    await registry.revoke(sweeps_of(sweeps_db.services).db, node.node_id, "abuse", "operator:test", 5)
    r = await lease(withdrawn)
    assert r.status == 403 and r.json()["error"]["details"].get("reason") == "abuse", r.body


async def test_a_result_of_a_withdrawn_build_is_refused_naming_it_and_leases_no_next_job(one_photo_jobs):
    """With ?next=1 the refused result leases nothing, as any refused result, and its answer names
    the build as a refused lease does (``details.engineBuild``), saying what to do."""
    from coordinator.demo.photos import DEV_ENGINE_BUILD
    sweeps_db = one_photo_jobs
    (node,) = await enrolled(sweeps_db, trusted=True)
    doc = await node.lease()
    sweeps_of(sweeps_db.services).settings.engine_builds = "sha256:" + "e" * 64
    r = await node.submit(doc["lease"]["leaseId"], node.honest(doc), next_="1")
    assert r.status == 422 and "next" not in r.json()
    assert_error_shape(r.json(), "invalid_result")
    err = r.json()["error"]
    assert err["details"]["engineBuild"] == DEV_ENGINE_BUILD
    assert any(x.startswith("engineBuild:") for x in err["details"]["reasons"])
    assert "no job is leased to its engine build" in err["message"]
    assert "download the current node app" in err["message"]
    async with sweeps_db.services.db.read() as s:
        assert len((await s.execute(select(SweepLease))).scalars().all()) == 1   # no next lease was made
    sweeps_of(sweeps_db.services).settings.engine_builds = DEV_ENGINE_BUILD     # accepted again
    doc = await node.lease()
    bad = node.honest(doc)
    bad["facts"][0]["lon"] += 1.0                 # refused for another reason: no build named
    r = await node.submit(doc["lease"]["leaseId"], bad, next_="1")
    assert r.status == 422 and "engineBuild" not in r.json()["error"]["details"]
    assert r.json()["error"]["message"] == "the result was rejected; nothing of it goes forward"
