"""GET /public/v1/{cred}/coral: Coral Reef Watch griddap JSON from its recorded sample, each cell's
alert named in its five steps, land as unknown, the bbox filter and cap, and an unreadable
answer degraded. The product's age is judged against a fixed clock: older than 60 h (a daily
update missing) it is stale, flagged and said."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from coordinator.demo.upstream import Canned
from coordinator.panels import coral
from coordinator.panels.coral import alert
from coordinator.panels.freshness import age
from tests.support import fixed_clock, make_settings, start_coordinator, stop_coordinator

BBOX = "115,-8.25,115.25,-8"
PATH = "/crw/griddap/noaacrwbaa7dDaily.json"
# A day after the recorded product's stamp (2026-11-24 12:00 UTC): the newest there normally is.
DAY_LATER = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)
# The audit's request time: 2 days 17 h 11 min after the stamp.
AUDIT = datetime(2026, 11, 27, 5, 11, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def clock(monkeypatch):
    """The panel's clock at DAY_LATER; a test moves it with ``clock(t)``."""
    return fixed_clock(monkeypatch, coral, DAY_LATER)


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
    assert (body["asOf"], body["ageS"], body["stale"], body["staleAfterS"]) == \
        ("2026-11-25T12:00:00Z", 86400, False, 216000)
    assert not any("stale" in cv for cv in body["caveats"])


async def test_a_product_days_old_is_flagged_stale(c, clock):
    clock(AUDIT)
    body = (await c.get(f"/public/v1/anon/coral?bbox={BBOX}")).json()
    assert body["date"] == "2026-11-24T12:00:00Z" and body["asOf"] == "2026-11-27T05:11:00Z"
    assert body["stale"] is True and body["ageS"] == 2 * 86400 + 17 * 3600 + 11 * 60
    assert body["byStep"]["Alert Level 1"] == 4          # the cells are still served, as of their date
    assert any(cv.startswith("The product is dated 2026-11-24T12:00:00Z, 2.7 days before 2026-11-27T05:11:00Z "
                             "(stale: true)") for cv in body["caveats"])


async def test_a_product_whose_date_cannot_be_read_is_of_unknown_age(c, upstream):
    upstream.set_json(PATH, {"table": {"columnNames": ["time", "latitude", "longitude", "bleaching_alert_area"],
                                       "rows": [["2026-11-24", -8.025, 115.025, 1]]}})
    body = (await c.get(f"/public/v1/anon/coral?bbox={BBOX}")).json()
    assert body["ageS"] is None and body["stale"] is None
    assert any("date could not be read" in cv for cv in body["caveats"])


def test_the_stale_edge_is_the_end_of_the_second_day_after_the_stamp():
    stamp = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc)
    end_of_d2 = datetime(2026, 11, 27, 0, 0, tzinfo=timezone.utc)
    assert age(stamp, end_of_d2, coral.STALE_AFTER)["stale"] is False
    assert age(stamp, end_of_d2.replace(second=1), coral.STALE_AFTER)["stale"] is True


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


async def test_a_code_outside_the_table_is_never_the_highest_alert(c, upstream):
    """Code 252 (no step) outranked an Alert Level 2 cell as 'highest'."""
    upstream.set_json(PATH, {"table": {"columnNames": ["time", "latitude", "longitude", "bleaching_alert_area"],
                                       "rows": [["2026-11-24T12:00:00Z", -8.025, 115.025, 4],
                                                ["2026-11-24T12:00:00Z", -8.075, 115.025, 252]]}})
    body = (await c.get(f"/public/v1/anon/coral?bbox={BBOX}")).json()
    assert body["highest"]["name"] == "Alert Level 2" and body["highest"]["code"] == 4


async def test_an_unreadable_answer_is_degraded(c, upstream):
    upstream.set(PATH, Canned(500, b"Error {\n    code=500;\n}", "text/plain"))
    body = (await c.get(f"/public/v1/anon/coral?bbox={BBOX}")).json()
    assert body["health"]["degraded"] and body["byStep"] is None and body["cells"] == []


@pytest.mark.parametrize("code, name", [(0, "No Stress"), (1, "Bleaching Watch"), (2, "Bleaching Warning"),
                                        (3, "Alert Level 1"), (4, "Alert Level 2"), (5, "Alert Level 3"),
                                        (None, "unknown (land or no data)"), (251, "unknown (land or no data)")])
def test_the_five_steps_are_named(code, name):
    assert alert(code)["name"] == name
