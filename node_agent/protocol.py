"""The HTTP client of the node protocol (``/node/v1`` on the coordinator): JSON, data only,
a bearer token after enrolment.

Every route lives in ``ROUTES`` so that the one place to change, when the
coordinator's protocol moves, is here. Failures come in two kinds the job loop
treats differently:

- ``Unreachable``: no answer, a timeout, 5xx or 429. Worth retrying, with
  backoff; ``retry_after`` carries the coordinator's hint when it sent one.
  An answer that is not the coordinator's counts as none: a redirect (3xx, not
  followed; its message names the ``Location``), a 2xx whose body is not a JSON
  object (a captive portal's or a proxy's page; its message names the
  ``Content-Type``), or one without the field the protocol promises (``accepted``
  in a result's answer, ``action`` in a heartbeat's). A result so answered stays
  in the spool.
- ``Refused``: a 4xx answer. The coordinator heard and said no; retrying the
  same request will not help (401: enrol again; 409/410: the lease is gone).

A lease request names the node's engine build (``engineBuild``), so that a coordinator that
no longer accepts it refuses the lease (403, ``details.engineBuild``) instead of handing out a
job whose result it would refuse; ``build_refusal`` reads that refusal, and a result's (422).
A coordinator older than the field refuses it as unknown (400 naming it): the lease is asked
again without it, and from then on this client leases as it did before.

Connections are kept alive between calls (aiohttp's pool; an idle one is closed
after 15 s, well inside any server's or proxy's idle timeout). A node's lease,
heartbeats and result then reuse one connection instead of each opening its own:
over HTTPS, one TLS handshake instead of one per request, on the node and on the
coordinator. Tornado's own client opens a connection per request, and with it
half of a bare coordinator's time per job went to connections (``bench/queue.py``,
"http floor"). A ``Client`` is closed with ``close()`` or ``async with``.
"""
from __future__ import annotations

import asyncio
import json
import logging
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import aiohttp

from . import __version__
from .scheme import PROBE_S, other_scheme, worth_probing

log = logging.getLogger("sis.node.protocol")

