"""The HTTP base every face's handlers share: request ids, JSON writing, ETags and the
one error shape (``write_error``), so no route can answer an error in another shape."""
from __future__ import annotations

import itertools
import json
import logging
import os
from typing import Any

import orjson
import tornado.web

from coordinator.core.errors import CODE_BY_STATUS, BadParameter, ServiceError, error_body
from coordinator.core.honesty import Answer

log = logging.getLogger("sis.http")

MAX_JSON_BODY = 64 * 1024

# Request ids: unique per process start and cheap (no random draw per request).
_RUN = os.urandom(4).hex()
_SEQ = itertools.count(1)


def dumps_bytes(obj: Any) -> bytes:
    """Compact UTF-8 JSON. orjson encodes the large answers (a thousand seen facts, a
    feed of events) several times faster than the standard library. A non-finite float
    is written as ``null`` (unknown), never as the invalid ``NaN`` token."""
    return orjson.dumps(obj)


def dumps(obj: Any) -> str:
    return dumps_bytes(obj).decode()


def read_json_object(body: bytes, what: str = "the request body") -> dict[str, Any]:
    """A JSON object body, or 400 saying what is wrong with it."""
    try:
        doc = json.loads(body)
    except ValueError:
        raise BadParameter(f"{what} is not valid JSON") from None
    if not isinstance(doc, dict):
        raise BadParameter(f"{what} must be a JSON object")
    return doc


class BaseHandler(tornado.web.RequestHandler):
    """Owns the error shape and JSON writing for every route."""

    def set_default_headers(self) -> None:
        self.request_id = f"{_RUN}{next(_SEQ):08x}"
        self.set_header("X-Request-Id", self.request_id)
        self.set_header("X-Content-Type-Options", "nosniff")

    async def prepare(self) -> None:
        """Every route's first step (subclasses call it first)."""
        return None

    def body_bytes(self) -> bytes:
        return self.request.body or b""

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
            status, body = status_code, error_body(code, message)
        else:
            status = status_code if status_code >= 500 else 500
            body = error_body("internal_error", "the service failed to answer this request; it has been logged",
                              {"requestId": self.request_id})
        self.clear_header("Cache-Control")
        self.send_json(body, status)

    def log_exception(self, typ, value, tb) -> None:  # noqa: ANN001
        if isinstance(value, ServiceError) and value.status < 500:
            return  # a client error, answered in-band
        if isinstance(value, tornado.web.HTTPError) and value.status_code < 500:
            return
        log.error("request %s failed: %s %s", getattr(self, "request_id", "?"), self.request.method,
                  self.request.uri, exc_info=(typ, value, tb))


class NotFoundHandler(BaseHandler):
    def prepare(self) -> None:
        raise tornado.web.HTTPError(404)


