"""The HTTP client of the node protocol (``/node/v1`` on the coordinator): JSON, data only,
a bearer token after enrolment.

Every route lives in ``ROUTES`` so that the one place to change, when the
coordinator's protocol moves, is here. Failures come in two kinds the job loop
treats differently:

- ``Unreachable``: no answer, a timeout, 5xx or 429. Worth retrying, with
  backoff; ``retry_after`` carries the coordinator's hint when it sent one.
- ``Refused``: a 4xx answer. The coordinator heard and said no; retrying the
  same request will not help (401: enrol again; 409/410: the lease is gone).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from . import __version__

log = logging.getLogger("sis.node.protocol")

USER_AGENT = f"sis-node/{__version__}"
PREFIX = "/node/v1"
ROUTES = {
    "enrol": ("POST", PREFIX + "/enrol"),
    "lease": ("POST", PREFIX + "/lease"),
    "heartbeat": ("POST", PREFIX + "/leases/{lease}/heartbeat"),
    "submit": ("POST", PREFIX + "/leases/{lease}/result"),
    "manifest": ("GET", "/earth/node-app"),
}


class ProtocolError(Exception):
    """Base of the client's failures; ``message`` is fit to show a volunteer."""

    def __init__(self, message: str, status: int = 0, code: str = "", retry_after: float | None = None,
                 details: dict[str, Any] | None = None):
        super().__init__(message)
        self.message, self.status, self.code = message, status, code
        self.retry_after, self.details = retry_after, details or {}


class Unreachable(ProtocolError):
    """No usable answer: connection refused, timeout, 5xx or 429. Retry later."""


class Refused(ProtocolError):
    """A 4xx answer: the coordinator understood and said no."""


@dataclass
class Lease:
    lease_id: str
    job: Any  # the job document as received; validated by the loop before any use
    expires_at: str | None = None
    heartbeat_s: float | None = None


@dataclass
class NoWork:
    retry_after: float | None


def _retry_after(headers: Any) -> float | None:
    value = headers.get("Retry-After") if headers is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


class Client:
    """One coordinator, one node. ``token`` is set after enrolment."""

    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 30.0):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    async def call(self, route: str, body: Any = None, headers: dict[str, str] | None = None,
                   **params: str) -> tuple[int, Any, Any]:
        method, path = ROUTES[route]
        url = self.base_url + path.format(**params)
        hdrs = {"User-Agent": USER_AGENT, "Accept": "application/json", **(headers or {})}
        if self.token:
            hdrs["Authorization"] = f"Bearer {self.token}"
        data = None
        if method != "GET":
            data = json.dumps(body if body is not None else {}, separators=(",", ":"))
            hdrs["Content-Type"] = "application/json"
        req = HTTPRequest(url, method=method, body=data, headers=hdrs, connect_timeout=self.timeout_s,
                          request_timeout=self.timeout_s, follow_redirects=False)
        try:
            resp = await AsyncHTTPClient().fetch(req, raise_error=False)
        except OSError as exc:
            raise Unreachable(f"{self.base_url} unreachable: {exc.strerror or exc}") from exc
        except HTTPClientError as exc:
            # raise_error=False still raises the 599 family: a timeout, or the connection
            # closed mid-request (the coordinator went down while we asked).
            raise Unreachable(f"{self.base_url} unreachable: {exc}") from exc
        if resp.code == 599:
            raise Unreachable(f"{self.base_url} unreachable: {resp.error}")
        doc: Any = None
        if resp.body:
            try:
                doc = json.loads(resp.body)
            except ValueError:
                doc = None
        if resp.code >= 500 or resp.code == 429:
            raise Unreachable(f"{route}: the coordinator answered {resp.code}{_message(doc)}", status=resp.code,
                              code=_code(doc), retry_after=_retry_after(resp.headers))
        if resp.code >= 400:
            raise Refused(f"{route}: the coordinator answered {resp.code}{_message(doc)}", status=resp.code,
                          code=_code(doc), details=_details(doc))
        return resp.code, doc, resp.headers

    # ---- the protocol's calls ------------------------------------------------------------

    async def enrol(self, facts: dict[str, Any], secret: str | None = None) -> tuple[str, str]:
        """Enrol this node; answers (node id, bearer token). The token is shown once: keep it."""
        _, doc, _ = await self.call("enrol", facts, headers={"X-Enrol-Secret": secret} if secret else None)
        try:
            return str(doc["nodeId"]), str(doc["token"])
        except (TypeError, KeyError):
            raise Refused("enrol: the coordinator's answer has no nodeId and token") from None

    async def lease(self, facts: dict[str, Any] | None = None) -> Lease | NoWork:
        status, doc, headers = await self.call("lease", facts or {})
        if status != 204 and doc is not None and not isinstance(doc, dict):
            raise Refused("lease: the coordinator's answer is not a JSON object")
        if status == 204 or not doc or doc.get("job") is None:
            return NoWork(_retry_after(headers))
        lease = doc.get("lease") if isinstance(doc.get("lease"), dict) else {}
        lease_id = lease.get("leaseId")
        if not lease_id:
            raise Refused("lease: the coordinator's answer has a job but no lease id")
        beat = lease.get("heartbeatS")
        return Lease(str(lease_id), doc["job"], lease.get("expiresAt"),
                     float(beat) if isinstance(beat, (int, float)) and beat > 0 else None)

    async def heartbeat(self, lease_id: str, progress: dict[str, Any] | None = None) -> dict[str, Any]:
        _, doc, _ = await self.call("heartbeat", progress or {}, lease=lease_id)
        return doc or {}

    async def submit(self, lease_id: str, result: dict[str, Any]) -> dict[str, Any]:
        _, doc, _ = await self.call("submit", result, lease=lease_id)
        return doc or {}

    async def manifest(self) -> Any:
        _, doc, _ = await self.call("manifest")
        return doc


def _error(doc: Any) -> dict[str, Any]:
    err = doc.get("error") if isinstance(doc, dict) else None
    return err if isinstance(err, dict) else {}


def _message(doc: Any) -> str:
    msg = _error(doc).get("message")
    return f": {msg}" if msg else ""


def _code(doc: Any) -> str:
    return str(_error(doc).get("code") or "")


def _details(doc: Any) -> dict[str, Any]:
    d = _error(doc).get("details")
    return d if isinstance(d, dict) else {}