USER_AGENT = f"sis-node/{__version__}"
PREFIX = "/node/v1"
ROUTES = {
    "enrol": ("POST", PREFIX + "/enrol"),
    "lease": ("POST", PREFIX + "/lease"),
    "heartbeat": ("POST", PREFIX + "/leases/{lease}/heartbeat"),
    "submit": ("POST", PREFIX + "/leases/{lease}/result"),
    "submit_next": ("POST", PREFIX + "/leases/{lease}/result?next=1"),
    "release": ("POST", PREFIX + "/leases/{lease}/release"),
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
    """One coordinator, one node. ``token`` is set after enrolment. Its connections are
    made in the event loop of the first call and kept until ``close()``."""

    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 30.0,
                 engine_build: str | None = None):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.engine_build = engine_build      # named in every lease request (None: an empty body)
        self.lease_names_build = True         # False once the coordinator refused the field (an older one)
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._answered = False      # once the address has answered, its scheme is right (node_agent.scheme)

    def _http(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            # Connections belong to the loop they were made in: a client used again under
            # another loop (a second asyncio.run) starts a pool of its own there.
            # No redirects followed, no proxy or .netrc from the environment: what the
            # coordinator's address names is what the node speaks to.
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s, connect=self.timeout_s))
            self._loop = loop
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def call(self, route: str, body: Any = None, headers: dict[str, str] | None = None,
                   **params: str) -> tuple[int, Any, Any]:
        method, path = ROUTES[route]
        url = self.base_url + path.format(**params)
        hdrs = {"User-Agent": USER_AGENT, "Accept": "application/json", **(headers or {})}
        if self.token:
            hdrs["Authorization"] = f"Bearer {self.token}"
        data = None
        if method != "GET":
            data = json.dumps(body if body is not None else {}, separators=(",", ":")).encode()
            hdrs["Content-Type"] = "application/json"
        try:
            async with self._http().request(method, url, data=data, headers=hdrs, allow_redirects=False) as resp:
                status, headers, raw = resp.status, resp.headers, await resp.read()
        except TimeoutError as exc:       # before OSError, of which it is a kind
            raise Unreachable(await self._wrong_scheme(exc) or
                              f"{self.base_url} unreachable: no answer within {self.timeout_s:g} s") from exc
        except (aiohttp.ClientError, OSError) as exc:
            # Connection refused or reset, DNS, TLS, or the connection closed mid-request
            # (the coordinator went down while we asked).
            raise Unreachable(await self._wrong_scheme(exc) or f"{self.base_url} unreachable: {_why(exc)}") from exc
        self._answered = True
        doc: Any = None
        if raw:
            try:
                doc = json.loads(raw)
            except ValueError:
                doc = None
        if status >= 500 or status == 429:
            raise Unreachable(f"{route}: the coordinator answered {status}{_message(doc)}", status=status,
                              code=_code(doc), retry_after=_retry_after(headers))
        if status >= 400:
            raise Refused(f"{route}: the coordinator answered {status}{_message(doc)}{_reason(doc)}", status=status,
                          code=_code(doc), details=_details(doc))
        if status >= 300:
            # Redirects are not followed (what the address names is what the node speaks to),
            # and a redirect's answer is no answer: an http->https move, a proxy's login page.
            raise Unreachable(_moved(route, status, headers, url, path.format(**params)), status=status)
        if status != 204 and not isinstance(doc, dict):
            # A captive portal, a proxy's page, a web server at the address: its 200 was read as
            # the coordinator's "done", and the spooled result it "acknowledged" deleted.
            raise Unreachable(_not_json(route, status, headers, raw), status=status)
        return status, doc, headers

    async def _wrong_scheme(self, exc: BaseException) -> str | None:
        """Why a first request failed when the URL has the wrong scheme (``https://`` at plain
        HTTP, or the reverse), asked of the address once the failure looks like it; else None."""
        if self._answered or not worth_probing(exc):
            return None
        return await other_scheme(self.base_url, min(self.timeout_s, PROBE_S))

    # ---- the protocol's calls ------------------------------------------------------------

    async def enrol(self, facts: dict[str, Any], secret: str | None = None) -> tuple[str, str]:
        """Enrol this node; answers (node id, bearer token). The token is shown once: keep it."""
        _, doc, _ = await self.call("enrol", facts, headers={"X-Enrol-Secret": secret} if secret else None)
        try:
            return str(doc["nodeId"]), str(doc["token"])
        except (TypeError, KeyError):
            raise Refused("enrol: the coordinator's answer has no nodeId and token") from None

    async def lease(self, facts: dict[str, Any] | None = None) -> Lease | NoWork:
        """A job, or NoWork. The request names this node's engine build; a coordinator that no
        longer accepts it refuses the lease (``Refused``, 403: ``build_refusal``). One older than
        the field (400 naming it) is asked again without it, and never with it again."""
        body = dict(facts or {})
        if self.engine_build and self.lease_names_build:
            body.setdefault("engineBuild", self.engine_build)
        try:
            status, doc, headers = await self.call("lease", body)
        except Refused as exc:
            if exc.status != 400 or "engineBuild" not in body or exc.details.get("parameter") != "engineBuild":
                raise
            self.lease_names_build = False
            log.info("%s does not take the engine build in a lease request (a coordinator older than the field): "
                     "leasing without it", self.base_url)
            del body["engineBuild"]
            status, doc, headers = await self.call("lease", body)
        return _lease_from("lease", None if status == 204 else doc, headers)

    async def heartbeat(self, lease_id: str, progress: dict[str, Any] | None = None) -> dict[str, Any]:
        """The coordinator's word on the lease: ``action`` is ``continue`` or ``cancel``. An answer
        without ``action`` is no answer (Unreachable): it was read as "cancel" and the job dropped."""
        _, doc, _ = await self.call("heartbeat", progress or {}, lease=lease_id)
        return _requiring("heartbeat", doc, "action")

    async def release(self, lease_id: str, reason: str) -> dict[str, Any]:
        """Give a lease back unworked: the coordinator queues its job again at once."""
        _, doc, _ = await self.call("release", {"reason": reason}, lease=lease_id)
        return doc if isinstance(doc, dict) else {}

    async def submit(self, lease_id: str, result: dict[str, Any]) -> dict[str, Any]:
        """The submission's answer. One without ``accepted`` is not the coordinator's
        acknowledgement (Unreachable): the result stays in the spool and is sent again."""
        _, doc, _ = await self.call("submit", result, lease=lease_id)
        return _requiring("submit", doc, "accepted")

    async def submit_and_lease(self, lease_id: str, result: dict[str, Any]) -> tuple[dict[str, Any],
                                                                                    Lease | NoWork | None]:
        """Submit, and ask for the next job in the same request (``?next=1``): (the
        submission's answer, the next lease or NoWork). The second is None when the answer
        says nothing of a next job (a coordinator without ``next``, or one that would not
        lease now): then ask with ``lease()``."""
        _, doc, headers = await self.call("submit_next", result, lease=lease_id)
        doc = _requiring("submit", doc, "accepted")
        if "next" not in doc:
            return doc, None
        try:
            return doc, _lease_from("submit", doc["next"], headers)
        except Refused as exc:      # the result was taken; only the next lease is unusable
            log.warning("%s; asking for a job apart", exc.message)
            return doc, None

    async def manifest(self) -> Any:
        _, doc, _ = await self.call("manifest")
        return doc


