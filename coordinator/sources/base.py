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

Fetching is shared by every source and bounded twice, so that one upstream that hangs
cannot hold up the others: the process's upstream HTTP client (one per event loop, its
own, not Tornado's shared one) runs up to ``MAX_FETCHES`` at once, and each source at most
its ``max_in_flight`` of them (Overpass's public servers take two per client). A fetch
that waits for one of its source's slots waits within its own timeout; one that gets none
in time fails saying its source already has that many in flight.
"""
from __future__ import annotations

import abc
import asyncio
import contextlib
import inspect
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, ClassVar, Generic, Mapping, Sequence, TypeVar
from urllib.parse import urlencode, urlsplit, urlunsplit

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest, HTTPResponse

from coordinator.core.honesty import SourceReport
from coordinator.core.text import one_line
from coordinator.sources.outages import Outages
from coordinator.sources.values import storable_text

log = logging.getLogger("sis.sources")
T = TypeVar("T")

USER_AGENT = "SpatialIntelligenceService/0.1 (+https://github.com/)"


def env_name(source: str, key: str) -> str:
    """The environment variable of a source's setting: ``SIS_SOURCES__GDACS__BASE_URL``."""
    return f"SIS_SOURCES__{source.upper()}__{key.upper()}"


def shown_url(url: str) -> str:
    """``url`` as a log line names it: without a user and password, a query or a fragment."""
    try:
        p = urlsplit(url)
    except ValueError:
        return one_line(url, 200)
    return one_line(urlunsplit((p.scheme, p.netloc.rpartition("@")[2], p.path, "", "")), 200)


class SourceError(Exception):
    """The upstream answered, but not with something usable. The message often quotes the
    upstream (FRED's ``error_message``, WAQI's ``data``): it is kept to one line of bounded
    length (``one_line``), since it is logged and served in ``health.sources[].error``, and an
    upstream's newline or terminal escape would otherwise forge a log line."""

    def __init__(self, message: str = "") -> None:
        super().__init__(one_line(str(message)))


# What a parser raises on an upstream answer it cannot read (``Source.read``): LookupError
# (KeyError, IndexError), a wrong type or value, and ArithmeticError and OSError, which
# ``datetime.fromtimestamp`` raises for a time past what the platform holds (10**20 s).
PARSE_ERRORS = (LookupError, TypeError, ValueError, AttributeError, ArithmeticError, OSError)


# Fetches to upstreams one process runs at once (on one event loop), every source together;
# more wait in the client's queue. Tornado's shared client runs 10, so that one upstream that
# hung held every fetch of the others (each source now also has its own cap, ``max_in_flight``).
MAX_FETCHES = 100

# Least of its timeout a fetch given a slot late must have left to be sent at all.
MIN_LEFT_S = 0.25
_clients: dict[asyncio.AbstractEventLoop, AsyncHTTPClient] = {}


def upstream_client() -> AsyncHTTPClient:
    """The upstream HTTP client of the running event loop: an instance of its own (Tornado's
    configured class, with ``MAX_FETCHES`` slots), so that neither its slots nor its settings
    are shared with other clients of the process (a test's, the photo fetches of a node), and
    ``AsyncHTTPClient.configure`` is left to others. Clients of loops since closed are dropped."""
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        for old in [lp for lp in _clients if lp.is_closed()]:
            with contextlib.suppress(Exception):     # its loop is gone; nothing of it is used again
                _clients.pop(old).close()
        client = _clients[loop] = AsyncHTTPClient(force_instance=True, max_clients=MAX_FETCHES)
    return client


class _Slots:
    """One source's fetches in flight on one event loop: at most ``cap``."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.free = asyncio.Semaphore(cap)
        self.in_flight = 0
        self.waiting = 0

    def give_back(self) -> None:
        self.in_flight -= 1
        self.free.release()

    def given_back(self, answer: asyncio.Future) -> None:
        """``give_back`` when a request ends; its error is its reader's, if one still waits."""
        if not answer.cancelled():
            answer.exception()
        self.give_back()


async def send(req: HTTPRequest, timeout_s: float, source: "Source | None" = None) -> HTTPResponse:
    """``req`` sent on the upstream client (``raise_error=False``), in one of ``source``'s slots
    (none: a fetch of no source, a photo or the widgets' CLI). Waiting for a slot counts against
    ``timeout_s``: the request is then given what is left of it. No slot within ``timeout_s``
    is a SourceError saying that the source already has its most fetches in flight."""
    if source is None:
        return await upstream_client().fetch(req, raise_error=False)
    slots = source._slots()
    loop = asyncio.get_running_loop()
    started = loop.time()

    def crowded() -> SourceError:
        # cap, not in_flight: those it waited on may have ended in the same instant.
        return SourceError(f"not asked: {slots.cap} fetches to this source were already in flight (its most at "
                           f"once) and none ended within its {timeout_s:g} s timeout ({slots.waiting} more waiting)")

    if slots.free.locked():
        slots.waiting += 1
        try:
            await asyncio.wait_for(slots.free.acquire(), timeout_s)
        except asyncio.TimeoutError:
            slots.waiting -= 1
            raise crowded() from None
        except BaseException:                # cancelled (its client gone): no longer waiting either
            slots.waiting -= 1
            raise
        slots.waiting -= 1
        # A slot freed as the wait ran out leaves the request next to nothing of its timeout: not sent
        # (it could only time out), and said as the wait's end, whichever of the two came first.
        if timeout_s - (loop.time() - started) < min(MIN_LEFT_S, timeout_s / 4):
            slots.free.release()
            raise crowded()
    else:
        await slots.free.acquire()           # a slot is free: taken at once
    slots.in_flight += 1
    left = max(timeout_s - (loop.time() - started), 0.001)
    req.request_timeout = min(req.request_timeout or left, left)
    req.connect_timeout = min(req.connect_timeout or left, left)
    try:
        answer = upstream_client().fetch(req, raise_error=False)
    except BaseException:
        slots.give_back()
        raise
    # The slot is the request's until it ends (within what is left of its timeout), even where
    # the read that sent it is cancelled (a client gone): a cancelled Tornado fetch runs on.
    answer.add_done_callback(slots.given_back)
    return await asyncio.shield(answer)


async def fetch(url: str, timeout_s: float, accept: str = "application/json",
                headers: Mapping[str, str] | None = None, form: Mapping[str, str] | None = None, *,
                source: "Source | None" = None) -> tuple[int, bytes]:
    """GET ``url`` from an upstream (POST ``form`` url-encoded, for an upstream that takes
    its query in a body: Overpass): (status, body), or SourceError when it cannot be reached.
    ``raise_error=False`` still raises Tornado's 599 family (a timeout, a connection closed
    mid-answer), so those are caught here as well as the operating system's errors. It takes
    one of ``source``'s slots (``send``): a source's own fetch passes itself."""
    extra = {"Content-Type": "application/x-www-form-urlencoded"} if form is not None else {}
    req = HTTPRequest(url, method="GET" if form is None else "POST", connect_timeout=timeout_s,
                      request_timeout=timeout_s, body=None if form is None else urlencode(form),
                      headers={"User-Agent": USER_AGENT, "Accept": accept, **extra, **(headers or {})},
                      follow_redirects=True, max_redirects=3)
    try:
        resp = await send(req, timeout_s, source)
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
    # Most fetches to this upstream in flight at once (per process and event loop); more wait,
    # within their timeout, so that one source that hangs holds at most this many of the
    # process's ``MAX_FETCHES``. Lower where the upstream allows a client fewer (Overpass).
    max_in_flight: ClassVar[int] = 8

    def __init__(self, config: SourceConfig, *, demo: bool = False) -> None:
        self.config = config
        self.base_url = config.base_url.rstrip("/")
        self.timeout_s = config.timeout_s
        self.api_key = (self.demo_api_key if self.needs_key else None) if demo else config.api_key
        self.demo = demo

    def _slots(self) -> _Slots:
        """This source's fetch slots on the running event loop (a new set on a new loop)."""
        loop = asyncio.get_running_loop()
        held = getattr(self, "_slots_of", None)
        if held is None or held[0] is not loop:
            held = self._slots_of = (loop, _Slots(max(1, int(self.max_in_flight))))
        return held[1]

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
        return await fetch(self.url(path, params), self.timeout_s, headers=headers, source=self)

    async def get_json(self, path: str, params: dict[str, Any] | None = None,
                       empty_statuses: tuple[int, ...] = ()) -> Any:
        return await self.get_json_at(self.url(path, params), empty_statuses=empty_statuses)

    async def get_json_at(self, url: str, *, empty_statuses: tuple[int, ...] = (),
                          accept: str = "application/json") -> Any:
        """JSON from a whole URL (a next-page link an upstream gave); SourceError unless 200.
        None means one of ``empty_statuses`` (GDACS's 204: no events), and only that: a 200
        whose body is JSON ``null`` is no answer at all, so it is a SourceError there (served
        as "no events" it was healthy, cached, and briefs of current events answered 404)."""
        code, body = await fetch(url, self.timeout_s, accept=accept, source=self)
        if code in empty_statuses:
            return None
        if code != 200:
            raise SourceError(f"HTTP {code}")
        try:
            doc = storable_text(json.loads(body), body)
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
            return self._unkeyed()
        try:
            records = await self.fetch(query or Query())
        except SourceError as exc:
            return self._failed(str(exc))
        except PARSE_ERRORS as exc:
            # What an upstream's odd answer raises in a parser (a missing key, a text where a
            # number was, a time past what datetime holds: OverflowError, or OSError from the
            # platform's clock functions). The source is degraded, named; the traceback is
            # logged (with the outage's first failure of the kind) so a parser's own bug is still found.
            return self._failed(f"unparseable answer ({type(exc).__name__})", exc=exc, detail=repr(exc))
        except Exception as exc:  # noqa: BLE001
            # Anything else is a bug of the adapter, not the upstream's fault; it still must not
            # turn every answer that reads this source (the whole twin) into a 500. Logged as
            # an error with its traceback; the source is degraded, named.
            return self._failed(f"adapter failed reading the answer ({type(exc).__name__})", exc=exc,
                                detail=repr(exc), level=logging.ERROR)
        self._answered()
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
        outages = self._outages()
        for part, out in zip(parts, outs):
            named = f"{self.report_name} {part}"
            if isinstance(out, SourceError):
                outcomes.append((part, None, str(out)))
                outages.failed(named, str(out), check=self._check(str(out)))
            elif isinstance(out, PARSE_ERRORS):
                error = f"unparseable answer ({type(out).__name__})"
                outcomes.append((part, None, error))
                outages.failed(named, error, check=self._check(error), detail=repr(out), exc=out)
            elif isinstance(out, BaseException):
                raise out
            else:
                records.extend(out)
                outcomes.append((part, len(out), None))
                outages.answered(named)
        if all(error for _, _, error in outcomes):
            raise SourceError("; ".join(f"{part}: {error}" for part, _, error in outcomes))
        return Parts(records, outcomes)

    def _outages(self) -> Outages:
        """What the log has been told of this source's failures (``sources.outages``)."""
        held = getattr(self, "_outages_of", None)
        if held is None:
            held = self._outages_of = Outages(log)
        return held

    def _check(self, error: str) -> str:
        """What an operator looks at when this source fails: the setting of its base URL and where
        it points (its timeout's too, for a timeout); in demo mode, the demo upstream."""
        if self.demo:
            return f"the demo upstream at {shown_url(self.base_url)}"
        out = f"{env_name(self.name, 'base_url')} (now {shown_url(self.base_url) or 'empty'})"
        if "timeout" in error.lower() or "timed out" in error.lower():
            out += f" and {env_name(self.name, 'timeout_s')} (now {self.timeout_s:g} s)"
        return out

    def _failed(self, error: str, *, exc: BaseException | None = None, detail: str = "",
                level: int = logging.WARNING) -> SourceRead[T]:
        """An unusable read, said to the log as ``sources.outages`` says a failure: the first with
        what to check and its traceback (``exc``), the repeats counted."""
        error = one_line(error)
        self._outages().failed(self.report_name, error, check=self._check(error), detail=detail, exc=exc,
                               level=level)
        return SourceRead([], SourceReport(self.report_name, self.license, ok=False, error=error, demo=self.demo))

    def _answered(self) -> None:
        """A read answered: the log is told, where it was told that the source failed. (A subclass
        that writes its own ``read`` calls this on an answer, as it calls ``_failed`` on a failure.)"""
        self._outages().answered(self.report_name)

    def _unkeyed(self) -> SourceRead[T]:
        """A keyed source with no key: unusable until the key is set and the service restarted, so
        said once (not an outage: nothing to count, no answer to wait for)."""
        error = one_line(f"needs an API key: set {self.config.key_setting} or {self.config.key_setting}_FILE")
        if not getattr(self, "_unkeyed_said", False):
            self._unkeyed_said = True
            log.info("source %s unusable: %s", self.report_name, error)
        return SourceRead([], SourceReport(self.report_name, self.license, ok=False, error=error, demo=self.demo))
