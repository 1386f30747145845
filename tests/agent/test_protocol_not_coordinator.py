"""An answer that is not the coordinator's (a redirect, a captive portal's or a proxy's HTML page,
JSON without the fields the protocol promises) is no answer: the agent retries, and a spooled
result stays spooled until the coordinator itself acknowledges it."""
from __future__ import annotations

import socket

import pytest
import tornado.web
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from node_agent.protocol import Client, Lease, Unreachable

from .support import FakeEngine, make_agent

PORTAL = b"<html><body><form>Accept the terms to use this Wi-Fi</form></body></html>"


class _Answer(tornado.web.RequestHandler):
    SUPPORTED_METHODS = ("GET", "POST")

    def initialize(self, kind: str) -> None:
        self.kind = kind

    def _answer(self) -> None:
        if self.kind == "moved":
            self.set_status(301)
            self.set_header("Location", "https://coordinator.example" + self.request.uri)
            self.finish()
        elif self.kind == "html":
            self.set_header("Content-Type", "text/html; charset=UTF-8")
            self.finish(PORTAL)
        else:   # JSON, but not the coordinator's answer
            self.set_header("Content-Type", "application/json")
            self.finish(b'{"ok": true}')

    def get(self) -> None:
        self._answer()

    def post(self) -> None:
        self._answer()


@pytest.fixture
async def answering(request):
    servers = []

    def start(kind: str) -> str:
        server = HTTPServer(tornado.web.Application([(r".*", _Answer, {"kind": kind})]))
        [sock] = bind_sockets(0, "127.0.0.1", family=socket.AF_INET)
        server.add_sockets([sock])
        servers.append(server)
        return f"http://127.0.0.1:{sock.getsockname()[1]}"

    yield start
    for server in servers:
        server.stop()
        await server.close_all_connections()


WHY = {"moved": "address moved to https://coordinator.example: use that address",
       "html": "text/html, not the coordinator's JSON: is this the coordinator's address?"}


@pytest.mark.parametrize("kind", ["moved", "html"])
async def test_every_call_answered_by_a_redirect_or_a_page_is_unreachable_naming_why(answering, kind):
    url = answering(kind)
    async with Client(url, token="t", timeout_s=5) as client:
        for call in (lambda: client.lease(), lambda: client.heartbeat("ls_1"),
                     lambda: client.submit("ls_1", {"jobId": "j"}), lambda: client.enrol({}),
                     lambda: client.submit_and_lease("ls_1", {"jobId": "j"})):
            with pytest.raises(Unreachable) as got:
                await call()
            assert WHY[kind] in got.value.message


async def test_json_without_the_promised_fields_is_no_acknowledgement_nor_a_cancel(answering):
    url = answering("json")
    async with Client(url, token="t", timeout_s=5) as client:
        with pytest.raises(Unreachable, match="no 'accepted'"):
            await client.submit("ls_1", {"jobId": "j"})
        with pytest.raises(Unreachable, match="no 'accepted'"):
            await client.submit_and_lease("ls_1", {"jobId": "j"})
        with pytest.raises(Unreachable, match="no 'action'"):
            await client.heartbeat("ls_1")


@pytest.mark.parametrize("kind", ["moved", "html", "json"])
async def test_a_spooled_result_stays_spooled_and_uncounted(answering, tmp_path, kind):
    agent = make_agent(tmp_path / "a", answering(kind), FakeEngine())
    agent.spool.put("ls_1", "job-X", {"jobId": "job-X"}, {"photos": 3, "facts": 1, "seconds": 1.0})
    for ask_next in (False, True):
        assert await agent._flush_spool(ask_next=ask_next) is False
        assert [s.job_id for s in agent.spool.pending()] == ["job-X"]
        assert agent.contribution.read()["jobs"] == 0
        assert not isinstance(agent._ahead, Lease)
    if kind in WHY:
        assert WHY[kind] in agent._last_unreachable.message
    await agent.client.close()
