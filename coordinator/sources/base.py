"""The ``Source`` contract: one adapter per upstream.

An adapter has a name (its key in the source registry and in settings), a
license, a base URL that configuration can point anywhere (tests and
``--demo`` point it at a local fake), a timeout, an API key where the upstream
needs one, and a parser of the upstream's real format. ``read(query)`` takes
what the tool asks (a bbox, a point and radius, ids, a limit) and never raises
for upstream trouble: a timeout, an error status, a missing key or a body that
does not parse becomes an unusable ``SourceReport`` and the tool answers with
what it has.

Its recorded samples live beside its module, in ``samples/<name>/``, as the
paths the upstream answers under its base URL; the demo upstream and the tests'
fake serve them from there (``coordinator.demo.upstream``).
"""
from __future__ import annotations

import abc
import asyncio
import inspect
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, ClassVar, Generic, Mapping, Sequence, TypeVar
from urllib.parse import urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from coordinator.core.honesty import SourceReport

log = logging.getLogger("sis.sources")
T = TypeVar("T")

USER_AGENT = "SpatialIntelligenceService/0.1 (+https://github.com/)"


class SourceError(Exception):
    """The upstream answered, but not with something usable."""


# What a parser raises on an upstream answer it cannot read (``Source.read``): LookupError
# (KeyError, IndexError), a wrong type or value, and ArithmeticError and OSError, which
# ``datetime.fromtimestamp`` raises for a time past what the platform holds (10**20 s).
PARSE_ERRORS = (LookupError, TypeError, ValueError, AttributeError, ArithmeticError, OSError)


async def fetch(url: str, timeout_s: float, accept: str = "application/json",
                headers: Mapping[str, str] | None = None, form: Mapping[str, str] | None = None) -> tuple[int, bytes]:
    """GET ``url`` from an upstream (POST ``form`` url-encoded, for an upstream that takes
    its query in a body: Overpass): (status, body), or SourceError when it cannot be reached.
    ``raise_error=False`` still raises Tornado's 599 family (a timeout, a connection closed
    mid-answer), so those are caught here as well as the operating system's errors."""
    extra = {"Content-Type": "application/x-www-form-urlencoded"} if form is not None else {}
    req = HTTPRequest(url, method="GET" if form is None else "POST", connect_timeout=timeout_s,
                      request_timeout=timeout_s, body=None if form is None else urlencode(form),
                      headers={"User-Agent": USER_AGENT, "Accept": accept, **extra, **(headers or {})},
                      follow_redirects=True, max_redirects=3)
    try:
        resp = await AsyncHTTPClient().fetch(req, raise_error=False)
    except HTTPClientError as exc:
        raise SourceError(f"unreachable: {exc}") from exc
    except OSError as exc:
        raise SourceError(f"unreachable: {exc.strerror or exc}") from exc
    if resp.code == 599:
        raise SourceError(f"unreachable: {resp.error}")
    return resp.code, resp.body or b""


@dataclass(frozen=True)
class Query:
    """What a tool asks of a source. Global feeds ignore it; area sources read ``bbox``
    (w, s, e, n) or ``point`` (lat, lon) with ``radius_m``; lookups read ``ids``."""

    bbox: tuple[float, float, float, float] | None = None
    point: tuple[float, float] | None = None
    radius_m: float | None = None
    ids: tuple[str, ...] = ()
    limit: int | None = None
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SourceConfig:
    """An adapter's resolved settings (``sources.registry.config_for``)."""

    base_url: str
    timeout_s: float
    api_key: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    key_setting: str = ""          # where the key is set, named when it is missing


@dataclass
class SourceRead(Generic[T]):
    records: list[T]
    report: SourceReport
    # A source read in parts (``Source.read_parts``: a feed, a sea area each): one report per part, so
    # that a part down is named and counted on its own while the others still answer.
    parts: list[SourceReport] = field(default_factory=list)

    @property
    def reports(self) -> list[SourceReport]:
        """What an answer's health lists of this read: its parts where it was read in parts."""
        return self.parts or [self.report]


