"""Node protocol handlers under ``/node/v1`` (plain Tornado handlers, not public tools).

Every route but enrolment needs ``Authorization: Bearer <token>``. Errors use the
service's one error shape. Bodies are JSON; a result body over
``result_max_bytes`` is refused with 413, not kept, and recorded as an invalid result.
"""
from __future__ import annotations

import hmac
from typing import Any

from coordinator.core import jsontext
from coordinator.core.access.policy import ip_bucket
from coordinator.core.errors import Forbidden, NotFound, PayloadTooLarge, RateLimited, ServiceError, error_body
from coordinator.core.registry import STRING, Param
from coordinator.faces.http import MAX_JSON_DEPTH, json_depth_exceeds
from coordinator.faces.operations import AUTH_NODE, Body, Operation, OperationHandler, openapi_paths
from coordinator.sweeps import leases, results
from coordinator.sweeps import transitions as tr
from coordinator.sweeps.jobs import job_document
from coordinator.sweeps.service import Sweeps, sweeps_of
from coordinator.sweeps.validation import accepted_builds
from coordinator.sweeps import nodes as registry
from coordinator.sweeps.tokens import Bearer, bearer

PREFIX = "/node/v1"
STREAM_CEILING = 64 * 1024 * 1024
NEXT_VALUES = {"1": True, "true": True, "0": False, "false": False}
MAX_REASON = 200


class InvalidResult(ServiceError):
    """A result that failed validation: its reasons are in ``details.reasons``."""

    code = "invalid_result"

    @property
    def status(self) -> int:
        return 422


BUILD_REFUSED = "this engine build is not among the published builds: download the current node app"


def refuse_build(settings, build: str) -> None:
    """403 naming ``build`` when it is not among the accepted engine builds: a lease's
    result would be refused (``validation.validate_result``), so no job is leased to it."""
    if build not in accepted_builds(settings):
        raise Forbidden(BUILD_REFUSED, {"engineBuild": build})


def refused_build(reasons: list[str], body: bytes) -> str | None:
    """The engine build a refused result came from, when one of its reasons is that the build
    is not accepted; else None. Read only for a refused result (not the accepted path)."""
    if not any(r.startswith("engineBuild:") for r in reasons):
        return None
    try:
        build = jsontext.loads(body).get("engineBuild")
    except (ValueError, AttributeError, RecursionError):
        return None
    return build if isinstance(build, str) else None


_LEASE_ID = Param("leaseId", STRING, "A lease id, as the lease route gave it", pattern=r"[A-Za-z0-9_]+",
                  location="path")   # no length bound: an id no row has is 404, as before
_TEXT = r"[\s\S]*\S[\s\S]*"      # text with something besides blanks in it

ENROL = Operation(
    "POST", f"{PREFIX}/enrol", "node_enrol", "Enrol a node: returns its id and bearer token (shown once)", "node",
    description="Node protocol (docs/node-protocol.md); not a tool of the public API. Open, or with the "
                "X-Enrol-Secret header when the coordinator sets one; limited per client IP.",
    responses={"201": "Enrolled", "401": "X-Enrol-Secret missing or wrong (when the coordinator sets one)",
               "403": "Engine build not published", "429": "Too many enrolments from this address"},
    body=Body(required=True, description="What the node is and runs",
              fields=tuple(Param(k, STRING, d, required=k != "name", default="" if k == "name" else None,
                                 max_length=n, pattern=None if k == "name" else _TEXT)
                           for k, n, d in (("platform", 200, "Operating system and machine"),
                                           ("gpu", 200, "The accelerator the engine runs on"),
                                           ("engineVersion", 60, "The engine's version"),
                                           ("engineBuild", 128, "The engine build hash (sha256:...)"),
                                           ("name", 120, "A name for the node (optional)")))))
ME = Operation("GET", f"{PREFIX}/me", "node_me", "The node's own record: trust, streak, counts", "node",
               auth=AUTH_NODE, description="Node protocol (docs/node-protocol.md).",
               responses={"200": "The node's record"})
_BUILD = Param("engineBuild", STRING, "The engine build hash (sha256:...) the node runs: a build the coordinator "
               "no longer accepts is refused 403 (optional: a node that sends none is served as before)",
               max_length=128, pattern=_TEXT)
