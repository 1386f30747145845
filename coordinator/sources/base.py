"""The ``Source`` contract: one adapter per upstream.

An adapter has a name, a license, a base URL that configuration can point
anywhere (tests and ``--demo`` point it at a local fake), a timeout and a
parser of the upstream's real format. ``read()`` never raises for upstream
trouble: a timeout, an error status or a body that does not parse becomes an
unusable ``SourceReport`` and the tool answers with what it has.
"""
from __future__ import annotations

import abc
import json
import logging
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from ..honesty import SourceReport

log = logging.getLogger("sis.sources")
T = TypeVar("T")

USER_AGENT = "SpatialIntelligenceService/0.1 (+https://github.com/)"


class SourceError(Exception):
    """The upstream answered, but not with something usable."""


async def fetch(url: str, timeout_s: float, accept: str = "application/json") -> tuple[int, bytes]:
    """GET ``url`` from an upstream: (status, body), or SourceError when it cannot be reached.
    ``raise_error=False`` still raises Tornado's 599 family (a timeout, a connection closed
    mid-answer), so those are caught here as well as the operating system's errors."""
    req = HTTPRequest(url, method="GET", connect_timeout=timeout_s, request_timeout=timeout_s,
                      headers={"User-Agent": USER_AGENT, "Accept": accept}, follow_redirects=True,
                      max_redirects=3)
    try:
        resp = await AsyncHTTPClient().fetch(req, raise_error=False)
    except HTTPClientError as exc:
        raise SourceError(f"unreachable: {exc}") from exc
    except OSError as exc:
        raise SourceError(f"unreachable: {exc.strerror or exc}") from exc
    if resp.code == 599:
        raise SourceError(f"unreachable: {resp.error}")
    return resp.code, resp.body or b""


@dataclass
class SourceRead(Generic[T]):
    records: list[T]
    report: SourceReport


class Source(abc.ABC, Generic[T]):
    name = "source"
    license = "unknown"

    def __init__(self, base_url: str, timeout_s: float, *, demo: bool = False) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.demo = demo

    async def get(self, path: str, params: dict[str, Any] | None = None) -> tuple[int, bytes]:
        url = f"{self.base_url}{path}"
        if params:
            url += "?" + urlencode(params)
        return await fetch(url, self.timeout_s)

    async def get_json(self, path: str, params: dict[str, Any] | None = None,
                       empty_statuses: tuple[int, ...] = ()) -> Any:
        code, body = await self.get(path, params)
        if code in empty_statuses:
            return None
        if code != 200:
            raise SourceError(f"HTTP {code}")
        try:
            return json.loads(body)
        except ValueError as exc:
            raise SourceError("answer is not JSON") from exc

    @abc.abstractmethod
    async def fetch(self) -> list[T]:
        """Fetch and parse the upstream; raise SourceError (or a parse error) when unusable."""

    async def read(self) -> SourceRead[T]:
        try:
            records = await self.fetch()
        except SourceError as exc:
            return self._failed(str(exc))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            log.warning("%s: unparseable answer: %r", self.name, exc)
            return self._failed(f"unparseable answer ({type(exc).__name__})")
        return SourceRead(records, SourceReport(self.name, self.license, ok=True,
                                                records=len(records), demo=self.demo))

    def _failed(self, error: str) -> SourceRead[T]:
        log.info("source %s unusable: %s", self.name, error)
        return SourceRead([], SourceReport(self.name, self.license, ok=False, error=error, demo=self.demo))