class Parts(list):
    """Records read in parts, with each part's outcome: (part, its records or None, its error)."""

    def __init__(self, records: list, outcomes: list[tuple[str, int | None, str | None]]) -> None:
        super().__init__(records)
        self.outcomes = outcomes


class Source(abc.ABC, Generic[T]):
    """Subclasses declare their name, license and defaults, and implement ``fetch``."""

    name: ClassVar[str] = "source"                       # registry and settings key, lower case
    label: ClassVar[str] = ""                            # the name health reports (default: name)
    license: ClassVar[str] = "unknown"
    default_base_url: ClassVar[str] = ""
    default_timeout_s: ClassVar[float | None] = None     # None: SIS_SOURCE_TIMEOUT_S
    options: ClassVar[Mapping[str, Any]] = {}            # the adapter's own settings and their defaults
    needs_key: ClassVar[bool] = False
    takes_key: ClassVar[bool] = False    # a key it sends where one is set, and works without (a model server)
    # The key a keyed adapter sends in --demo, where its recorded sample answers (FIRMS's sits in
    # the path); None where no sample is recorded, so the demo says the key is missing. A real
    # key is never sent to the demo upstream.
    demo_api_key: ClassVar[str | None] = None
    description: ClassVar[str] = ""

    def __init__(self, config: SourceConfig, *, demo: bool = False) -> None:
        self.config = config
        self.base_url = config.base_url.rstrip("/")
        self.timeout_s = config.timeout_s
        self.api_key = (self.demo_api_key if self.needs_key else None) if demo else config.api_key
        self.demo = demo

    @classmethod
    def setting_keys(cls) -> list[str]:
        """The settings this source takes (``SIS_SOURCES__<NAME>__<KEY>``, or ``[sources.<name>]``
        keys), lower case: base_url, timeout_s, the key's two ways where it needs one, then its
        own options."""
        return ["base_url", "timeout_s", *(("api_key", "api_key_file") if cls.needs_key or cls.takes_key else ()),
                *(o.lower() for o in cls.options)]

    @classmethod
    def untaken(cls, own: Any) -> list[str]:
        """The settings given in ``own`` (its ``SourceSettings``, or None) that this source does
        not take, sorted: options it does not declare, and a key (``api_key``, ``api_key_file``)
        where it sends none, which every source's settings can hold and which was otherwise
        accepted and never used."""
        if own is None:
            return []
        given = set(own.model_extra or {}) | {k for k in ("api_key", "api_key_file") if getattr(own, k) is not None}
        return sorted(k for k in given if k not in cls.options and k not in cls.setting_keys())

    @classmethod
    def at(cls, base_url: str, timeout_s: float = 8.0, **options: Any) -> "Source[T]":
        """An adapter pointed at ``base_url`` with no settings behind it (scripts and tests)."""
        return cls(SourceConfig(base_url, timeout_s, options=options))

    @classmethod
    def samples_dir(cls) -> Path:
        """Where this adapter's recorded samples live: ``samples/<name>/`` beside its module."""
        return Path(inspect.getfile(cls)).parent / "samples" / cls.name

    @property
    def report_name(self) -> str:
        return self.label or self.name

    def option(self, name: str) -> Any:
        return self.config.options.get(name, self.options[name])

    def url(self, path: str, params: dict[str, Any] | None = None) -> str:
        return f"{self.base_url}{path}" + ("?" + urlencode(params) if params else "")

    async def get(self, path: str, params: dict[str, Any] | None = None,
                  headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
        """``headers``: for an upstream that takes its key in a header (a bearer token)."""
        return await fetch(self.url(path, params), self.timeout_s, headers=headers)

    async def get_json(self, path: str, params: dict[str, Any] | None = None,
                       empty_statuses: tuple[int, ...] = ()) -> Any:
        return await self.get_json_at(self.url(path, params), empty_statuses=empty_statuses)

    async def get_json_at(self, url: str, *, empty_statuses: tuple[int, ...] = (),
                          accept: str = "application/json") -> Any:
        """JSON from a whole URL (a next-page link an upstream gave); SourceError unless 200.
        None means one of ``empty_statuses`` (GDACS's 204: no events), and only that: a 200
        whose body is JSON ``null`` is no answer at all, so it is a SourceError there (served
        as "no events" it was healthy, cached, and briefs of current events answered 404)."""
        code, body = await fetch(url, self.timeout_s, accept=accept)
        if code in empty_statuses:
            return None
        if code != 200:
            raise SourceError(f"HTTP {code}")
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise SourceError("answer is not JSON") from exc
        if doc is None and empty_statuses:
            raise SourceError("answer is JSON null, not a listing")
        return doc

    @abc.abstractmethod
    async def fetch(self, query: Query) -> list[T]:
        """Fetch and parse the upstream; raise SourceError (or a parse error) when unusable."""

    async def read(self, query: Query | None = None) -> SourceRead[T]:
        if self.needs_key and not self.api_key:
            return self._failed(f"needs an API key: set {self.config.key_setting} or {self.config.key_setting}_FILE")
        try:
            records = await self.fetch(query or Query())
        except SourceError as exc:
            return self._failed(str(exc))
        except PARSE_ERRORS as exc:
            # What an upstream's odd answer raises in a parser (a missing key, a text where a
            # number was, a time past what datetime holds: OverflowError, or OSError from the
            # platform's clock functions). The source is degraded, named; the traceback is
            # logged so a parser's own bug is still found.
            log.warning("%s: unparseable answer: %r", self.report_name, exc, exc_info=True)
            return self._failed(f"unparseable answer ({type(exc).__name__})")
        except Exception as exc:  # noqa: BLE001
            # Anything else is a bug of the adapter, not the upstream's fault; it still must not
            # turn every answer that reads this source (the whole twin) into a 500. Logged as
            # an error with its traceback; the source is degraded, named.
            log.exception("%s: adapter failed reading its answer", self.report_name)
            return self._failed(f"adapter failed reading the answer ({type(exc).__name__})")
        report = SourceReport(self.report_name, self.license, ok=True, records=len(records), demo=self.demo)
        parts = [SourceReport(f"{self.report_name} {part}", self.license, ok=error is None, error=error,
                              records=n, demo=self.demo) for part, n, error in getattr(records, "outcomes", ())]
        return SourceRead(list(records), report, parts)

    async def read_parts(self, parts: Sequence[str], one: Callable[[str], Awaitable[list[T]]]) -> Parts:
        """``fetch`` of a source whose configured parts (WAQI feeds, BMKG sea areas) are asked one by
        one: a part that fails (``SourceError``, or an answer its parser cannot read) is reported apart,
        the others still answer; every part failing is the source failing. (One feed of several down
        emptied the whole panel.) ``parts`` are named as health names them, e.g. "feed @1234"."""
        outs = await asyncio.gather(*(one(p) for p in parts), return_exceptions=True)
        records: list[T] = []
        outcomes: list[tuple[str, int | None, str | None]] = []
        for part, out in zip(parts, outs):
            if isinstance(out, SourceError):
                outcomes.append((part, None, str(out)))
            elif isinstance(out, PARSE_ERRORS):
                log.warning("%s %s: unparseable answer: %r", self.report_name, part, out, exc_info=out)
                outcomes.append((part, None, f"unparseable answer ({type(out).__name__})"))
            elif isinstance(out, BaseException):
                raise out
            else:
                records.extend(out)
                outcomes.append((part, len(out), None))
        if all(error for _, _, error in outcomes):
            raise SourceError("; ".join(f"{part}: {error}" for part, _, error in outcomes))
        return Parts(records, outcomes)

    def _failed(self, error: str) -> SourceRead[T]:
        log.info("source %s unusable: %s", self.report_name, error)
        return SourceRead([], SourceReport(self.report_name, self.license, ok=False, error=error, demo=self.demo))
