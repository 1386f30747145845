"""The HTTP base every face's handlers share: request ids, JSON writing, ETags and the
one error shape (``write_error``), so no route can answer an error in another shape."""
from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
from typing import Any

import orjson
import tornado.web

from coordinator.core.access.credentials import redacted
from coordinator.core.errors import (CODE_BY_STATUS, BadParameter, PayloadTooLarge, ServiceError, UnsupportedMediaType,
                                     error_body)
from coordinator.core.db.urls import storage_trouble
from coordinator.core.honesty import Answer

log = logging.getLogger("sis.http")

MAX_JSON_BODY = 64 * 1024
# A body sent in chunks (no Content-Length) over a route's limit is read and dropped as it
# arrives, up to this many times the limit, to answer 413; past that the connection closes.
DISCARD_FACTOR = 16

# Request line and headers: Tornado closes the connection on a request head over its
# max_header_size, with no answer; the application reads heads up to the ceiling
# (faces/app.py) and answers past these bounds 414 and 431 in the one error shape.
MAX_URI = 8 * 1024
MAX_HEADERS = 32 * 1024
HEADER_READ_CEILING = 1024 * 1024


class UriTooLong(ServiceError):
    code = "uri_too_long"

    @property
    def status(self) -> int:
        return 414


class HeadersTooLarge(ServiceError):
    code = "headers_too_large"

    @property
    def status(self) -> int:
        return 431


def new_request_id() -> str:
    """64 random bits. A per-process counter was cheaper by a fraction of a microsecond, but it
    told any caller how many requests the process answered between two of theirs; drawn from
    the kernel, ids are also distinct across forked workers (``sis serve --workers``) with no
    after-fork step."""
    return os.urandom(8).hex()


DATABASE_RETRY_AFTER_S = 5
STORAGE_RETRY_AFTER_S = 60    # a full disk or a read-only file is mended by an operator, not in seconds
STOPPING_RETRY_AFTER_S = 5    # a request cut off by the service's stop: another process, or this one restarted


def database_unreachable(exc: BaseException | None) -> bool:
    """Whether ``exc`` is the database not answering: asyncpg raises the socket's own
    ConnectionRefusedError, unwrapped; SQLAlchemy its OperationalError, InterfaceError (a connection
    lost mid-statement) or pool TimeoutError. Every request that needs the database then meets it,
    and each was a 500 with a traceback of some 130 lines, where a 503 to try again says what it is."""
    from sqlalchemy import exc as sa_exc

    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError)):
            return True
        if isinstance(exc, ConnectionError) and _raised_by_a_driver(exc):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


_DRIVERS = ("asyncpg", "aiosqlite", "sqlalchemy", "psycopg")


def _raised_by_a_driver(exc: BaseException) -> bool:
    """A bare ConnectionError is the database's only when it came through the database's driver:
    one from any other socket (a client gone, an upstream) is not the database, and a 503 that
    blamed it would send an operator looking in the wrong place."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__", "").partition(".")[0] in _DRIVERS:
            return True
        tb = tb.tb_next
    return False


def dumps_bytes(obj: Any) -> bytes:
    """Compact UTF-8 JSON. orjson encodes the large answers (a thousand seen facts, a
    feed of events) several times faster than the standard library. A non-finite float
    is written as ``null`` (unknown), never as the invalid ``NaN`` token.

    orjson refuses two things a client can send and an error may echo back in its
    details: an integer beyond 64 bits and a lone surrogate (``"\\ud800"``, which JSON
    parsers accept). Those go through the standard library, every lone surrogate written
    as U+FFFD, so an answer is never lost to its own encoding."""
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError:
        return json.dumps(_encodable(obj), ensure_ascii=False, separators=(",", ":"), allow_nan=False,
                          default=_isoformat).encode()


def _isoformat(value: Any) -> str:
    """What orjson writes natively and the standard library does not: times in ISO 8601,
    anything else (a UUID) as its text."""
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _encodable(obj: Any) -> Any:
    """``obj`` with what orjson would write differently made plain: non-finite floats as None,
    lone surrogates in text as U+FFFD. Integers of any size the standard library writes."""
    if isinstance(obj, str):
        return _SURROGATE.sub("\ufffd", obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {_encodable(k) if isinstance(k, str) else k: _encodable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_encodable(v) for v in obj]
    return obj


_SURROGATE = re.compile("[\ud800-\udfff]")


def dumps(obj: Any) -> str:
    return dumps_bytes(obj).decode()


MAX_JSON_DEPTH = 32
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_INNERMOST = re.compile(rb"[\[{][\]}]")


class JsonRefused(ValueError):
    """A body that is not JSON, or nests deeper than a face reads."""


def json_depth_exceeds(body: bytes, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """Whether a JSON text opens more than ``max_depth`` arrays or objects inside each
    other, found without parsing it: strings blanked, everything but brackets dropped,
    then innermost pairs removed one level at a time (each level one pass of a regular
    expression, in C), so a hostile body costs at most ``max_depth`` linear passes and
    never a recursion. A text with no more opening brackets than ``max_depth`` in all
    (strings included) cannot nest deeper, and is let through on that count alone, two
    scans in C (a node's result of one photo has about a dozen)."""
    if body.count(b"[") + body.count(b"{") <= max_depth:
        return False
    skeleton = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKET)
    for _ in range(max_depth):
        skeleton, n = _INNERMOST.subn(b"", skeleton)
        if n == 0:
            return False     # nothing left to open, or unbalanced: not JSON, which json.loads says
    return _INNERMOST.search(skeleton) is not None


