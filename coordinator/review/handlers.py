"""The review API under ``/review/v1`` and the review page at ``/review/``.

Plain Tornado handlers (not public tools: reviewers are not API consumers). Every
API route needs a reviewer key with the ``review`` scope, as
``Authorization: Bearer <key>`` or ``X-Api-Key: <key>``; answers are never cached.
The page itself holds no data: it asks for the key and calls the API.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import tornado.web

from coordinator.core.errors import BadParameter, NotFound
from coordinator.core.registry import BBOX, Param, parse_bbox
from coordinator.faces.http import BaseHandler
from ..sweeps import jobs
from ..sweeps.service import sweeps_of
from . import keys, workflow

PREFIX = "/review/v1"
STATIC = Path(__file__).resolve().parents[1] / "static" / "review"
MAX_BODY = 16 * 1024
_BBOX = Param("bbox", BBOX, "Area filter w,s,e,n", max_side_deg=5)


class ReviewHandler(BaseHandler):
    SUPPORTED_METHODS = ("GET", "POST")

    def check_xsrf_cookie(self) -> None:  # key in a header, no cookies
        return None

    @property
    def sweeps(self):
        return sweeps_of(self.application.services)  # type: ignore[attr-defined]

    async def reviewer(self):
        return await keys.authenticate(self.sweeps.db, keys.token_from(self.request.headers))

    def body(self) -> dict[str, Any]:
        raw = self.request.body or b"{}"
        if len(raw) > MAX_BODY:
            raise BadParameter("the request body is too large", {"maxBytes": MAX_BODY})
        try:
            doc = json.loads(raw)
        except ValueError:
            raise BadParameter("the request body is not valid JSON") from None
        if not isinstance(doc, dict):
            raise BadParameter("the request body must be a JSON object")
        unknown = sorted(set(doc) - {"reason"})
        if unknown:
            raise BadParameter(f"unknown field '{unknown[0]}'", {"parameter": unknown[0], "allowed": ["reason"]})
        return doc


def _job_id(text: str) -> int:
    """The job a route names: 400 when the text is not a job id, 404 when it is one that no
    row can have (``jobs.parse_job_id``), before the database is asked."""
    try:
        job_id = jobs.parse_job_id(text)
    except ValueError:
        raise BadParameter("a job id is a number (or job-<number>)", {"jobId": text}) from None
    if job_id is None:
        raise NotFound("no such job", {"jobId": text})
    return job_id


class WhoAmIHandler(ReviewHandler):
    async def get(self) -> None:
        r = await self.reviewer()
        self.send_json({"reviewerId": r.id, "name": r.name, "scopes": r.scopes.split()})


class PendingHandler(ReviewHandler):
    async def get(self) -> None:
        await self.reviewer()
        bbox_raw = self.get_query_argument("bbox", None)
        bbox = parse_bbox(_BBOX, bbox_raw) if bbox_raw else None
        sweep = self.get_query_argument("sweep", None) or None
        try:
            limit = int(self.get_query_argument("limit", "200"))
        except ValueError:
            raise BadParameter("'limit' must be a whole number", {"parameter": "limit"}) from None
        if not 1 <= limit <= 1000:
            raise BadParameter("'limit' must be between 1 and 1000", {"parameter": "limit"})
        self.send_json(await workflow.pending(self.sweeps.db, bbox=bbox, sweep_id=sweep, limit=limit))


class JobHandler(ReviewHandler):
    async def get(self, job: str) -> None:
        await self.reviewer()
        self.send_json(await workflow.show(self.sweeps.db, _job_id(job)))


class VerdictHandler(ReviewHandler):
    def initialize(self, approve: bool) -> None:
        self.approve = approve

    async def post(self, job: str) -> None:
        r = await self.reviewer()
        doc = self.body()
        fn = workflow.approve if self.approve else workflow.reject
        self.send_json(await fn(self.sweeps, r, _job_id(job), doc.get("reason")))


class SweepApproveHandler(ReviewHandler):
    async def post(self, sweep_id: str) -> None:
        r = await self.reviewer()
        doc = self.body()
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


class AssetHandler(tornado.web.StaticFileHandler):
    def set_extra_headers(self, path: str) -> None:
        self.set_header("X-Content-Type-Options", "nosniff")


def review_routes() -> list[tuple[str, type, dict]]:
    return [
        (r"/review/?", PageHandler, {}),
        (r"/review/static/(.*)", AssetHandler, {"path": str(STATIC)}),
        (rf"{PREFIX}/me", WhoAmIHandler, {}),
        (rf"{PREFIX}/pending", PendingHandler, {}),
        (rf"{PREFIX}/jobs/([A-Za-z0-9-]+)", JobHandler, {}),
        (rf"{PREFIX}/jobs/([A-Za-z0-9-]+)/approve", VerdictHandler, {"approve": True}),
        (rf"{PREFIX}/jobs/([A-Za-z0-9-]+)/reject", VerdictHandler, {"approve": False}),
        (rf"{PREFIX}/sweeps/([A-Za-z0-9_]+)/approve", SweepApproveHandler, {}),
    ]


def _op(method: str, op_id: str, summary: str, responses: dict[str, str], params: list[dict] | None = None,
        body: str | None = None) -> dict:
    op: dict[str, Any] = {"operationId": op_id, "summary": summary, "tags": ["review"],
                          "description": "Review API (docs/review.md); not a tool of the public API. Needs a "
                                         "reviewer key: Authorization: Bearer <key> or X-Api-Key.",
                          "responses": {code: {"description": text} for code, text in responses.items()}}
    if params:
        op["parameters"] = params
    if body:
        op["requestBody"] = {"required": False, "description": body,
                             "content": {"application/json": {"schema": {"type": "object"}}}}
    return {method: op}


def _path(name: str) -> dict:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _query(name: str, desc: str) -> dict:
    return {"name": name, "in": "query", "required": False, "schema": {"type": "string"}, "description": desc}


_AUTH = {"401": "No key, or a key not known", "403": "Key revoked or without the review scope"}
REVIEW_PATHS: dict[str, Any] = {
    f"{PREFIX}/me": _op("get", "review_me", "The reviewer the key belongs to", {"200": "The reviewer", **_AUTH}),
    f"{PREFIX}/pending": _op("get", "review_pending", "Jobs waiting for review, oldest first",
                             {"200": "The pending list", "400": "Bad filter", **_AUTH},
                             [_query("bbox", "w,s,e,n: jobs whose area meets it"), _query("sweep", "a sweep id"),
                              _query("limit", "1 to 1000, default 200")]),
    f"{PREFIX}/jobs/{{jobId}}": _op("get", "review_job", "One job: facts, measurements, replicas and their "
                                    "agreement, validation notes, photo references",
                                    {"200": "The job", "404": "No such job", **_AUTH}, [_path("jobId")]),
    f"{PREFIX}/jobs/{{jobId}}/approve": _op("post", "review_approve", "Approve a job: its facts go live, its cells "
                                            "are covered", {"200": "Approved", "409": "Not waiting for review",
                                                            **_AUTH}, [_path("jobId")], "reason (optional)"),
    f"{PREFIX}/jobs/{{jobId}}/reject": _op("post", "review_reject", "Reject a job with a reason: nothing of it is "
                                           "served", {"200": "Rejected", "400": "No reason",
                                                      "409": "Not waiting for review", **_AUTH},
                                           [_path("jobId")], "reason (required)"),
    f"{PREFIX}/sweeps/{{sweepId}}/approve": _op("post", "review_approve_sweep", "Approve every waiting job of a "
                                                "sweep whose replicas agree", {"200": "What was approved and what "
                                                                               "was left", "404": "No such sweep",
                                                                               **_AUTH},
                                                [_path("sweepId")], "reason (optional)"),
}