LEASE = Operation(
    "POST", f"{PREFIX}/lease", "node_lease", "Lease a job (data only), or 204 with Retry-After when none waits",
    "node", auth=AUTH_NODE, description="Node protocol (docs/node-protocol.md); not a tool of the public API.",
    responses={"200": "A lease and its job", "204": "No job now", "401": "Bad token",
               "403": "Node revoked, or its engine build (engineBuild) is not among the accepted builds"},
    body=Body(description="Empty, or an object naming the node's engine build", fields=(_BUILD,)))
HEARTBEAT = Operation(
    "POST", f"{PREFIX}/leases/{{leaseId}}/heartbeat", "node_heartbeat",
    "Extend a lease; the answer is continue or cancel", "node", auth=AUTH_NODE,
    description="Node protocol (docs/node-protocol.md); not a tool of the public API.",
    responses={"200": "continue (with the new expiry) or cancel (with its reason)",
               "404": "Not this node's lease"},
    path_params=(_LEASE_ID,), body=Body(description="Empty, or an empty object"))
RESULT = Operation(
    "POST", f"{PREFIX}/leases/{{leaseId}}/result", "node_result",
    "Submit the result of a lease (idempotent); with next=1, also lease the next job", "node", auth=AUTH_NODE,
    description="Node protocol (docs/node-protocol.md); not a tool of the public API.",
    responses={"200": "Accepted (or the same submission again); with next=1, `next` holds the next lease and job "
                      "as the lease route answers them, or null (with Retry-After) when none waits; for a repeat "
                      "of a result whose engine build is withdrawn since, `next` is absent and `nextRefused` "
                      "holds the 403 body a lease naming that build gets",
               "400": "next is not 1 or 0", "404": "Not this node's lease",
               "409": "Lease lapsed, or a different result already",
               "413": "Body too large (recorded as invalid)", "422": "Rejected, with every reason"},
    path_params=(_LEASE_ID,),
    query=(Param("next", STRING, "1 or true: also lease the node's next job, in the same answer",
                 default="0", enum=tuple(sorted(NEXT_VALUES))),),
    body=Body(required=True, description="A Result of sweep_engine.schema, checked whole by the coordinator",
              schema={"type": "object", "description": "A Result of sweep_engine.schema (schemaVersion, jobId, "
                                                       "nodeId, engine, facts, measurements, skipped)"}))
RELEASE = Operation(
    "POST", f"{PREFIX}/leases/{{leaseId}}/release", "node_release",
    "Give a lease back unworked: the job is queued again at once, with no failure counted", "node", auth=AUTH_NODE,
    description="Node protocol (docs/node-protocol.md); not a tool of the public API.",
    responses={"200": "The lease's state: cancelled when it was active, else as it was (a release sent again "
                      "answers the same)", "400": "Bad body", "404": "Not this node's lease"},
    path_params=(_LEASE_ID,),
    body=Body(description="Optional: why the lease is given back",
              fields=(Param("reason", STRING, "Why the lease is given back", default="the node is stopping",
                            max_length=MAX_REASON, pattern=_TEXT),)))
OPERATIONS = [ENROL, ME, LEASE, HEARTBEAT, RESULT, RELEASE]


class NodeHandler(OperationHandler):
    LIMITS = ("node_ip_per_minute", "node_per_minute")

    @property
    def sweeps(self) -> Sweeps:
        return sweeps_of(self.application.services)  # type: ignore[attr-defined]

    async def authenticate(self) -> Bearer | None:
        """The token a node route needs: 401 at once when there is none. It is looked up
        where it is used (a lease and a result in their batch's own transaction)."""
        if self.operation.auth != AUTH_NODE:
            return None
        return bearer(self.request.headers.get("Authorization"))

    async def node(self):
        return await registry.authenticate(self.sweeps, self.request.headers.get("Authorization"))

    def bearer(self) -> Bearer:
        return self.caller

    async def next_lease(self, presented: Bearer) -> dict[str, Any] | None:
        """A new lease for this node as the lease route answers it, or None (with the
        ``Retry-After`` header set) when no job waits for it."""
        return self.lease_document(await leases.claim(self.sweeps, presented))

    def lease_document(self, claim: leases.Claim | None) -> dict[str, Any] | None:
        """A claim as the lease route answers it; None (with ``Retry-After``) for no claim."""
        settings = self.sweeps.settings
        if claim is None:
            self.set_header("Retry-After", str(settings.lease_retry_after_s))
            return None
        ttl = settings.lease_ttl_s
        return {"lease": {"leaseId": claim.lease_id, "expiresAt": tr.iso(claim.expires_at), "ttlS": ttl,
                          "heartbeatS": max(1.0, ttl / 3)},
                "job": job_document(claim.job).to_dict()}


