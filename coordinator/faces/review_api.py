"""The review API under ``/review/v1`` and the review page at ``/review/``.

Plain Tornado handlers (not public tools: reviewers are not API consumers). Every
API route needs a reviewer key with the ``review`` scope, as
``Authorization: Bearer <key>`` or ``X-Api-Key: <key>``; answers are never cached.
The page itself holds no data: it asks for the key and calls the API.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import tornado.web

from coordinator.core.errors import CODE_BY_STATUS, BadParameter, NotFound, error_body
from coordinator.core.registry import BBOX, BOOLEAN, INTEGER, STRING, Param
from coordinator.faces.http import BaseHandler, dumps_bytes
from coordinator.faces.operations import AUTH_REVIEWER, Body, Operation, OperationHandler, openapi_paths
from coordinator.sweeps import jobs
from coordinator.sweeps.service import sweeps_of
from coordinator.review import keys, workflow

PREFIX = "/review/v1"
STATIC = Path(__file__).resolve().parents[1] / "static" / "review"
_BBOX = Param("bbox", BBOX, "Area filter w,s,e,n", max_side_deg=5)


_JOB_ID = Param("jobId", STRING, "A job: its number or its wire id (job-12)", pattern=r"(job-)?[0-9]+",
                location="path")   # no length bound: a number no row can have is 404 (_job_id)
_SWEEP_ID = Param("sweepId", STRING, "A sweep id (sr_...)", pattern=r"[A-Za-z0-9_]+", location="path")
_REASON = Param("reason", STRING, "Why: kept in the job's log with the reviewer", max_length=workflow.MAX_REASON,
                pattern=r"[\s\S]*\S[\s\S]*")
_ABOUT = "Review API (docs/review.md); not a tool of the public API."

ME = Operation("GET", f"{PREFIX}/me", "review_me",
               "The reviewer the key belongs to, and the base map the page draws under its map", "review",
               auth=AUTH_REVIEWER, description=_ABOUT, responses={"200": "The reviewer"})
PENDING = Operation(
    "GET", f"{PREFIX}/pending", "review_pending", "Jobs waiting for review, oldest first", "review",
    auth=AUTH_REVIEWER, description=_ABOUT, responses={"200": "The pending list", "400": "Bad filter"},
    query=(_BBOX, Param("sweep", STRING, "A sweep id: only its jobs", pattern=r"[A-Za-z0-9_]+", max_length=64),
           Param("limit", INTEGER, "Most jobs listed", minimum=1, maximum=1000, default=200)))
JOB = Operation("GET", f"{PREFIX}/jobs/{{jobId}}", "review_job",
                "One job: facts, measurements, replicas and their agreement, validation notes, photo references",
                "review", auth=AUTH_REVIEWER, description=_ABOUT,
                responses={"200": "The job", "404": "No such job"}, path_params=(_JOB_ID,))
APPROVE = Operation("POST", f"{PREFIX}/jobs/{{jobId}}/approve", "review_approve",
                    "Approve a job: its facts go live, its cells are covered", "review", auth=AUTH_REVIEWER,
                    description=_ABOUT, path_params=(_JOB_ID,),
                    responses={"200": "Approved", "404": "No such job", "409": "Not waiting for review"},
                    body=Body(description="Optional: why", fields=(_REASON,)))
REJECT = Operation("POST", f"{PREFIX}/jobs/{{jobId}}/reject", "review_reject",
                   "Reject a job with a reason: nothing of it is served", "review", auth=AUTH_REVIEWER,
                   description=_ABOUT, path_params=(_JOB_ID,),
                   responses={"200": "Rejected", "400": "No reason", "404": "No such job",
                              "409": "Not waiting for review"},
                   body=Body(required=True, description="Why (required); reissue: sweep the ground again by "
                                                             "other nodes (default true), or park it (false)",
                             fields=(replace(_REASON, required=True),
                                     Param("reissue", BOOLEAN, "Sweep the job's ground again by other nodes (true, "
                                                               "the default) or park it (false)", default=True))))
SWEEP_APPROVE = Operation("POST", f"{PREFIX}/sweeps/{{sweepId}}/approve", "review_approve_sweep",
                          "Approve every waiting job of a sweep whose replicas agree", "review", auth=AUTH_REVIEWER,
                          description=_ABOUT, path_params=(_SWEEP_ID,),
                          responses={"200": "What was approved and what was left", "404": "No such sweep"},
                          body=Body(description="Optional: why", fields=(_REASON,)))
OPERATIONS = [ME, PENDING, JOB, APPROVE, REJECT, SWEEP_APPROVE]


class ReviewHandler(OperationHandler):
    LIMITS = ("review_ip_per_minute", "reviewer_per_minute")

    @property
    def sweeps(self):
        return sweeps_of(self.application.services)  # type: ignore[attr-defined]

    async def authenticate(self):
        """The reviewer, checked before anything of the request is read: 401/403."""
        return await keys.authenticate(self.sweeps.db, keys.token_from(self.request.headers))

    async def reviewer(self):
        return self.caller


def _job_id(text: str) -> int:
    """The job a route names (its form already checked by ``_JOB_ID``): 404 when it is one
    that no row can have (``jobs.parse_job_id``), before the database is asked."""
    try:
        job_id = jobs.parse_job_id(text)
    except ValueError:
        raise BadParameter("a job id is a number (or job-<number>)", {"parameter": "jobId", "jobId": text}) from None
    if job_id is None:
        raise NotFound("no such job", {"jobId": text})
    return job_id


class WhoAmIHandler(ReviewHandler):
    async def get(self) -> None:
        r = await self.reviewer()
        self.send_json({"reviewerId": r.id, "name": r.name, "scopes": r.scopes.split(),
                        "baseMap": workflow.base_map(self.sweeps.settings)})


class PendingHandler(ReviewHandler):
    async def get(self) -> None:
        a = self.args
        self.send_json(await workflow.pending(self.sweeps.db, bbox=a["bbox"], sweep_id=a["sweep"], limit=a["limit"]))


class JobHandler(ReviewHandler):
    async def get(self, job: str) -> None:
        self.send_json(await workflow.show(self.sweeps.db, _job_id(job)))


class VerdictHandler(ReviewHandler):
    @property
    def approve(self) -> bool:
        return self.operation is APPROVE

    async def post(self, job: str) -> None:
        r = await self.reviewer()
        doc = self.body_values()
        if self.approve:
            self.send_json(await workflow.approve(self.sweeps, r, _job_id(job), doc.get("reason")))
        else:
            self.send_json(await workflow.reject(self.sweeps, r, _job_id(job), doc.get("reason"),
                                                 reissue=doc.get("reissue", True)))


class SweepApproveHandler(ReviewHandler):
    async def post(self, sweep_id: str) -> None:
        r = await self.reviewer()
        doc = self.body_values()
        self.send_json(await workflow.approve_sweep(self.sweeps, r, sweep_id, doc.get("reason")))


class PageHandler(BaseHandler):
    """The page and its assets (the map library is vendored under static/review/vendor)."""

    def get(self) -> None:
        self.set_header("Content-Type", "text/html; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")
        # Photos load straight from the provider (img-src any https/http); scripts and styles only from here.
        self.set_header("Content-Security-Policy",
                        "default-src 'self'; img-src 'self' data: http: https:; connect-src 'self'; "
                        "style-src 'self'; script-src 'self'; frame-ancestors 'none'")
        self.set_header("Referrer-Policy", "no-referrer")
        self.finish((STATIC / "index.html").read_bytes())


@tornado.web.stream_request_body
class AssetHandler(tornado.web.StaticFileHandler):
    """The page's files. A body sent to them is dropped as it arrives, never buffered."""

    def prepare(self) -> None:
        self.request.connection.set_max_body_size(1024 * 1024)

    def data_received(self, chunk: bytes) -> None:
        return None

    def set_extra_headers(self, path: str) -> None:
        self.set_header("X-Content-Type-Options", "nosniff")

    set_default_headers = BaseHandler.set_default_headers    # X-Request-Id, nosniff: as every route
    log_exception = BaseHandler.log_exception                # Tornado's wrote the URI whole, a ?key= with it
    readable_anywhere = False                                # what that reads of a handler

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """The one error shape, as every route answers (Tornado's HTML page was this route's alone),
        and the methods a 405 names (RFC 9110: a 405 lists them)."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if status_code == 404:
            message = f"no such path: {self.request.path}"
        elif status_code == 405:
            self.set_header("Allow", "GET, HEAD")
            message = f"method {self.request.method} is not allowed on {self.request.path}"
        else:
            message = (exc.log_message % exc.args if isinstance(exc, tornado.web.HTTPError) and exc.log_message
                       else self._reason)
        code = CODE_BY_STATUS.get(status_code, "bad_request" if status_code < 500 else "internal_error")
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(dumps_bytes(error_body(code, message)))


HANDLERS = ((ME, WhoAmIHandler), (PENDING, PendingHandler), (JOB, JobHandler), (APPROVE, VerdictHandler),
            (REJECT, VerdictHandler), (SWEEP_APPROVE, SweepApproveHandler))


def review_routes() -> list[tuple[str, type, dict]]:
    return [
        (r"/review/?", PageHandler, {}),
        (r"/review/static/(.*)", AssetHandler, {"path": str(STATIC)}),
        *[(op.route(), handler, {"operation": op}) for op, handler in HANDLERS],
    ]


REVIEW_PATHS: dict[str, Any] = openapi_paths(OPERATIONS)
