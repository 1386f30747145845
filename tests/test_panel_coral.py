"""GET /public/v1/{cred}/coral: Coral Reef Watch griddap JSON from its recorded sample, each cell's
alert named in its five steps, land as unknown, the bbox filter and cap, and an unreadable
answer degraded."""
from __future__ import annotations

import pytest

from coordinator.demo.upstream import Canned
from coordinator.panels.coral import alert
from tests.support import make_settings, start_coordinator, stop_coordinator

BBOX = "115,-8.25,115.25,-8"
PATH = "/crw/griddap/noaacrwbaa7dDaily.json"


@pytest.fixture
async def c(db_url, upstream):
    c = await start_coordinator(make_settings(db_url, upstream))
    yield c
    await stop_coordinator(c)


async def test_cells_with_their_step_named(c, upstream):
    r = await c.get(f"/public/v1/anon/coral?bbox={BBOX}")
    body = r.json()
    assert r.status == 200 and list(body)[0] == "caveats"
    assert len(body["cells"]) == 25 and body["date"] == "2026-11-24T12:00:00Z"
    assert body["byStep"] == {"No Stress": 3, "Bleaching Watch": 8, "Bleaching Warning": 9, "Alert Level 1": 4,
                              "unknown (land or no data)": 1}
    assert body["highest"] == {"code": 3, "name": "Alert Level 1", "step": 3}
    first = body["cells"][0]
    assert first == {"latitude": -8.025, "longitude": 115.025, "date": "2026-11-24T12:00:00Z",
                     "alert": {"code": 0, "name": "No Stress", "step": 0}, "license": "public-domain"}
    assert body["health"]["sources"][0]["name"] == "NOAA Coral Reef Watch" and body["health"]["sources"][0]["ok"]
    assert upstream.hits[PATH] == 1


async def test_a_smaller_bbox_keeps_only_its_cells(c):
    body = (await c.get("/public/v1/anon/coral?bbox=115.1,-8.25,115.25,-8.1")).json()
    assert body["cells"] and all(115.1 <= x["longitude"] <= 115.25 and -8.25 <= x["latitude"] <= -8.1
                                 for x in body["cells"])
    assert len(body["cells"]) == 9


async def test_the_plan_bbox_cap_applies(c):
    r = await c.get("/public/v1/anon/coral?bbox=115,-8.5,115.5,-8")
    assert r.status == 400 and r.json()["error"]["details"]["cap"] == "bboxDeg"


async def test_an_all_land_bbox_is_unknown_not_no_stress(c, upstream):
    upstream.set_json(PATH, {"table": {"columnNames": ["time", "latitude", "longitude", "bleaching_alert_area"],
                                       "rows": [["2026-11-24T12:00:00Z", -8.025, 115.025, None],
                                                ["2026-11-24T12:00:00Z", -8.075, 115.025, 251]]}})
    body = (await c.get(f"/public/v1/anon/coral?bbox={BBOX}")).json()
    assert body["highest"] is None and body["byStep"] == {"unknown (land or no data)": 2}
    assert any("unknown, not No Stress" in cv for cv in body["caveats"])


async def test_an_unreadable_answer_is_degraded(c, upstream):
    upstream.set(PATH, Canned(500, b"Error {\n    code=500;\n}", "text/plain"))
    body = (await c.get(f"/public/v1/anon/coral?bbox={BBOX}")).json()
    assert body["health"]["degraded"] and body["byStep"] is None and body["cells"] == []


@pytest.mark.parametrize("code, name", [(0, "No Stress"), (1, "Bleaching Watch"), (2, "Bleaching Warning"),
                                        (3, "Alert Level 1"), (4, "Alert Level 2"), (5, "Alert Level 3"),
                                        (None, "unknown (land or no data)"), (251, "unknown (land or no data)")])
def test_the_five_steps_are_named(code, name):
    assert alert(code)["name"] == name
