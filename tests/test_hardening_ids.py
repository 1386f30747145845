"""Ids in paths (issue 31, item 5): an id no row can have (a job number past the
database's 64-bit integer, a lease or sweep id longer than its column) is a 404 in the
one error shape on every route that takes one, on SQLite and PostgreSQL, not a 500."""
from __future__ import annotations

import pytest

from coordinator.sweeps import jobs
from tests.test_error_shape import assert_error_shape
from tests.test_review_kit import review_db, reviewer  # noqa: F401
from tests.test_sweeps_kit import enrolled, photos  # noqa: F401

HUGE_JOBS = ["job-99999999999999999999999", "99999999999999999999999", "job-9223372036854775808",
             "job-" + "9" * 400, "job-0", "0"]


def test_a_job_id_is_parsed_once_and_bounded_to_what_a_row_can_hold():
    assert jobs.parse_job_id("job-17") == 17 == jobs.parse_job_id("17")
    assert jobs.parse_job_id("job-9223372036854775807") == 2 ** 63 - 1
    for text in HUGE_JOBS:
        assert jobs.parse_job_id(text) is None, text
    for text in ["job-", "job-x", "", "-1", "job--1", "1e3", "٣", "²", " 1", "job-1 "]:
        with pytest.raises(ValueError):
            jobs.parse_job_id(text)


@pytest.mark.parametrize("job", HUGE_JOBS)
async def test_a_job_id_no_row_can_have_is_404_on_every_review_route(review_db, job):
    auth = await reviewer(review_db)
    for method, path in [("GET", f"/review/v1/jobs/{job}"), ("POST", f"/review/v1/jobs/{job}/approve"),
                         ("POST", f"/review/v1/jobs/{job}/reject")]:
        body = None if method == "GET" else {"reason": "looked at it"}
        r = await review_db.request(method, path, body, headers=auth)
        assert r.status == 404, (path, r.status, r.body)
        assert_error_shape(r.json(), "not_found")


async def test_an_id_no_row_can_have_is_404_on_every_node_and_sweep_route(review_db):
    auth = await reviewer(review_db)
    (node,) = await enrolled(review_db, 1)
    long_id = "ls_" + "9" * 2000
    for path in [f"/node/v1/leases/{long_id}/heartbeat", f"/node/v1/leases/{long_id}/release",
                 f"/node/v1/leases/{long_id}/result"]:
        r = await review_db.post(path, {} if "result" not in path else {"schemaVersion": 1}, headers=node.auth)
        assert r.status == 404, (path[:40], r.status, r.body[:300])
        assert_error_shape(r.json(), "not_found")
    r = await review_db.post(f"/review/v1/sweeps/sr_{'9' * 2000}/approve", {}, headers=auth)
    assert r.status == 404, r.body[:300]
    assert_error_shape(r.json(), "not_found")
