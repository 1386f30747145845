"""A fake upstream server on loopback serving recorded samples in the real formats.

``sis serve --demo`` points every source at it so the service can be tried
offline; tests use the same server and change what it answers between polls.
It serves every registered adapter's samples by convention, with no table to
extend: the file ``samples/<name>/<path>`` beside the adapter's module answers
``/<name>/<path>`` (the adapter's base URL is ``{fake}/<name>``). A file's
suffix says its format and may be left off the path (``EVENTS4APP.json``
answers ``/gdacs/events/geteventlist/EVENTS4APP``). A path segment that is
an area (``w,s,e,n``, as FIRMS puts it in the path) answers any area: the
sample is one area's answer, and the adapter keeps the rows inside the one
it asked for, as it does with the real service's.
"""
from __future__ import annotations

import abc
import asyncio
import collections
import json
import mimetypes
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import tornado.httpserver
import tornado.web

from ..sources.registry import load_adapters

AREA_SEGMENT = re.compile(r"^-?[0-9.]+,-?[0-9.]+,-?[0-9.]+,-?[0-9.]+$")
FORMATS = {".json": "application/json", ".geojson": "application/geo+json", ".csv": "text/csv",
           ".xml": "application/xml", ".txt": "text/plain"}
# What the fake keeps of the requests it was sent, for tests to read, bounded so that a demo
# server asked for ever does not grow with them (one kept every Overpass body, and a count per
# distinct path, FIRMS's areas: 91k requests left 1.79 MB of bodies and 1,199 paths, growing):
# counts of the paths asked most recently, and the last bodies of the paths last posted to.
KEPT_PATHS = 1024
KEPT_BODY_PATHS = 16
KEPT_BODIES = 64


def recorded(adapters: dict | None = None) -> Iterator[tuple[str, Path]]:
    """(request path, file) of every registered adapter's recorded samples."""
    for name, cls in sorted((load_adapters() if adapters is None else adapters).items()):
        root = cls.samples_dir()
        if not root.is_dir():
            continue
        for f in sorted(root.rglob("*")):
            if f.is_file():
                rel = f.relative_to(root).as_posix()
                yield f"/{name}/{rel}", f
                if f.suffix in FORMATS:
                    yield f"/{name}/{rel[:-len(f.suffix)]}", f


def sample(source: str, path: str) -> Any:
    """A recorded JSON sample of ``source`` by its request path (for tests that vary it)."""
    for request_path, f in recorded():
        if request_path == f"/{source}/{path.lstrip('/')}":
            return json.loads(f.read_text())
    raise FileNotFoundError(f"no recorded sample of {source} at {path}")


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
        self.upstream.count(path)
        canned = self.upstream.answer(path)
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

    async def post(self, *args: str) -> None:
        """Upstreams queried by POST (Overpass) answer the same recorded file; the body is
        kept for tests to read (the last ``KEPT_BODIES`` of a path)."""
        self.upstream.keep_body(self.request.path, self.request.body)
        await self.get(*args)


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
    """Canned answers by path; ``set_json``/``set`` change them between requests. ``hits``
    counts the requests of each path (of the ``KEPT_PATHS`` asked most recently), ``bodies``
    keeps the last ``KEPT_BODIES`` bodies posted to each path (of the ``KEPT_BODY_PATHS``
    posted to most recently), newest last."""

    def __init__(self) -> None:
        self.routes: dict[str, Canned] = {}
        self.area_routes: dict[tuple[str, ...], Canned] = {}   # a path's segments, * where any area goes
        self.hits: dict[str, int] = {}
        self.bodies: dict[str, collections.deque[bytes]] = {}

    def count(self, path: str) -> None:
        """One more request of ``path``; the path asked longest ago goes past ``KEPT_PATHS``."""
        n = self.hits.pop(path, 0) + 1
        while len(self.hits) >= KEPT_PATHS:
            del self.hits[next(iter(self.hits))]
        self.hits[path] = n                      # last in order: asked most recently

    def keep_body(self, path: str, body: bytes) -> None:
        kept = self.bodies.pop(path, None)
        if kept is None:
            kept = collections.deque(maxlen=KEPT_BODIES)
        while len(self.bodies) >= KEPT_BODY_PATHS:
            del self.bodies[next(iter(self.bodies))]
        kept.append(body)
        self.bodies[path] = kept

    def answer(self, path: str) -> Canned | None:
        """The canned answer of ``path``: its own, else a recorded one for another area in the same place."""
        if path in self.routes:
            return self.routes[path]
        return self.area_routes.get(_area_free(path))

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set(self, path: str, canned: Canned) -> None:
        self.routes[path] = canned

    def set_json(self, path: str, doc: Any, status: int = 200, delay_s: float = 0.0) -> None:
        self.routes[path] = Canned(status, json.dumps(doc).encode(), "application/json", delay_s)

    def load_recorded(self, adapters: dict | None = None) -> "FakeUpstream":
        for path, f in recorded(adapters):
            kind = FORMATS.get(f.suffix) or mimetypes.guess_type(f.name)[0] or "application/octet-stream"
            self.set(path, Canned(200, f.read_bytes(), kind))
            if any(AREA_SEGMENT.match(part) for part in path.split("/")):
                self.area_routes[_area_free(path)] = self.routes[path]
        return self

    def app(self) -> tornado.web.Application:
        return tornado.web.Application([(r"/(.*)", _CannedHandler, {"upstream": self})])


def _area_free(path: str) -> tuple[str, ...]:
    return tuple("*" if AREA_SEGMENT.match(part) else part for part in path.split("/"))


async def start_demo_upstream(adapters: dict | None = None) -> FakeUpstream:
    return await FakeUpstream().load_recorded(adapters).start()