def _lease_from(route: str, doc: Any, headers: Any) -> Lease | NoWork:
    """A lease as the lease route answers it (and a result's ``next``), or NoWork."""
    if doc is not None and not isinstance(doc, dict):
        raise Refused(f"{route}: the coordinator's lease is not a JSON object")
    if not doc or doc.get("job") is None:
        return NoWork(_retry_after(headers))
    lease = doc.get("lease") if isinstance(doc.get("lease"), dict) else {}
    lease_id = lease.get("leaseId")
    if not lease_id:
        raise Refused(f"{route}: the coordinator's answer has a job but no lease id")
    beat = lease.get("heartbeatS")
    return Lease(str(lease_id), doc["job"], lease.get("expiresAt"),
                 float(beat) if isinstance(beat, (int, float)) and beat > 0 else None)


def _requiring(route: str, doc: Any, field: str) -> dict[str, Any]:
    """``doc``, when it is an object holding ``field``, which the protocol promises in the answer."""
    if not isinstance(doc, dict) or field not in doc:
        raise Unreachable(f"{route}: the answer has no {field!r}: it is not the coordinator's answer "
                          "(is this the coordinator's address?)")
    return doc


def _moved(route: str, status: int, headers: Any, url: str, path: str) -> str:
    """A redirect, in words: where to, as a coordinator's address when it names one."""
    location = headers.get("Location") if headers is not None else None
    if not location:
        return f"{route}: the coordinator answered {status} (a redirect, with no Location): is this its address?"
    target = urljoin(url, location)
    if target.split("?", 1)[0].endswith(path.split("?", 1)[0]):     # the same route at another address
        target = target.split("?", 1)[0][: -len(path.split("?", 1)[0])] or target
    return f"{route}: the coordinator's address moved to {target}: use that address (it answered {status})"


def _not_json(route: str, status: int, headers: Any, raw: bytes) -> str:
    kind = (headers.get("Content-Type") if headers is not None else None) or "no Content-Type"
    kind = kind.split(";", 1)[0].strip() or "no Content-Type"
    what = "an empty body" if not raw else kind
    return f"{route}: the coordinator's address answered {status} with {what}, not the coordinator's JSON: " \
           "is this the coordinator's address?"


def _why(exc: BaseException) -> str:
    """What went wrong, in words, for an aiohttp or socket error (some have no message), with
    what to check where the error says it: a host name no DNS knows is a typo (or no internet),
    a refused connection is nothing listening at that host and port. Both are the first-day
    mistakes of a coordinator URL, and "Name or service not known" said neither."""
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    os_error = getattr(exc, "os_error", None)
    host, port = getattr(exc, "host", None), getattr(exc, "port", None)
    if isinstance(exc, aiohttp.ClientConnectorError) and host:
        if isinstance(os_error, socket.gaierror):
            return (f"the host name {host} is not known ({os_error.strerror or text}): check the coordinator URL's "
                    "spelling, and this machine's internet connection")
        if isinstance(os_error, ConnectionRefusedError):
            return (f"nothing answers at {host}:{port} (connection refused): check the coordinator URL's host "
                    "and port, and that the coordinator runs")
    return text


def _error(doc: Any) -> dict[str, Any]:
    err = doc.get("error") if isinstance(doc, dict) else None
    return err if isinstance(err, dict) else {}


def _message(doc: Any) -> str:
    msg = _error(doc).get("message")
    return f": {msg}" if msg else ""


def _reason(doc: Any) -> str:
    """The reason a refusal carries apart from its message (a revoked node's: the operator's words)."""
    reason = _details(doc).get("reason")
    return f" (reason: {str(reason).strip()[:300]})" if isinstance(reason, str) and reason.strip() else ""


def revocation(exc: ProtocolError) -> str | None:
    """The operator's reason when ``exc`` says this node was revoked ("" when none was given),
    else None. The coordinator answers a revoked node's every request 403, naming the reason
    in ``details.reason`` (``coordinator.sweeps.tokens.admit``)."""
    if exc.status != 403 or "revoked" not in exc.message:
        return None
    reason = exc.details.get("reason")
    return str(reason).strip() if reason else ""


def build_refusal(exc: ProtocolError, own_build: str | None = None) -> str | None:
    """The engine build the coordinator said it does not accept, when ``exc`` says so; else None.
    A lease (or an enrolment) is refused 403 naming it in ``details.engineBuild``; a result is
    refused 422, naming it there too, or (a coordinator older than that) only in a reason
    beginning ``engineBuild:``, when the build is ``own_build``, the one the result carries."""
    if exc.status not in (403, 422):
        return None
    named = exc.details.get("engineBuild")
    if isinstance(named, str) and named:
        return named
    reasons = exc.details.get("reasons") if exc.status == 422 else None
    if isinstance(reasons, list) and any(str(r).startswith("engineBuild:") for r in reasons):
        return own_build or ""
    return None


def _code(doc: Any) -> str:
    return str(_error(doc).get("code") or "")


def _details(doc: Any) -> dict[str, Any]:
    d = _error(doc).get("details")
    return d if isinstance(d, dict) else {}