class EnrolHandler(NodeHandler):
    async def post(self) -> None:
        settings = self.sweeps.settings
        await self.enrol_window(settings.node_enrol_per_minute)
        if settings.node_enrol_secret and not hmac.compare_digest(
                self.request.headers.get("X-Enrol-Secret", ""), settings.node_enrol_secret):
            from coordinator.core.errors import Unauthorized
            raise Unauthorized("enrolment needs the X-Enrol-Secret header of this coordinator")
        values = self.body_values()
        values["name"] = values["name"].strip()
        for key in ("platform", "gpu", "engineVersion", "engineBuild"):
            values[key] = values[key].strip()
        refuse_build(settings, values["engineBuild"])
        node, token = await registry.enrol(self.sweeps.db, name=values["name"] or values["platform"][:120],
                                           platform=values["platform"], gpu=values["gpu"],
                                           engine_version=values["engineVersion"], engine_build=values["engineBuild"])
        self.send_json({"nodeId": node.id, "token": token, "trusted": False,
                        "leaseTtlS": settings.lease_ttl_s, "heartbeatS": max(1.0, settings.lease_ttl_s / 3),
                        "resultMaxBytes": settings.result_max_bytes}, 201)

    async def enrol_window(self, per_minute: int) -> None:
        """Count this enrolment in its client IP's window (the access layer's limiter and
        client-IP rule, so several coordinators share one window through Redis); 429 when it
        is spent. Counted before anything else, a refused secret or build included: a node
        costs nothing to make, and its invalid results do not count against jobs
        (``sweeps.trust.counts_against_job``), but rows and leases still do."""
        access = self.application.services.access  # type: ignore[attr-defined]
        ip = access.client_ip.resolve(self.request.remote_ip, self.request.headers)
        w = await access.limiter.hit(per_minute, "enrol", ip_bucket(ip))
        if not w.allowed:
            retry = max(1, w.reset_s)
            raise RateLimited(f"too many enrolments from this address: the limit is {w.limit} per minute",
                              {"limit": "enrolPerMinute", "perMinute": w.limit, "retryAfterS": retry},
                              headers={"Retry-After": str(retry), **w.headers()})


class MeHandler(NodeHandler):
    async def get(self) -> None:
        node = await self.node()
        self.send_json(registry.node_json(node))


class LeaseHandler(NodeHandler):
    async def post(self) -> None:
        # Checked before the claim's batch looks the token up: a frozenset lookup, no statement. Only
        # a build refused has its token looked up first, so that a token no node has is still 401 and
        # a revoked node is still told its operators' reason, not to download the app. A node that
        # sends no build (an agent older than the field) is served as before.
        build = self.body_values()["engineBuild"]
        if build is not None and build.strip() not in accepted_builds(self.sweeps.settings):
            await self.node()
            refuse_build(self.sweeps.settings, build.strip())
        doc = await self.next_lease(self.bearer())
        if doc is None:
            self.set_status(204)
            self.finish()
            return
        self.send_json(doc, 200)


class HeartbeatHandler(NodeHandler):
    async def post(self, lease_id: str) -> None:
        node = await self.node()
        self.body_values()
        beat = await leases.heartbeat(self.sweeps, node, lease_id)
        if beat is None:
            raise NotFound("no such lease for this node", {"leaseId": lease_id})
        body: dict[str, Any] = {"action": beat.action}
        if beat.expires_at is not None:
            body["expiresAt"] = tr.iso(beat.expires_at)
        if beat.reason is not None:
            body["reason"] = beat.reason
        self.send_json(body)


