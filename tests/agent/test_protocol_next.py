"""``submit_and_lease``: what the agent makes of a result's answer about the next job."""
from __future__ import annotations

import socket

import pytest
import tornado.web
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from node_agent.protocol import Client, Lease, NoWork

TAKEN = {"accepted": True, "resultState": "accepted", "jobState": "in_review", "reasons": [], "duplicate": False}


class _Result(tornado.web.RequestHandler):
    def initialize(self, answer: dict) -> None:
        self.answer = answer

    def post(self, _lease: str) -> None:
        if self.answer.get("next", 0) is None:
            self.set_header("Retry-After", "45")
        self.finish(self.answer)


async def _submit(answer: dict):
    server = HTTPServer(tornado.web.Application([(r"/node/v1/leases/([^/]+)/result", _Result, {"answer": answer})]))
    [sock] = bind_sockets(0, "127.0.0.1", family=socket.AF_INET)
    server.add_sockets([sock])
    try:
        async with Client(f"http://127.0.0.1:{sock.getsockname()[1]}", token="t") as client:
            return await client.submit_and_lease("ls_1", {"jobId": "j"})
    finally:
        server.stop()
        await server.close_all_connections()


async def test_the_next_lease_comes_with_the_answer():
    lease = {"lease": {"leaseId": "ls_2", "expiresAt": "2026-11-22T12:00:00Z", "heartbeatS": 200}, "job": {"jobId": "j2"}}
    answer, nxt = await _submit({**TAKEN, "next": lease})
    assert answer["accepted"] and isinstance(nxt, Lease)
    assert (nxt.lease_id, nxt.job, nxt.heartbeat_s) == ("ls_2", {"jobId": "j2"}, 200.0)


async def test_no_job_waiting_is_no_work_with_the_coordinators_retry_after():
    answer, nxt = await _submit({**TAKEN, "next": None})
    assert answer["accepted"] and nxt == NoWork(45.0)


@pytest.mark.parametrize("answer", [TAKEN, {**TAKEN, "next": {"job": {"jobId": "j2"}}}, {**TAKEN, "next": [1]}],
                         ids=["a coordinator without next", "a lease without its id", "not an object"])
async def test_an_answer_without_a_usable_next_lease_still_acknowledges_the_result(answer):
    got, nxt = await _submit(answer)
    assert got["accepted"] and nxt is None          # the agent then asks the lease route
