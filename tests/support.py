"""Test support: a real coordinator on a loopback port and a small HTTP client."""
from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPRequest, HTTPResponse

from coordinator.faces.app import make_app
from coordinator.faces.server import make_server
from coordinator.demo.upstream import FakeUpstream
from coordinator.services import Services, create_services
from coordinator.core.settings import Settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Response:
    status: int
    headers: Any
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Coordinator:
    services: Services
    base_url: str
    server: Any

    async def request(self, method: str, path: str, body: Any = None, headers: dict | None = None,
                      timeout: float = 30) -> Response:
        data = None
        hdrs = dict(headers or {})
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            hdrs.setdefault("Content-Type", "application/json")
        req = HTTPRequest(self.base_url + path, method=method, body=data, headers=hdrs,
                          allow_nonstandard_methods=True, request_timeout=timeout)
        resp: HTTPResponse = await AsyncHTTPClient().fetch(req, raise_error=False)
        return Response(resp.code, resp.headers, resp.body or b"")

    async def get(self, path: str, **kw: Any) -> Response:
        return await self.request("GET", path, **kw)

    async def post(self, path: str, body: Any = None, **kw: Any) -> Response:
        return await self.request("POST", path, body=body if body is not None else b"", **kw)


async def start_coordinator(settings: Settings, registry=None) -> Coordinator:
    services = await create_services(settings, registry, start_background=False)
    app = make_app(services)
    port = free_port()
    server = make_server(app, settings)
    server.listen(port, "127.0.0.1")
    return Coordinator(services, f"http://127.0.0.1:{port}", server)


async def stop_coordinator(c: Coordinator) -> None:
    c.server.stop()
    await c.server.close_all_connections()
    await c.services.close()


def make_settings(db_url: str, upstream: FakeUpstream | None = None, *, photos_url: str | None = None,
                  sources: dict | None = None, **kw: Any) -> Settings:
    """Settings for a test coordinator: every registered source pointed at the fake upstream
    (where its recorded samples are served), the photo provider at ``photos_url``."""
    from coordinator.sources.registry import load_adapters

    base = upstream.base_url if upstream else "http://127.0.0.1:9"
    nested = {name: {"base_url": f"{base}/{name}"} for name in load_adapters()}
    nested["panoramax"] = {"base_url": photos_url or "http://127.0.0.1:9", "timeout_s": 5}
    for name, extra in (sources or {}).items():
        nested[name] = {**nested.get(name, {}), **extra}
    return Settings(database_url=db_url, sources=nested, source_timeout_s=kw.pop("source_timeout_s", 3),
                    poll_interval_s=0, **kw)




def fixed_clock(monkeypatch, panel, at: Any):  # noqa: ANN001, ANN201
    """A panel's clock (``panels.freshness.utc_now``, imported by name into its module) fixed at
    ``at``, never today; returns a function that moves it (``clock(t)``)."""
    def move(t: Any) -> None:
        monkeypatch.setattr(panel, "utc_now", lambda: t)
    move(at)
    return move