class ReleaseHandler(NodeHandler):
    """Give a lease back unworked: its replica is queued again at once, with no failure
    counted. Answers the lease's state; a lease already ended stays as it is, so a
    release sent again answers the same."""

    async def post(self, lease_id: str) -> None:
        node = await self.node()
        why = self.body_values()["reason"]
        state = await leases.give_back(self.sweeps, node, lease_id, why.strip())
        if state is None:
            raise NotFound("no such lease for this node", {"leaseId": lease_id})
        self.send_json({"leaseId": lease_id, "state": state})


class ResultHandler(NodeHandler):
    """The body streams in and is kept only up to ``result_max_bytes``; past that it is
    dropped as it arrives (never buffered), and the submission is recorded as invalid and
    refused with 413, a declared length over the limit included: the node learns why, and
    the job goes on without waiting for its lease to lapse."""

    def body_limit(self) -> int:
        return self.sweeps.settings.result_max_bytes

    def take_body(self) -> None:
        """The body's rule here is its own: over the limit it is recorded, not refused at once."""
        self.limit = self.body_limit()
        self._chunks: list[bytes] = []
        self._size = 0
        # Past this, Tornado stops reading and closes the connection.
        self.request.connection.set_max_body_size(max(4 * self.limit, STREAM_CEILING))

    async def admit(self) -> None:
        await self.prepare_request()
        # ?next=1: the node also asks for its next job, as a BOINC scheduler request
        # reports work and asks for more in one; one request per job instead of two.
        self.wants_next = NEXT_VALUES[self.args["next"]]

    @property
    def size(self) -> int:
        return self._size

    @property
    def chunks(self) -> list[bytes]:
        return self._chunks

    async def post(self, lease_id: str) -> None:
        presented = self.bearer()
        too_large = self.size > self.limit
        body = f"over the limit: {self.size} bytes".encode() if too_large else b"".join(self.chunks)
        # Read by the faces' one JSON rule: a body nesting deeper is recorded as an invalid
        # result (its lease ends) before anything recursive reads it.
        refused = (f"the JSON nests deeper than {MAX_JSON_DEPTH} levels"
                   if not too_large and json_depth_exceeds(body) else None)
        # With ?next=1 an accepted result also leases the node's next job, in the submission's
        # own transaction (``results.submit_batch``); a refused one leases nothing.
        outcome = await results.submit(self.sweeps, presented, lease_id, body, too_large=too_large, size=self.size,
                                       refused=refused, then_claim=self.wants_next)
        if too_large:
            raise PayloadTooLarge(f"the result body is over {self.limit} bytes; it was recorded as invalid",
                                  {"maxBytes": self.limit, "reasons": outcome.reasons,
                                   "resultState": outcome.result_state})
        if not outcome.accepted:
            details = outcome.as_json()
            build = refused_build(outcome.reasons, body)
            if build is None:
                raise InvalidResult("the result was rejected; nothing of it goes forward", details)
            # Its build is withdrawn: no next job is leased (none is for a refused result), and
            # the node is told so in words and by ``details.engineBuild``, as a lease is refused.
            details["engineBuild"] = build
            raise InvalidResult("the result was rejected; nothing of it goes forward, and no job is leased to "
                                "its engine build, which is not among the published builds: download the current "
                                "node app", details)
        answer = outcome.as_json()
        if outcome.refused_build is not None:
            # A repeat of a result accepted before its build was withdrawn: answered as before,
            # with no next job (``results.withdrawn_since``). ``next`` is left out, as a coordinator
            # that would not lease now leaves it: the agent leases apart at once, naming its build,
            # and stops at that lease's 403. ``nextRefused`` is the body that lease is refused with.
            answer["nextRefused"] = error_body(Forbidden.code, BUILD_REFUSED, {"engineBuild": outcome.refused_build})
        elif self.wants_next:
            answer["next"] = self.lease_document(outcome.next)
        self.send_json(answer, 200)


HANDLERS = ((ENROL, EnrolHandler), (ME, MeHandler), (LEASE, LeaseHandler), (HEARTBEAT, HeartbeatHandler),
            (RESULT, ResultHandler), (RELEASE, ReleaseHandler))


def node_routes() -> list[tuple[str, type, dict]]:
    return [(op.route(), handler, {"operation": op}) for op, handler in HANDLERS]


NODE_PATHS: dict[str, Any] = openapi_paths(OPERATIONS)