def parse_json(body: bytes | str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The one JSON reader of every face: ``JsonRefused`` for a text that is not JSON or
    that nests deeper than ``max_depth`` (checked before ``json.loads``, whose recursion
    would otherwise fail with RecursionError, a 500).

    Bytes are read as UTF-8 (RFC 8259 8.1; one leading byte-order mark is let pass, as
    some Windows tools write one) and nothing else. ``json.loads`` given bytes guesses
    UTF-16 or UTF-32 too, and the depth check reads bytes: in UTF-16 a character such as
    U+4E22 is the bytes ``22 4E``, a quote to the check, so brackets hid in a fake string
    and a body 900 levels deep reached the parser (and the error's echo of it, a 500)."""
    raw = body.encode() if isinstance(body, str) else body
    if json_depth_exceeds(raw, max_depth):
        raise JsonRefused(f"nests deeper than {max_depth} levels")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise JsonRefused(f"is not UTF-8 (byte {exc.start}); JSON is sent as UTF-8") from None
    try:
        return json.loads(text, object_pairs_hook=_once_each)
    except JsonRefused:
        raise
    except (ValueError, RecursionError):
        if "\x00" in text:       # never in JSON outside a string: UTF-16 or UTF-32 of ASCII text
            raise JsonRefused("is not UTF-8 (it holds NUL bytes, as UTF-16 and UTF-32 do); "
                              "JSON is sent as UTF-8") from None
        raise JsonRefused("is not valid JSON") from None


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object that names a key twice is refused, as a query that gives a parameter twice is:
    JSON leaves it to the reader, the last copy wins here and the first in other readers, so
    ``{"lat": 95, "lat": 1}`` (or a JSON-RPC ``method`` given twice) meant one thing to a proxy
    that checked it and another to the service."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise JsonRefused(f"gives the key '{twice[:60]}' more than once")
    return out


def read_json_object(body: bytes, what: str = "the request body") -> dict[str, Any]:
    """A JSON object body, or 400 saying what is wrong with it."""
    try:
        doc = parse_json(body)
    except JsonRefused as exc:
        raise BadParameter(f"{what} {exc}", {"maxDepth": MAX_JSON_DEPTH} if "deeper" in str(exc) else {}) from None
    if not isinstance(doc, dict):
        raise BadParameter(f"{what} must be a JSON object")
    return doc


_ALLOWED: dict[tuple[type, tuple[str, ...]], list[str]] = {}     # BaseHandler.allowed_methods, worked out


@tornado.web.stream_request_body
class BaseHandler(tornado.web.RequestHandler):
    """Owns the error shape, JSON writing and request bodies for every route.

    Bodies stream (``stream_request_body``): ``prepare`` runs when the headers are in,
    before any of the body is read, so a declared ``Content-Length`` over the route's
    ``body_limit`` is answered 413 at once, and a subclass's ``admit`` (a reviewer's key,
    say) answers before a byte of the body is taken. A body sent without a length is kept
    only up to the limit and dropped as it arrives beyond it; ``body_bytes`` then refuses
    it with 413. Nothing is ever buffered whole past the limit.

    A refusal of a request that has no body (a GET's 404, 401 or 429) is answered once that
    empty body is read, from the request's method, not from ``prepare``: Tornado closes the
    connection on an answer finished before the body is read, and answered from ``prepare``
    every such refusal closed the client's keep-alive connection without a word, so that the
    request it sent next on it was reset (48 of 50 times, straight after a 404). One that has
    a body still answers at once, and says ``Connection: close``."""

    # The methods a route answers, where its handler narrows them (``allowed_methods``). Tornado's
    # own check of ``SUPPORTED_METHODS`` runs before ``prepare`` and its 405 closes the connection,
    # so routes declare theirs here and ``prepare`` refuses the others.
    methods: tuple[str, ...] | None = None
    # Answers a page on any origin may read (public documents, the 404 of a path no route serves):
    # the tool routes sent Access-Control-Allow-Origin and these did not, so Swagger UI or an agent
    # in a browser elsewhere could not read the OpenAPI document, and a page calling a path missing
    # from a family saw an opaque CORS failure instead of the 404.
    readable_anywhere = False

    def set_default_headers(self) -> None:
        # Drawn once a request: send_error clears the headers and calls this again, after the failure
        # was logged under the id the answer must name.
        if getattr(self, "request_id", None) is None:
            self.request_id = new_request_id()
        self.set_header("X-Request-Id", self.request_id)
        self.set_header("X-Content-Type-Options", "nosniff")
        if getattr(self, "_closing", False):        # answered before its body is read: Tornado closes
            self.set_header("Connection", "close")
        if self.readable_anywhere:
            self.set_header("Access-Control-Allow-Origin", "*")

    def body_limit(self) -> int:
        """The largest body this route reads, in bytes."""
        return MAX_JSON_BODY

    def decode_argument(self, value: bytes, name: str | None = None) -> str:
        """A path segment (or argument) read as query values are (``rest.raw_params``): bytes that
        are not UTF-8 become U+FFFD, and the route answers what it answers for any such text (an
        unknown widget id 404, a malformed credential 401). Tornado's own 400 here was a bare
        "Bad Request" outside the one error shape."""
        return value.decode("utf-8", errors="replace")

    async def prepare(self) -> None:
        """Every route's first steps, the route's own (``admit``) last. Subclasses override
        ``admit`` and ``take_body``, not this."""
        # The handler's task, for a stop that cuts off what is still running at its deadline
        # (``server.cut_off``): Tornado runs each request's handler in a task of its own.
        self.task = asyncio.current_task()
        running = getattr(self.application, "running", None)
        if running is not None:
            running.add(self)
        try:
            if self.request.method not in self.allowed_methods():
                raise tornado.web.HTTPError(405)
            self.check_head()
            self.take_body()
            await self.admit()
        except Exception as exc:
            if self._finished or self.body_coming():
                self._closing = True
                self.set_header("Connection", "close")      # and again after send_error's clear()
                raise
            self._refusal = exc
            # Tornado calls the request's method once the (empty) body is read: it raises the refusal.
            setattr(self, self.request.method.lower(), self._refuse)

    def _refuse(self, *args: str) -> None:
        raise self._refusal

    @property
    def cut_off(self) -> bool:
        """Whether this handler's task is being cancelled: cut off by the service's stop."""
        task = getattr(self, "task", None)
        return task is not None and task.cancelling() > 0

    def on_finish(self) -> None:
        running = getattr(self.application, "running", None)
        if running is not None:
            running.discard(self)

    def on_connection_close(self) -> None:
        """The client left before its answer was written: the access line says so (it read as a
        200 served in 5 s when the client had given up after 1)."""
        self.client_gone = True
        super().on_connection_close()

    def body_coming(self) -> bool:
        """Whether the request has a body still to read (a length over 0, or chunks)."""
        headers = self.request.headers
        return "Transfer-Encoding" in headers or headers.get("Content-Length", "0").strip() not in ("", "0")

    async def admit(self) -> None:
        """The route's own checks before its body is read (its caller, its limits, its path and
        query): a refusal is raised from here."""
        return None

    def take_body(self) -> None:
        """Get ready for the body: a declared length over ``body_limit`` refused (413)."""
        limit = self.body_limit()
        self._chunks: list[bytes] = []
        self._size = 0
        declared = self.request.headers.get("Content-Length")
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            raise PayloadTooLarge(f"the request body is over {limit} bytes", {"maxBytes": limit})
        self.request.connection.set_max_body_size(max(limit, 1024) * DISCARD_FACTOR)

    def check_head(self) -> None:
        if len(self.request.uri or "") > MAX_URI:
            raise UriTooLong(f"the request URI is over {MAX_URI} bytes", {"maxBytes": MAX_URI})
        size = sum(len(k) + len(v) + 4 for k, v in self.request.headers.get_all())
        if size > MAX_HEADERS:
            raise HeadersTooLarge(f"the request headers are over {MAX_HEADERS} bytes", {"maxBytes": MAX_HEADERS})
        # A gzipped body was read as its bytes ("not UTF-8 (byte 1)"), and one labelled br but sent plain was served.
        encoding = self.request.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity") and self.body_coming():
            raise UnsupportedMediaType(f"the request body is {encoding[:40]}-encoded: send it unencoded",
                                       {"contentEncoding": encoding[:40]})

    def allowed_methods(self) -> list[str]:
        """The methods this route answers (for ``Allow``, and refused otherwise in ``prepare``):
        those its handler implements, and HEAD wherever GET is. Worked out once a handler class
        and declaration: ``prepare`` asks on every request."""
        declared = self.methods or self.SUPPORTED_METHODS
        known = _ALLOWED.get((type(self), declared))
        if known is None:
            base = tornado.web.RequestHandler
            known = [m for m in declared if m != "HEAD"
                     and getattr(type(self), m.lower(), None) is not getattr(base, m.lower(), None)]
            if "GET" in known and "HEAD" in declared:
                known.insert(known.index("GET") + 1, "HEAD")
            _ALLOWED[(type(self), declared)] = known
        return list(known)

    async def head(self, *args: str) -> None:
        """HEAD answers wherever GET does (RFC 9110 section 9.3.2: load balancers' health checks
        use it): GET's status and headers, its work and its counting; Tornado writes no body."""
        if "GET" not in self.allowed_methods():
            raise tornado.web.HTTPError(405)
        answered = self.get(*args)
        if answered is not None:
            await answered

    def data_received(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self._size <= self.body_limit():
            self._chunks.append(chunk)
        else:
            self._chunks.clear()

    def body_bytes(self) -> bytes:
        """The request's body, read to its end; 413 when it was over the limit."""
        limit = self.body_limit()
        if getattr(self, "_size", 0) > limit:
            raise PayloadTooLarge(f"the request body is over {limit} bytes", {"maxBytes": limit})
        return b"".join(getattr(self, "_chunks", ()))

    def json_body(self, raw: bytes) -> bytes:
        """``raw`` when it may be read as JSON: labelled JSON, or not labelled at all. A body labelled
        otherwise was dropped unread: ``curl -d`` labels a JSON text as a form, and a form's ``lat=..``
        then answered "'lat' is required", a text/plain ``{"radius": 999}`` the default radius."""
        ctype = self.request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if ctype and ctype != "application/json" and not ctype.endswith("+json"):
            raise UnsupportedMediaType(f"the request body is {ctype[:60]}: send a JSON object with Content-Type: "
                                       "application/json, or the parameters in the query", {"contentType": ctype[:60]})
        return raw

    def api_key(self) -> str | None:
        """The API key of a request, from ``X-Api-Key`` or ``?key=``, read the same way by every face.
        Refused when given twice, empty, or as two different keys: the header won silently over a
        query key, the MCP face took the last of two query keys where REST refused them, and an
        empty one was served as anonymous. No message repeats a key."""
        headers = self.request.headers.get_list("X-Api-Key")
        query = self.request.query_arguments.get("key", [])
        if len(headers) > 1 or len(query) > 1:
            raise BadParameter("the API key is given more than once", {"parameter": "key"})
        given = [*headers, *(q.decode("utf-8", errors="replace") for q in query)]
        if any(not k.strip() for k in given):
            raise BadParameter("the API key is empty: give your key, or leave X-Api-Key and ?key= out to be "
                               "served anonymously", {"parameter": "key"})
        if len(set(given)) > 1:
            raise BadParameter("two different API keys are given, in X-Api-Key and in ?key=: give one",
                               {"parameter": "key"})
        return given[0] if given else None

    def send_json(self, body: Any, status: int = 200, cache_control: str = "no-store") -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.set_header("Cache-Control", cache_control)
        if isinstance(body, Answer):
            self._answer_etag = body.etag(dumps_bytes)
            self.finish(body.encoded(dumps_bytes))
        else:
            self.finish(dumps_bytes(body))

    def compute_etag(self) -> str | None:
        """An answer's ETag is memoised with its encoded body; other bodies are hashed as usual."""
        return getattr(self, "_answer_etag", None) or super().compute_etag()

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, ServiceError):
            status, body = exc.status, error_body(exc.code, exc.message, exc.details)
            for k, v in exc.headers.items():
                self.set_header(k, v)
        elif isinstance(exc, tornado.web.HTTPError) and status_code < 500:
            code = CODE_BY_STATUS.get(status_code, "bad_request" if status_code < 500 else "internal_error")
            message = exc.reason or self._reason
            if status_code == 404:
                message = f"no such path: {self.request.path}"
            elif status_code == 405:
                message = f"method {self.request.method} is not allowed on {self.request.path}"
                if "Allow" not in self._headers:
                    self.set_header("Allow", ", ".join(self.allowed_methods()))
            status, body = status_code, error_body(code, message)
        elif (trouble := storage_trouble(exc)) is not None:
            kind, words = trouble
            message = (f"the service's database cannot write ({words}): nothing of this request was stored; try "
                       "again later" if kind in ("full", "read-only") else
                       f"the service's database cannot be read or written ({words}): try again later")
            status, body = 503, error_body("unavailable", message, {"requestId": self.request_id})
            self.set_header("Retry-After", str(STORAGE_RETRY_AFTER_S))
        elif exc is None and status_code == 500 and self.cut_off:
            # Tornado answers 500, with no exception, a handler whose own task was cancelled: the stop's
            # deadline (cli._stop, server.cut_off). Said here, since Tornado logs nothing, and the client
            # is told to try again, not that the service failed.
            log.warning("request %s: cut off as the service stopped: %s %s; answered 503", self.request_id,
                        self.request.method, redacted(self.request.uri or ""))
            status, body = 503, error_body("unavailable", "the service stopped before this request was answered: "
                                           "try again shortly", {"requestId": self.request_id})
            self.set_header("Retry-After", str(STOPPING_RETRY_AFTER_S))
            self.set_header("Connection", "close")
        elif database_unreachable(exc):
            status, body = 503, error_body("unavailable", "the service's database is not answering; try again "
                                                          "shortly", {"requestId": self.request_id})
            self.set_header("Retry-After", str(DATABASE_RETRY_AFTER_S))
        else:
            status = status_code if status_code >= 500 else 500
            body = error_body("internal_error", "the service failed to answer this request; it has been logged",
                              {"requestId": self.request_id})
        if getattr(self, "task", None) is None:
            # Refused before ``prepare`` ran (a method Tornado does not know: TRACE, PROPFIND): Tornado
            # closes the connection, and the answer says so.
            self.set_header("Connection", "close")
        self.clear_header("Cache-Control")
        self.send_json(body, status)

    def log_exception(self, typ, value, tb) -> None:  # noqa: ANN001
        if isinstance(value, ServiceError) and value.status < 500:
            return  # a client error, answered in-band
        if isinstance(value, tornado.web.HTTPError) and value.status_code < 500:
            return
        if (trouble := storage_trouble(value)) is not None:      # the database layer says it too, once a minute
            log.warning("request %s: the database cannot write (%s); answered 503", getattr(self, "request_id", "?"),
                        trouble[1])
            return
        if database_unreachable(value):     # said in a line: every request meets it while it lasts
            log.warning("request %s: the database is not answering (%s: %s); answered 503",
                        getattr(self, "request_id", "?"), type(value).__name__, str(value)[:200])
            return
        log.error("request %s failed: %s %s", getattr(self, "request_id", "?"), self.request.method,
                  redacted(self.request.uri or ""), exc_info=(typ, value, tb))


class NotFoundHandler(BaseHandler):
    """Any path no route serves: 404 whatever the method, readable from any origin (a browser
    page calling a path missing from a family sees the answer, not an opaque CORS failure)."""

    readable_anywhere = True

    def allowed_methods(self) -> list[str]:
        return list(self.SUPPORTED_METHODS)

    async def admit(self) -> None:
        raise tornado.web.HTTPError(404)


