"""The node and review routes are declared once (``coordinator/faces/operations.py``): the
handlers validate by the declaration (a bad value is 400 in the one error shape naming it)
and the OpenAPI document is generated from it, with real body schemas and every answer."""
from __future__ import annotations

import pytest
from openapi_spec_validator import validate

from coordinator.core.errors import BadParameter
from coordinator.core.registry import INTEGER, STRING, Param
from coordinator.faces.operations import AUTH_NODE, Body, Operation
from coordinator.faces.node_protocol import OPERATIONS as NODE_OPS
from coordinator.faces.review_api import OPERATIONS as REVIEW_OPS
from tests.test_error_shape import assert_error_shape
from tests.test_review_kit import reviewer
from tests.test_sweeps_kit import SimNode, enrolled, photos, sweeps_sqlite  # noqa: F401


def test_a_declaration_parses_path_query_and_body_and_names_what_is_wrong():
    op = Operation("POST", "/x/{thing}", "x", "X", "test", auth=AUTH_NODE,
                   path_params=(Param("thing", STRING, "a thing", pattern="[a-z]+", location="path"),),
                   query=(Param("n", INTEGER, "n", minimum=1, maximum=5, default=2),),
                   body=Body(fields=(Param("why", STRING, "why", required=True, max_length=4),)))
    assert op.route() == "/x/([^/]+)"
    assert op.parse_path(("abc",)) == {"thing": "abc"}
    assert op.parse_query({}) == {"n": 2} and op.parse_query({"n": [b"3"]}) == {"n": 3}
    assert op.body.parse({"why": "ok"}) == {"why": "ok"}
    for call, name in ((lambda: op.parse_path(("A!",)), "thing"), (lambda: op.parse_query({"n": [b"9"]}), "n"),
                       (lambda: op.parse_query({"m": [b"1"]}), "m"), (lambda: op.body.parse({}), "why"),
                       (lambda: op.body.parse({"why": 3}), "why"), (lambda: op.body.parse({"why": "12345"}), "why"),
                       (lambda: op.body.parse({"why": "a", "how": 1}), "how")):
        with pytest.raises(BadParameter) as exc:
            call()
        assert exc.value.details["parameter"] == name
    with pytest.raises(ValueError):
        Operation("GET", "/x/{a}", "y", "Y", "test")     # a path parameter not declared


async def test_the_document_is_generated_from_the_declarations_with_body_schemas_and_every_answer(sweeps_sqlite):
    doc = (await sweeps_sqlite.get("/openapi.json")).json()
    validate(doc)
    for op in NODE_OPS + REVIEW_OPS:
        entry = doc["paths"][op.path][op.method.lower()]
        assert entry == op.openapi(), op.operation_id
        codes = set(entry["responses"])
        assert "429" in codes, op.operation_id
        if op.auth != "none":
            assert {"401", "403"} <= codes and entry["security"], op.operation_id
        if op.method == "POST":
            assert {"400", "413"} <= codes, op.operation_id
        for code, resp in entry["responses"].items():
            if code >= "400":
                assert resp["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
    enrol = doc["paths"]["/node/v1/enrol"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert enrol["additionalProperties"] is False
    assert set(enrol["required"]) == {"platform", "gpu", "engineVersion", "engineBuild"}
    assert enrol["properties"]["gpu"]["maxLength"] == 200
    reject = doc["paths"]["/review/v1/jobs/{jobId}/reject"]["post"]["requestBody"]
    assert reject["required"] is True and reject["content"]["application/json"]["schema"]["required"] == ["reason"]
    pending = {p["name"]: p for p in doc["paths"]["/review/v1/pending"]["get"]["parameters"]}
    assert pending["limit"]["schema"]["type"] == "integer" and pending["limit"]["schema"]["maximum"] == 1000
    assert "/node/v1/me" in doc["paths"]
    assert {"nodeToken", "reviewerKey"} <= set(doc["components"]["securitySchemes"])


async def test_node_routes_answer_a_bad_value_400_naming_it(sweeps_sqlite):
    (node,) = await enrolled(sweeps_sqlite)
    for path, body, name in (("/node/v1/leases/ls-bad!/heartbeat", {}, "leaseId"),
                             ("/node/v1/leases/ls_x/heartbeat", {"extra": 1}, "extra"),
                             ("/node/v1/lease?colour=red", {}, "colour"),
                             ("/node/v1/leases/ls_x/result?next=2", {}, "next"),
                             ("/node/v1/leases/ls_x/release", {"reason": "   "}, "reason"),
                             ("/node/v1/leases/ls_x/release", {"reason": 7}, "reason")):
        r = await sweeps_sqlite.post(path, body, headers=node.auth)
        assert r.status == 400, (path, r.status, r.body)
        assert_error_shape(r.json(), "bad_parameter")
        assert r.json()["error"]["details"]["parameter"] == name, (path, r.body)
    r = await SimNode(sweeps_sqlite).enrol(gpu=["not", "text"])
    assert r.status == 400 and r.json()["error"]["details"]["parameter"] == "gpu"


async def test_review_routes_answer_a_bad_value_400_naming_it(sweeps_sqlite):
    auth = await reviewer(sweeps_sqlite)
    for method, path, body, name in (("GET", "/review/v1/pending?limit=abc", None, "limit"),
                                     ("GET", "/review/v1/pending?limit=0", None, "limit"),
                                     ("GET", "/review/v1/pending?colour=red", None, "colour"),
                                     ("GET", "/review/v1/pending?bbox=1,2,3", None, "bbox"),
                                     ("GET", "/review/v1/jobs/twelve", None, "jobId"),
                                     ("POST", "/review/v1/jobs/1/reject", {}, "reason"),
                                     ("POST", "/review/v1/jobs/1/approve", {"reason": 1}, "reason"),
                                     ("POST", "/review/v1/jobs/1/approve", {"why": "x"}, "why"),
                                     ("POST", "/review/v1/sweeps/sr-x!/approve", {}, "sweepId")):
        r = await sweeps_sqlite.request(method, path, body, headers=auth)
        assert r.status == 400, (path, r.status, r.body)
        assert_error_shape(r.json(), "bad_parameter")
        assert r.json()["error"]["details"]["parameter"] == name, (path, r.body)
