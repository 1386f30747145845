"""The OpenAPI document validates and lists every registered route."""
from __future__ import annotations

from openapi_spec_validator import validate

from coordinator.core.families import FAMILIES


async def test_openapi_validates_and_lists_every_route(coordinator):
    r = await coordinator.get("/openapi.json")
    assert r.status == 200
    doc = r.json()
    validate(doc)  # raises on an invalid OpenAPI 3.1 document
    assert doc["openapi"] == "3.1.0"
    expected = {FAMILIES[f].path(t.routes[f])
                for t in coordinator.services.registry for f in t.families}
    assert expected <= set(doc["paths"])
    assert {"/earth/events", "/earth/event-changes", "/earth/limits", "/healthz"} <= set(doc["paths"])
    ops = {(p, m) for p, item in doc["paths"].items() for m in item}
    assert ("/earth/events", "get") in ops


# A valid value for every required query parameter a documented route may have.
SAMPLE = {"lat": "-6.2", "lon": "106.8", "bbox": "106.8,-6.21,106.81,-6.2", "id": "gdacs:EQ:1569499",
          "brand": "Q99999901", "poly": "106.8,-6.21;106.81,-6.21;106.81,-6.2", "path": "106.8,-6.21;106.81,-6.2",
          "ring": "106.8,-6.21;106.81,-6.21;106.81,-6.2"}


async def test_every_documented_route_answers(coordinator):
    doc = (await coordinator.get("/openapi.json")).json()
    for path, item in doc["paths"].items():
        if "{" in path and "{cred}" not in path:
            continue
        for method in item:
            if method != "get":
                continue
            query = "&".join(f"{p['name']}={SAMPLE[p['name']]}" for p in item[method].get("parameters", [])
                             if p["in"] == "query" and p.get("required"))
            r = await coordinator.get(path.replace("{cred}", "anon") + (f"?{query}" if query else ""))
            tool = coordinator.services.registry.get(item[method]["x-tool"]) if "x-tool" in item[method] else None
            if tool is None and path.startswith(("/review/", "/node/")):
                want = 401   # reviewer and node routes answer only their own bearer tokens
            else:
                want = 200 if tool is None or tool.keyless else 401 if "{cred}" not in path else 403
                if want == 200 and tool is not None and tool.cold == "accepted":
                    want = 202   # an accepted tool's cold request (/hazard-index) answers 202 first
            assert r.status == want, (path, r.status, r.body[:200])


async def test_parameters_carry_their_bounds(coordinator):
    doc = (await coordinator.get("/openapi.json")).json()
    for path, item in doc["paths"].items():
        for op in item.values():
            for p in op.get("parameters", []):
                s = p["schema"]
                if "minimum" in s or "maximum" in s:
                    assert "to" in p["description"] or "least" in p["description"] or "most" in p["description"]
