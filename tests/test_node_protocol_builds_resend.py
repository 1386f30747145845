"""A result accepted before its engine build was withdrawn, sent again (a retry after a lost
answer) with ``?next=1``: it is answered as it was first (accepted, ``duplicate: true``), and
no next job is leased to the withdrawn build; the answer says so as a refused lease does. It
leased one before: a job whose result would be refused 422 for its build."""
from __future__ import annotations

from sqlalchemy import func, select

import pytest

from coordinator.core.db.models import SweepLease
from coordinator.demo.photos import DEV_ENGINE_BUILD
from coordinator.sweeps.service import sweeps_of
from node_agent.protocol import Client, Refused, build_refusal
from tests.support import stop_coordinator
from tests.test_error_shape import assert_error_shape
from tests.test_sweeps_kit import CENTRE, enrolled, photos, request_sweep, start  # noqa: F401

NEW_BUILD = "sha256:" + "e" * 64        # the build of a node app released since


@pytest.fixture
async def four_jobs(db_url, photos):  # noqa: F811
    """A coordinator on each database whose jobs hold one photo each, four of them."""
    photos.scatter(*CENTRE, radius_m=300, n=4, seed=1)
    c = await start(db_url, photos, job_max_photos=1)
    assert (await request_sweep(c, radius=300)).json()["jobs"] == 4
    yield c
    await stop_coordinator(c)


async def lease_count(c) -> int:
    async with c.services.db.read() as s:
        return (await s.execute(select(func.count()).select_from(SweepLease))).scalar_one()


async def test_a_resend_of_a_result_whose_build_was_withdrawn_since_leases_no_next_job(four_jobs):
    c = four_jobs
    settings = sweeps_of(c.services).settings
    (node,) = await enrolled(c, trusted=True)
    doc = await node.lease()
    lid, body = doc["lease"]["leaseId"], node.honest(doc)
    first = await node.submit(lid, body, next_="1")          # its answer is lost: the node sends it again
    assert first.status == 200 and first.json()["accepted"] and first.json()["next"] is not None
    assert await lease_count(c) == 2

    again = await node.submit(lid, body, next_="1")          # the build still accepted: leased as before
    assert again.status == 200 and again.json()["duplicate"] and again.json()["next"] is not None
    assert "nextRefused" not in again.json()
    assert await lease_count(c) == 3

    settings.engine_builds = NEW_BUILD                       # the operator withdraws the node's build
    r = await node.submit(lid, body, next_="1")
    assert r.status == 200, r.body
    answer = r.json()
    assert (answer["accepted"], answer["duplicate"], answer["resultState"]) == (True, True, "accepted")
    assert "next" not in answer                              # no job now: an agent leases apart
    refused = answer["nextRefused"]                          # as a lease naming the build is refused
    assert_error_shape(refused, "forbidden")
    assert refused["error"]["details"] == {"engineBuild": DEV_ENGINE_BUILD}
    assert "download the current node app" in refused["error"]["message"]
    assert "Retry-After" not in r.headers
    assert await lease_count(c) == 3                         # no lease was made

    r = await node.submit(lid, body)                         # no next asked for: nothing said of one
    assert r.status == 200 and r.json()["duplicate"] and "next" not in r.json() and "nextRefused" not in r.json()
    settings.engine_builds = f"{NEW_BUILD},{DEV_ENGINE_BUILD}"   # accepted again: leased again
    r = await node.submit(lid, body, next_="1")
    assert r.status == 200 and r.json()["next"] is not None and "nextRefused" not in r.json()
    assert await lease_count(c) == 4


async def test_the_node_agent_reads_the_refused_next_lease_as_none_and_its_lease_stops_it(four_jobs):
    """The agent's client (``submit_and_lease``) takes an answer without ``next`` as the result
    acknowledged and no next job said: the agent then leases apart, naming its build, and that
    lease's 403 is the build refusal the agent stops at (``build_refusal``)."""
    c = four_jobs
    (node,) = await enrolled(c, trusted=True)
    doc = await node.lease()
    lid, body = doc["lease"]["leaseId"], node.honest(doc)
    async with Client(c.base_url, token=node.token, engine_build=DEV_ENGINE_BUILD) as client:
        assert (await client.submit(lid, body))["accepted"]     # the body as the agent writes it
        sweeps_of(c.services).settings.engine_builds = NEW_BUILD
        answer, nxt = await client.submit_and_lease(lid, body)
        assert answer["accepted"] and answer["duplicate"] and nxt is None
        with pytest.raises(Refused) as refused:
            await client.lease()
    assert refused.value.status == 403 and build_refusal(refused.value, DEV_ENGINE_BUILD) == DEV_ENGINE_BUILD
    assert await lease_count(c) == 1


async def test_a_lease_naming_no_build_is_served_whatever_build_its_node_enrolled_with(four_jobs):
    """An agent keeps its enrolment across node-app upgrades, so the build a node enrolled with
    (``nodes.engine_build``) is not the one it runs: a node enrolled with a build since withdrawn,
    running an accepted one and naming none at lease (an agent older than the field), is served,
    and its results are accepted. Refusing it by its enrolled build would stop a working node."""
    c = four_jobs
    (node,) = await enrolled(c, trusted=True)                # enrolled with DEV_ENGINE_BUILD
    sweeps_of(c.services).settings.engine_builds = NEW_BUILD  # withdrawn; the node upgraded to NEW_BUILD
    doc = await node.lease()                                 # an empty body: no build named
    r = await node.submit(doc["lease"]["leaseId"], node.honest(doc, engine_build=NEW_BUILD), next_="1")
    assert r.status == 200 and r.json()["accepted"] and r.json()["next"] is not None, r.body
    r = await c.post("/node/v1/lease", {"engineBuild": DEV_ENGINE_BUILD}, headers=node.auth)
    assert r.status == 403 and r.json()["error"]["details"] == {"engineBuild": DEV_ENGINE_BUILD}
