"""A fake upstream server on loopback serving recorded samples in the real formats.

``sis serve --demo`` points every source at it so the service can be tried
offline; tests use the same server and change what it answers between polls.
Routes: ``/gdacs/events/geteventlist/EVENTS4APP`` and ``/usgs/{feed}.geojson``.
"""
from __future__ import annotations

import abc
import asyncio
import json
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tornado.httpserver
import tornado.web

SAMPLES = Path(__file__).parent / "samples"


def sample(name: str) -> Any:
    return json.loads((SAMPLES / name).read_text())


@dataclass
class Canned:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    delay_s: float = 0.0


class _CannedHandler(tornado.web.RequestHandler):
    def initialize(self, upstream: "FakeUpstream") -> None:
        self.upstream = upstream

    async def get(self, *_: str) -> None:
        path = self.request.path
        self.upstream.hits[path] = self.upstream.hits.get(path, 0) + 1
        canned = self.upstream.routes.get(path)
        if canned is None:
            self.set_status(404)
            self.finish("not found")
            return
        if canned.delay_s:
            await asyncio.sleep(canned.delay_s)
        self.set_status(canned.status)
        if canned.body:
            self.set_header("Content-Type", canned.content_type)
            self.finish(canned.body)
        else:
            self.finish()


class LoopbackServer(abc.ABC):
    """A small Tornado app on a free loopback port (the demo fakes), started and stopped cleanly."""

    server: tornado.httpserver.HTTPServer | None = None
    port = 0

    @abc.abstractmethod
    def app(self) -> tornado.web.Application:
        """The Tornado application this server serves."""

    async def start(self):  # noqa: ANN201 - returns self, typed by each subclass
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self.server = tornado.httpserver.HTTPServer(self.app())
        self.server.add_sockets([sock])
        return self

    async def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            await self.server.close_all_connections()
            self.server = None


class FakeUpstream(LoopbackServer):
    """Canned answers by path; ``set_json``/``set`` change them between requests."""

    def __init__(self) -> None:
        self.routes: dict[str, Canned] = {}
        self.hits: dict[str, int] = {}

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set(self, path: str, canned: Canned) -> None:
        self.routes[path] = canned

    def set_json(self, path: str, doc: Any, status: int = 200, delay_s: float = 0.0) -> None:
        self.routes[path] = Canned(status, json.dumps(doc).encode(), "application/json", delay_s)

    def load_recorded(self) -> "FakeUpstream":
        self.set_json("/gdacs/events/geteventlist/EVENTS4APP", sample("gdacs_events4app.json"))
        for feed in ("4.5_week", "4.5_day", "significant_week", "2.5_day"):
            self.set_json(f"/usgs/{feed}.geojson", sample("usgs_4.5_week.geojson"))
        return self

    def app(self) -> tornado.web.Application:
        return tornado.web.Application([(r"/(.*)", _CannedHandler, {"upstream": self})])


async def start_demo_upstream() -> FakeUpstream:
    return await FakeUpstream().load_recorded().start()
