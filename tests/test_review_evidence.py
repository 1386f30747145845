"""Image evidence a node sends with its measurements (object boxes, the rows a road width was read
on) is checked against the job's photos before a reviewer is shown it drawn over them; results
without it (engines before it) still pass; the review API gives the page what it needs to draw it
(each photo's listed size) and the base map the coordinator names."""
from __future__ import annotations

import pytest

from coordinator.demo.photos import honest_result
from tests.test_error_shape import assert_error_shape
from tests.test_review_kit import photo_in_every_cell, review_sqlite, reviewer  # noqa: F401
from tests.test_sweep_validation import check, job_row, wire_job
from tests.test_sweeps_kit import CENTRE, enrolled, photos, request_sweep, sweeps_db  # noqa: F401


def evidenced(job, **over) -> dict:
    """An honest result for ``job`` whose first photo (256 x 192) carries image evidence."""
    doc = honest_result(wire_job(job), "nd_x")
    m = doc["measurements"][0]
    m["roadWidth"]["rows"] = [{"v": 150.5, "uLeft": 30.0, "uRight": 226.0}, {"v": 191.5, "uLeft": 0.0, "uRight": 256.0}]
    p = job.photos[0]
    m["objects"].append({"label": "car", "distanceM": 9.0, "size": {"widthM": 1.9, "heightM": 1.7},
                         "bearingDeg": 10.0, "lon": p["lon"], "lat": p["lat"] + 0.00008,
                         "heightIsLowerBound": False, "widthIsLowerBound": False, "score": 0.9,
                         "box": [100.0, 90.0, 160.0, 192.0], "usedForScale": True})
    for key, value in over.items():
        if key == "box":
            m["objects"][0]["box"] = value
        else:
            m["roadWidth"][key] = value
    return doc


def test_evidence_inside_its_photo_passes_and_a_result_without_any_still_does():
    job = job_row()
    assert check(evidenced(job), job) == []
    assert check(honest_result(wire_job(job), "nd_x"), job) == []       # an engine from before the evidence


@pytest.mark.parametrize("over, expected", [
    ({"box": [100.0, 90.0, 256.5, 150.0]}, "measurements[0].objects[0].box [100.0, 90.0, 256.5, 150.0] lies outside "
                                            "the 256 x 192 photo"),
    ({"box": [100.0, 90.0, 160.0, 192.01]}, "lies outside the 256 x 192 photo"),
    ({"rows": [{"v": 193.0, "uLeft": 0.0, "uRight": 10.0}]}, "measurements[0].roadWidth.rows[0] (v 193, u 0-10) "
                                                              "lies outside the 256 x 192 photo"),
    ({"rows": [{"v": 100.0, "uLeft": 0.0, "uRight": 300.0}]}, "lies outside the 256 x 192 photo"),
    ({"rows": [{"v": 100.0 + i, "uLeft": 0.0, "uRight": 10.0} for i in range(6)]},
     "measurements[0].roadWidth.rows: 6 rows for a width read on 5"),
    ({"box": [-1.0, 0.0, 1.0, 1.0]}, "schema: measurements[0].objects[0].box: must be [u0, v0, u1, v1]"),
])
def test_evidence_that_does_not_fit_its_photo_is_refused_with_its_reason(over, expected):
    job = job_row()
    reasons = check(evidenced(job, **over), job)
    assert any(expected in r for r in reasons), reasons


def test_a_photo_listed_larger_takes_evidence_in_its_own_pixels():
    job = job_row()
    for p in job.photos:
        p["width"], p["height"] = 4000, 3000
    assert check(evidenced(job, box=[3000.0, 2000.0, 3999.9, 3000.0]), job) == []
    assert any("outside the 4000 x 3000 photo" in r for r in check(evidenced(job, box=[3000.0, 0.0, 4000.5, 1.0]), job))


async def test_a_node_sending_a_box_outside_the_photo_is_refused_through_the_protocol(sweeps_db, photos):
    photos.scatter(*CENTRE, radius_m=300, n=5, seed=1)
    await request_sweep(sweeps_db, radius=300)
    (node,) = await enrolled(sweeps_db, trusted=True)
    doc = await node.lease()
    body = node.honest(doc)
    ref = doc["job"]["photos"][0]
    body["measurements"][0]["objects"].append(
        {"label": "pole", "distanceM": 8.0, "size": {"widthM": 0.3, "heightM": 6.0}, "bearingDeg": 10.0,
         "lon": ref["lon"], "lat": ref["lat"], "heightIsLowerBound": False, "widthIsLowerBound": False,
         "score": 0.8, "box": [10.0, 10.0, ref["width"] + 40.0, 20.0]})
    r = await node.submit(doc["lease"]["leaseId"], body)
    assert r.status == 422, r.body
    assert_error_shape(r.json(), "invalid_result")
    assert any("box" in x and f"outside the {ref['width']} x {ref['height']} photo" in x
               for x in r.json()["error"]["details"]["reasons"])


async def test_the_review_api_names_the_base_map_and_each_photos_size(review_sqlite, photos):
    from tests.test_review_kit import sweep_to_review
    c = review_sqlite
    photo_in_every_cell(photos)
    await sweep_to_review(c, photos)
    headers = await reviewer(c)
    me = (await c.get("/review/v1/me", headers=headers)).json()
    assert me["baseMap"] is None          # none configured by default (docs/review.md)
    from coordinator.review.workflow import base_map
    osm = c.services.settings.model_copy(update={"review_tiles_url": "https://tile.openstreetmap.org/{z}/{x}/{y}.png"})
    assert base_map(osm) == {"tiles": "https://tile.openstreetmap.org/{z}/{x}/{y}.png",
                             "attribution": "© OpenStreetMap contributors",
                             "attributionUrl": "https://www.openstreetmap.org/copyright", "maxZoom": 19}
    first = (await c.get("/review/v1/pending", headers=headers)).json()["pending"][0]
    job = (await c.get(f"/review/v1/jobs/{first['jobId']}", headers=headers)).json()
    assert job["photos"] and all((p["width"], p["height"]) == (256, 192) for p in job["photos"])
