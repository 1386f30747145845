"""Domain errors and the one error body shape.

Domain code raises these without knowing about HTTP; the single table
``STATUS_BY_CODE`` maps each error code to its status, and ``error_body`` is
the only place an error body is shaped:
``{"error": {"code": ..., "message": ..., "details": {...}}}``.
"""
from __future__ import annotations

import copy
from typing import Any


# What an error echoes of the caller's input is bounded: a parameter name of 20,000 characters
# came back in the message and in details (60 KB for one unknown name; an MCP tool name three
# times over). A caller needs enough to find its mistake, not its whole input again.
MESSAGE_MAX, ECHO_MAX = 1000, 200
ECHOES = ("value", "parameter", "tool")     # the details that repeat what the caller sent


def bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def _echo(value: Any) -> Any:
    if isinstance(value, str):
        return bounded(value, ECHO_MAX)
    if isinstance(value, (list, tuple, dict)) and len(value) > 16:     # a bbox of 15,000 numbers
        return bounded(str(value), ECHO_MAX)
    return value


class ServiceError(Exception):
    """Base of every error a client may see. ``message`` is user-facing text, cut to
    ``MESSAGE_MAX`` characters; the ``details`` that echo input (``ECHOES``) to ``ECHO_MAX``."""

    code = "internal_error"

    def __init__(self, message: str, details: dict[str, Any] | None = None,
                 *, headers: dict[str, str] | None = None) -> None:
        message = bounded(message, MESSAGE_MAX)
        super().__init__(message)
        self.message = message
        self.details = {k: _echo(v) if k in ECHOES else v for k, v in (details or {}).items()}
        self.headers = headers or {}

    @property
    def status(self) -> int:
        return STATUS_BY_CODE.get(self.code, 500)

    def with_headers(self, headers: dict[str, str]) -> "ServiceError":
        """A copy carrying ``headers`` before its own: an error handed by single flight is one object
        for every caller waiting on the computation, and set on it in place one caller's embed headers
        (its origin, its frame-ancestors) went to the others."""
        out = copy.copy(self)
        out.headers = {**headers, **self.headers}
        out.__cause__, out.__context__ = self.__cause__, self.__context__
        out.__suppress_context__ = self.__suppress_context__
        return out.with_traceback(self.__traceback__)


class BadParameter(ServiceError):
    code = "bad_parameter"


class NotFound(ServiceError):
    code = "not_found"


class MethodNotAllowed(ServiceError):
    code = "method_not_allowed"


class Unauthorized(ServiceError):
    code = "unauthorized"


class Forbidden(ServiceError):
    code = "forbidden"


class Gone(ServiceError):
    code = "gone"


class Conflict(ServiceError):
    code = "conflict"


class PayloadTooLarge(ServiceError):
    code = "payload_too_large"


class UnsupportedMediaType(ServiceError):
    code = "unsupported_media_type"


class RateLimited(ServiceError):
    code = "rate_limited"


class Unavailable(ServiceError):
    code = "unavailable"


STATUS_BY_CODE: dict[str, int] = {
    "bad_parameter": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "conflict": 409,
    "gone": 410,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "rate_limited": 429,
    "internal_error": 500,
    "unavailable": 503,
}

# Codes used when Tornado itself raises an HTTPError with only a status.
CODE_BY_STATUS: dict[int, str] = {v: k for k, v in STATUS_BY_CODE.items()}


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}
