"""Caps of the credentialed family, applied from parameter kinds (stand-in
tools: the real bbox and radius tools are not built yet): bbox sides against
the plan and the per-endpoint ceiling, radius against the plan, rows cut."""
from __future__ import annotations

import pytest

from coordinator.core.access import caps
from coordinator.core.registry import BBOX, Param, Tool
from tests.support import make_settings, start_coordinator, stop_coordinator
from tests.test_access_support import key, registry_with_standins
from tests.test_error_shape import assert_error_shape


@pytest.fixture
async def c(sqlite_url, upstream):
    c = await start_coordinator(make_settings(sqlite_url, upstream), registry_with_standins())
    yield c
    await stop_coordinator(c)


def bbox(side: float) -> str:
    return f"10,10,{10 + side},{10 + side / 2}"


async def test_a_bbox_over_the_plan_cap_is_400_naming_the_cap(c):
    r = await c.get(f"/public/v1/anon/area-probe?bbox={bbox(0.3)}")
    assert r.status == 400
    assert_error_shape(r.json(), "bad_parameter")
    d = r.json()["error"]["details"]
    assert d["cap"] == "bboxDeg" and d["limit"] == 0.25 and d["plan"] == "anon"
    assert "bboxDeg" in r.json()["error"]["message"]
    assert (await c.get(f"/public/v1/anon/area-probe?bbox={bbox(0.25)}")).status == 200
    pro = (await key(c, "Pro"))[0]
    assert (await c.get(f"/public/v1/{pro}/area-probe?bbox={bbox(1)}")).status == 200
    r = await c.get(f"/public/v1/{pro}/area-probe?bbox={bbox(1.2)}")
    assert r.status == 400 and r.json()["error"]["details"]["limit"] == 1
    # The direct family has no plan caps (its bounds are the tools' own).
    assert (await c.get(f"/earth/area-probe?bbox={bbox(1.2)}")).status == 200


async def test_the_per_endpoint_ceiling_binds_every_plan(c):
    ent = (await key(c, "Enterprise"))[0]
    r = await c.get(f"/public/v1/{ent}/places?bbox={bbox(1)}")
    assert r.status == 400
    d = r.json()["error"]["details"]
    assert d["cap"] == "perEndpointBbox" and d["limit"] == 0.6
    assert (await c.get(f"/public/v1/{ent}/places?bbox={bbox(0.6)}")).status == 200
    r = await c.get(f"/public/v1/{ent}/limits")
    assert r.json()["caps"]["perEndpointForThisCaller"]["places"] == {"bboxDeg": 0.6, "setBy": "perEndpointBbox"}
    assert r.json()["caps"]["perEndpointForThisCaller"]["area-probe"] == {"bboxDeg": 2, "setBy": "bboxDeg"}


async def test_a_bbox_over_several_bounds_hears_the_tightest_once(c):
    """The places tool's own bound (2 deg, the direct routes') is looser than every plan's cap there: a
    credentialed caller over both is told the one that binds them, not the 2 deg that would then fail again."""
    ent = (await key(c, "Enterprise"))[0]
    for cred, cap, limit in (("anon", "bboxDeg", 0.25), (ent, "perEndpointBbox", 0.6)):
        r = await c.get(f"/public/v1/{cred}/places?bbox={bbox(3)}")
        assert r.status == 400
        d = r.json()["error"]["details"]
        assert (d["cap"], d["limit"]) == (cap, limit) and cap in r.json()["error"]["message"]
    r = await c.get(f"/earth/places?bbox={bbox(3)}")  # the direct family: the tool's own bound
    assert r.status == 400 and r.json()["error"]["details"]["maxSideDeg"] == 2
    # A parameter's own bound tighter than a plan's cap binds every plan, and /limits says so.
    tool = Tool(name="tight_probe", title="t", description="t", handler=None, routes={"public": "/tight"},
                params=(Param("bbox", BBOX, "bbox", max_side_deg=0.1),))
    assert caps.bbox_ceiling(tool, "Enterprise") == (0.1, "perEndpointBbox")
    assert caps.bbox_ceiling(tool, "anon") == (0.1, "perEndpointBbox")


async def test_a_radius_over_the_plan_cap_is_400_and_a_default_over_it_is_lowered_with_a_caveat(c):
    r = await c.get("/public/v1/anon/area-probe?radius=900")
    assert r.status == 400
    assert r.json()["error"]["details"] == {"parameter": "radius", "cap": "radiusM", "limit": 800,
                                            "plan": "anon", "value": 900}
    r = await c.get("/public/v1/anon/area-probe")
    assert r.status == 200
    assert r.json()["params"]["radius"] == 800
    assert any("radiusM" in cv for cv in r.json()["caveats"])
    free = (await key(c, "Free"))[0]
    r = await c.get(f"/public/v1/{free}/area-probe")
    assert r.json()["params"]["radius"] == 1000
    assert (await c.get(f"/public/v1/{free}/area-probe?radius=1600")).status == 400


async def test_result_rows_are_cut_to_the_plan_cap_with_a_caveat(c):
    r = await c.get("/public/v1/anon/area-probe")
    assert len(r.json()["rows"]) == 2000
    assert any("rows cap of the anon plan" in cv and "3000" in cv for cv in r.json()["caveats"])
    ent = (await key(c, "Enterprise"))[0]
    r = await c.get(f"/public/v1/{ent}/area-probe")
    assert len(r.json()["rows"]) == 3000
    r = await c.get("/earth/area-probe")                         # not a credentialed answer: no rows cap
    assert len(r.json()["rows"]) == 3000


async def test_the_anonymous_credential_object_is_as_the_contract_says(c):
    r = await c.get("/public/v1/anon/limits")
    assert r.status == 200
    body = r.json()
    assert {"kind", "plan", "scopes", "layers", "metered", "quota", "anonymous", "caps", "quotaByPlan"} <= set(body)
    assert body["kind"] == "anon" and body["plan"] == "anon" and body["metered"] is False
    assert body["layers"] == ["*"] and body["quota"] is None
    assert body["anonymous"]["perMinute"] == 120 and body["anonymous"]["scope"] and body["anonymous"]["note"]
    assert "earth.site-intel" not in body["scopes"] and "earth.limits" in body["scopes"]
    assert set(body["caps"]) >= {"forThisCaller", "perEndpointBbox", "radiusM", "byPlan", "note"}
    assert body["caps"]["forThisCaller"] == {"bboxDeg": 0.25, "radiusM": 800, "pointsPerLayer": 800,
                                             "twinPoints": 3000, "rows": 2000}
    assert body["caps"]["perEndpointBbox"] == {"places": 0.6, "infrastructure": 2, "traffic-tiles": 0.6}
    assert [q["plan"] for q in body["quotaByPlan"]] == ["anon", "Free", "Basic", "Pro", "Enterprise"]
    free = (await key(c, "Free"))[0]
    body = (await c.get(f"/public/v1/{free}/limits")).json()
    assert body["kind"] == "key" and body["plan"] == "Free" and body["metered"] is True
    assert body["quota"]["perDay"] == 5000 and body["quota"]["usedToday"] == 0     # /limits itself is not counted
    assert "earth.site-intel" in body["scopes"]


async def test_a_direct_answer_varies_on_the_api_key_header(coordinator):
    """A keyless answer is public, a keyed one private and different: a shared cache keyed on the URL
    alone handed the keyless copy to keyed callers. The credentialed family's key is its path."""
    def varies(r) -> set[str]:
        return {v.strip() for line in r.headers.get_list("Vary") for v in line.split(",")}

    r = await coordinator.get("/earth/limits")
    assert r.status == 200 and "X-Api-Key" in varies(r)
    assert "X-Api-Key" not in varies(await coordinator.get("/public/v1/anon/limits"))
