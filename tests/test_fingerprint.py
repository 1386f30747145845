"""environmental_fingerprint against a fake model server speaking the real chat API
(tests/test_fingerprint_fake.py) and the fake photo provider: the request as sent, each figure
with its source and timestamp, the honesty rules applied to the model's answer, every way of
not reading (no model, no photos, a malformed answer, a timeout) answered honestly and never
cached, the 6 h cache with single flight, and the bad-input shape."""
from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import json
from datetime import datetime, timezone

import pytest
from sqlalchemy import insert

from coordinator.catalogue import all_tools
from coordinator.core.db.models import CoverageCell, SeenMeasurement
from coordinator.core.registry import ToolRegistry
from coordinator.datasets import ingest
from coordinator.demo.photos import FakePhoto, FakePhotoProvider
from coordinator.features import grid
from coordinator.fingerprint import reading
from coordinator.seen.publish import fact_doc, insert_facts
from coordinator.seen.spatial import Disc
from coordinator.sweeps.coverage import offset, point_cell
from tests.support import make_settings, start_coordinator, stop_coordinator
from tests.test_error_shape import assert_error_shape
from tests.test_fingerprint_fake import FakeModel, sample_content, vlm_settings

LAT, LON = -6.9021, 107.6187
URL = f"/earth/fingerprint?lat={LAT}&lon={LON}"
PLACES = [(0, 8), (12, -9), (-20, 15)]          # metres east, north of the point: 8, 15, 25 m away
TAKEN = ["2026-06-01T08:00:00+00:00", "2026-08-01T08:00:00+00:00", "2026-07-01T08:00:00+00:00"]
SERVED = [t.replace("+00:00", "Z") for t in TAKEN]           # every time is served in UTC with a Z


def add_photos(fake: FakePhotoProvider, places=PLACES, prefix: str = "fp") -> None:
    for i, (east, north) in enumerate(places):
        la, lo = offset(LAT, LON, east, north)
        fake.add(FakePhoto(id=f"{prefix}-{i}", lat=round(la, 7), lon=round(lo, 7), heading=90.0 * i,
                           captured_at=TAKEN[i % 3], road_width_m=7.0, seed=i))


@pytest.fixture
async def photos():
    fake = FakePhotoProvider()
    add_photos(fake)
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
async def model():
    m = await FakeModel().start()
    yield m
    await m.stop()


@pytest.fixture
async def c(sqlite_url, upstream, photos, model):
    c = await start_coordinator(make_settings(sqlite_url, upstream, photos_url=photos.api_url,
                                              sources=vlm_settings(model)))
    yield c
    await stop_coordinator(c)


def reply_for(n: int, **figures) -> dict:
    """A well-formed answer for ``n`` photos: every figure unknown but those given."""
    out = {k: {"value": None, "confidence": "unknown", "photos": []} for k in reading.KEYS}
    out.update(figures)
    out.setdefault("scaleAnchors", [])
    return out


async def test_a_reading_serves_each_figure_with_its_source_from_a_real_format_request(c, model, photos):
    r = await c.get(URL)
    body = r.json()
    assert r.status == 200, body
    assert list(body)[0] == "caveats" and body["status"] == "read"
    assert "estimates, not measurements" in " ".join(body["caveats"])
    assert body["health"]["degraded"] is False
    assert [s["name"] for s in body["health"]["sources"]] == ["panoramax", "street photos (image bytes)",
                                                              "vision-language model"]
    figs = body["figures"]
    assert set(figs) == set(reading.KEYS)
    width = figs["passableWidth"]
    assert width == {"value": 5.5, "confidence": "high", "unit": "m", "basis": "modelled",
                     "source": {"photos": ["fp-0", "fp-1"], "model": "fake-vlm"},
                     "timestamp": SERVED[1], "license": "CC-BY-SA-4.0"}
    assert figs["sidewalk"]["value"] == "one side" and figs["sidewalk"]["timestamp"] == SERVED[0]
    assert figs["obstacles"]["value"] == ["parked motorcycles", "street vendor cart"]
    assert figs["floodEvidence"] == {**figs["floodEvidence"], "value": [], "confidence": "low"}
    assert figs["overheadClearance"]["value"] == 5.0 and figs["overheadClearance"]["confidence"] == "low"
    assert body["scaleAnchors"] == [{"object": "car width", "assumedSizeM": 1.7, "photo": "fp-0"},
                                    {"object": "motorcycle length", "assumedSizeM": 1.9, "photo": "fp-1"}]
    assert [p["id"] for p in body["photos"]] == ["fp-0", "fp-1", "fp-2"]
    assert [round(p["distanceM"]) for p in body["photos"]] == [8, 15, 25]
    assert body["model"]["name"] == "fake-vlm" and body["model"]["usage"]["total_tokens"] == 3321
    # The request, as the model server received it.
    sent = model.requests[0]
    assert sent["model"] == "fake-vlm" and sent["temperature"] == 0 and sent["max_tokens"] == 1200
    assert sent["response_format"]["type"] == "json_schema"
    schema = sent["response_format"]["json_schema"]["schema"]
    assert schema == reading.answer_schema(3)
    assert schema["properties"]["scaleAnchors"]["items"]["properties"]["photo"]["maximum"] == 2
    parts = sent["messages"][0]["content"]
    assert parts[0]["type"] == "text" and "photo 0: 8 m from the point" in parts[0]["text"]
    for part, photo in zip(parts[1:], ("fp-0", "fp-1", "fp-2")):
        head, b64 = part["image_url"]["url"].split(",", 1)
        assert head == "data:image/jpeg;base64" and base64.b64decode(b64) == photos.jpeg(photos.by_id[photo])
    assert len(parts) == 4
    # Photo bytes are never served: only references to the photos in place.
    assert "base64" not in r.body.decode() and body["photos"][0]["url"].endswith("/api/pictures/fp-0/hd.jpg")


async def test_the_service_applies_the_honesty_rules_to_the_models_answer(c, model):
    model.reply = reply_for(
        3,
        passableWidth={"value": 4.2, "confidence": "high", "photos": [2]},          # no anchor in photo 2
        sidewalk={"value": None, "confidence": "high", "photos": [0]},             # no value: unknown
        surface={"value": "gravel", "confidence": "unknown", "photos": [1]},       # unknown: no value
        lighting={"value": "none visible", "confidence": "low", "photos": []},     # cites none: all shown
        scaleAnchors=[{"object": "door height", "assumedSizeM": 2.0, "photo": 0}])
    figs = (await c.get(URL)).json()["figures"]
    assert figs["passableWidth"]["value"] == 4.2 and figs["passableWidth"]["confidence"] == "low"
    assert "no scale anchor" in figs["passableWidth"]["confidenceNote"]
    assert figs["sidewalk"]["value"] is None and figs["sidewalk"]["confidence"] == "unknown"
    assert figs["surface"] == {**figs["surface"], "value": None, "confidence": "unknown"}
    assert figs["lighting"]["source"]["photos"] == ["fp-0", "fp-1", "fp-2"]
    assert all(figs[k]["value"] is None for k in ("obstacles", "signage", "floodEvidence"))


async def test_an_answer_is_cached_6h_with_single_flight(c, model):
    cache, entered = c.services.cache, []
    real_run = cache.run

    async def counted_run(*args, **kw):
        entered.append(1)
        return await real_run(*args, **kw)
    cache.run = counted_run
    model.hold = asyncio.Event()
    pending = [asyncio.ensure_future(c.get(URL)) for _ in range(5)]
    await until(lambda: len(entered) == 5 and len(model.requests) == 1)    # all five wait on the one read
    model.hold.set()
    bodies = [(await p).json() for p in pending]
    assert len(model.requests) == 1 and all(b == bodies[0] for b in bodies) and bodies[0]["status"] == "read"
    assert (cache.misses, cache.hits) == (1, 0)       # one computation, joined by four: none was a cache hit
    del cache.run
    clock = [1000.0]
    c.services.cache.clock = lambda: clock[0]
    c.services.cache.clear()
    assert (await c.get(URL)).json()["status"] == "read" and len(model.requests) == 2
    clock[0] += 6 * 3600 - 1
    assert (await c.get(URL)).status == 200 and len(model.requests) == 2          # still cached
    clock[0] += 2
    assert (await c.get(URL)).status == 200 and len(model.requests) == 3          # 6 h passed: read again
    r = await c.get(URL)
    assert "no-store" not in r.headers.get("Cache-Control", "") and len(model.requests) == 3


@pytest.mark.parametrize("setup, said", [
    (lambda m: setattr(m, "reply", '{"passableWidth": {"value": 5.5, "confid'), "not valid JSON"),
    (lambda m: (setattr(m, "reply", '{"passableWidth": {"value": 5.5, "confid'),
                setattr(m, "finish_reason", "length")), 'finish_reason "length"'),
    (lambda m: setattr(m, "reply", {**sample_content(), "lighting": {"value": "bright", "confidence": "high",
                                                                      "photos": [0]}}),
     "does not fit the schema asked for: at lighting/value"),
    (lambda m: setattr(m, "reply", {k: v for k, v in sample_content().items() if k != "scaleAnchors"}),
     "does not fit the schema"),
    (lambda m: setattr(m, "reply", reply_for(3, signage={"value": [], "confidence": "low", "photos": [3]})),
     "at signage/photos/0"),                                    # a photo it was not shown
    (lambda m: setattr(m, "fail", (500, {"error": {"message": "CUDA out of memory", "type": "api_error"}})),
     "HTTP 500: CUDA out of memory"),
])
async def test_a_malformed_answer_is_degraded_uncached_and_said(c, model, setup, said):
    setup(model)
    for n in (1, 2):
        r = await c.get(URL)
        body = r.json()
        assert r.status == 200 and body["status"] == "model-failed"
        assert body["health"]["degraded"] is True and r.headers["Cache-Control"].startswith("no-store")
        vlm = body["health"]["sources"][-1]
        assert vlm["name"] == "vision-language model" and not vlm["ok"] and said in vlm["error"]
        assert body["caveats"][0].startswith("Degraded") and said in body["caveats"][1]
        assert all(f["value"] is None and f["confidence"] == "unknown" for f in body["figures"].values())
        assert body["disagreements"] == [] and len(model.requests) == n          # never cached


async def test_a_model_timeout_is_degraded_and_the_next_read_is_full(sqlite_url, upstream, photos, model):
    c = await start_coordinator(make_settings(sqlite_url, upstream, photos_url=photos.api_url,
                                              sources=vlm_settings(model, timeout_s=0.3)))
    try:
        model.latency_s = 1.0
        body = (await c.get(URL)).json()
        assert body["status"] == "model-failed" and body["health"]["degraded"]
        assert "timed out: no answer within 0.3 s" in body["health"]["sources"][-1]["error"]
        model.latency_s = 0
        body = (await c.get(URL)).json()
        assert body["status"] == "read" and body["figures"]["passableWidth"]["value"] == 5.5
    finally:
        await stop_coordinator(c)


@pytest.mark.parametrize("vlm, said", [
    ({"base_url": ""}, "set SIS_SOURCES__VLM__BASE_URL and __MODEL"),
    ({"model": ""}, "set SIS_SOURCES__VLM__MODEL"),
])
async def test_no_model_configured_is_said_and_nothing_is_invented(sqlite_url, upstream, photos, model, vlm, said):
    settings = vlm_settings(model)
    settings["vlm"].update(vlm)
    c = await start_coordinator(make_settings(sqlite_url, upstream, photos_url=photos.api_url, sources=settings))
    try:
        body = (await c.get(URL)).json()
        assert body["status"] == "no-model" and said in body["caveats"][1]
        assert body["health"]["sources"] == [{"name": "vision-language model", "ok": False, "license": "n/a",
                                              "error": body["health"]["sources"][0]["error"]}]
        assert all(f["value"] is None for f in body["figures"].values())
        assert photos.searches == 0 and model.requests == []
    finally:
        await stop_coordinator(c)


async def test_no_photo_near_the_point_is_a_full_answer_that_reads_nothing(c, model, photos):
    far = f"/earth/fingerprint?lat={LAT + 0.01}&lon={LON}"
    for _ in range(2):
        r = await c.get(far)
        body = r.json()
        assert body["status"] == "no-photos" and body["health"]["degraded"] is False
        assert "no usable street photo within 50 m" in body["caveats"][0]
        assert body["photos"] == [] and all(f["confidence"] == "unknown" for f in body["figures"].values())
    assert model.requests == [] and photos.searches == 1                          # cached


async def test_the_provider_down_or_every_photo_unreadable_is_degraded(c, model, photos):
    photos.fail_status = 503
    body = (await c.get(URL)).json()
    assert body["status"] == "photos-unavailable" and body["health"]["degraded"] and "HTTP 503" in body["caveats"][1]
    photos.fail_status = 0
    photos.by_id.clear()                                        # the search lists them, the images are gone
    body = (await c.get(URL)).json()
    assert body["status"] == "photos-unreadable" and "3 of 3 photos could not be read" in body["caveats"][1]
    assert model.requests == []


async def test_a_photo_that_cannot_be_read_is_left_out_and_the_answer_is_not_cached(c, model, photos):
    del photos.by_id["fp-1"]
    model.reply = reply_for(2, passableWidth={"value": 6.0, "confidence": "low", "photos": [1]})
    for n in (1, 2):
        body = (await c.get(URL)).json()
        assert body["status"] == "read" and body["health"]["degraded"] is True
        assert body["model"]["photosShown"] == ["fp-0", "fp-2"]
        assert body["figures"]["passableWidth"]["source"]["photos"] == ["fp-2"]
        assert len(model.requests) == n
    assert len(model.requests[0]["messages"][0]["content"]) == 3


async def test_url_mode_hands_the_model_the_photos_urls(sqlite_url, upstream, photos):
    model = await FakeModel(accept_urls=True, api_key="secret-1").start()
    c = await start_coordinator(make_settings(sqlite_url, upstream, photos_url=photos.api_url,
                                              sources=vlm_settings(model, images="url", api_key="secret-1")))
    try:
        body = (await c.get(URL)).json()
        assert body["status"] == "read", body["caveats"]
        urls = [p["image_url"]["url"] for p in model.requests[0]["messages"][0]["content"][1:]]
        assert urls == [p["url"] for p in body["photos"]]
        assert [s["name"] for s in body["health"]["sources"]] == ["panoramax", "vision-language model"]
        assert "secret-1" not in json.dumps(body)
    finally:
        await stop_coordinator(c)
        await model.stop()


async def test_demo_mode_asks_no_model_and_says_so(sqlite_url):
    c = await start_coordinator(make_settings(sqlite_url, demo=True))
    try:
        body = (await c.get("/earth/fingerprint?lat=-6.9147&lon=107.6098")).json()
        assert body["status"] == "no-model" and body["caveats"][0].startswith("Demo data")
        assert any("demo mode runs no vision-language model" in c for c in body["caveats"])
        assert all(f["value"] is None for f in body["figures"].values())
    finally:
        await stop_coordinator(c)


@pytest.mark.parametrize("query, parameter", [("lat=91&lon=0", "lat"), ("lat=0&lon=-181", "lon"), ("lat=0", "lon"),
                                              ("lat=0&lon=0&radius=50", "radius"), ("lat=x&lon=0", "lat"),
                                              ("lat=&lon=0", "lat")])
@pytest.mark.parametrize("family", ["earth", "legacy"])
async def test_bad_input_is_the_one_error_shape(c, query, parameter, family):
    r = await c.get(f"/{family}/fingerprint?{query}")
    assert r.status == 400
    assert_error_shape(r.json(), "bad_parameter")
    assert r.json()["error"]["details"]["parameter"] == parameter


async def test_the_fingerprint_is_absent_from_the_credentialed_family(c):
    assert (await c.get(f"/public/v1/anon/fingerprint?lat={LAT}&lon={LON}")).status == 404


async def until(done, timeout_s: float = 10.0) -> None:
    """Wait for a condition the test cannot await as an event (requests reaching the fake)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while not done():
        assert loop.time() < end, "timed out waiting"
        await asyncio.sleep(0.01)


async def test_the_legacy_family_cuts_a_cold_read_short_at_its_tighter_bound(sqlite_url, upstream, photos, model):
    fp = next(t for t in all_tools() if t.name == "environmental_fingerprint")
    assert (fp.cold_bound_for("earth"), fp.cold_bound_for("legacy"), fp.ttl_for(None)) == (60, 20, 6 * 3600)
    # The same declaration with the legacy bound at 0.3 s, so that the test takes a second, not 20.
    quick = dataclasses.replace(fp, cold_bound_s=10, family_cold_bound_s={"legacy": 0.3})
    registry = ToolRegistry([quick if t.name == fp.name else t for t in all_tools()])
    c = await start_coordinator(make_settings(sqlite_url, upstream, photos_url=photos.api_url,
                                              sources=vlm_settings(model)), registry)
    try:
        model.hold = asyncio.Event()
        t0 = asyncio.get_running_loop().time()
        r = await c.get(f"/legacy/fingerprint?lat={LAT}&lon={LON}")
        assert asyncio.get_running_loop().time() - t0 < 5
        body = r.json()
        assert r.status == 200 and body["status"] == "pending" and body["pending"] is True
        assert body["health"]["degraded"] and r.headers["Retry-After"] == "10"
        assert r.headers["Cache-Control"].startswith("no-store") and "longer than 0.3 s" in body["caveats"][1]
        assert all(f["value"] is None for f in body["figures"].values()) and body["disagreements"] == []
        direct = asyncio.ensure_future(c.get(URL))                # 10 s bound: it waits for the model
        await until(lambda: len(model.requests) == 2)
        model.hold.set()
        assert (await direct).json()["status"] == "read"
        # The legacy read went on after its answer was cut short, into the cache: asked again, the
        # legacy route answers it (at most a pending answer or two while it lands) and the model
        # is not asked a third time.
        for _ in range(20):
            again = (await c.get(f"/legacy/fingerprint?lat={LAT}&lon={LON}")).json()
            if again["status"] != "pending":
                break
        assert again["status"] == "read" and len(model.requests) == 2
    finally:
        await stop_coordinator(c)


def write_street(path, half_deg: float = 0.005) -> None:
    """A small .osm.pbf with one residential street through the point, east to west."""
    import osmium
    header = osmium.io.Header()
    header.add_box(osmium.osm.Box(osmium.osm.Location(LON - half_deg, LAT - half_deg),
                                  osmium.osm.Location(LON + half_deg, LAT + half_deg)))
    writer = osmium.SimpleWriter(str(path), header=header)
    for i, dlon in enumerate((-0.002, 0.0, 0.002), 1):
        writer.add_node(osmium.osm.mutable.Node(id=i, location=(LON + dlon, LAT), version=1))
    writer.add_way(osmium.osm.mutable.Way(id=77, nodes=[1, 2, 3], tags={"highway": "residential",
                                                                      "name": "Jalan Uji"}, version=1))
    writer.close()


async def sweep_the_point(c) -> None:
    """Approved seen-layer data around the point: its cells covered, one photo's measured road
    width of 7.2 m, a wire 6 m up and a sign."""
    at = datetime(2026, 10, 1, tzinfo=timezone.utc)
    near = [offset(LAT, LON, *d) for d in ((10, 0), (0, 20), (-30, 0))]
    facts = [{"cell": point_cell(la, lo), "kind": kind, "lat": la, "lon": lo, "value": value, "unit": "m",
              "confidence": "high", "basis": "measured", "photos": [f"sw-{i}"], "provider": "panoramax",
              "license": "CC-BY-SA-4.0", "observed_at": "2026-09-01T08:00:00Z", "job_id": 1, "sweep_id": "sr_fp",
              "approved_at": at}
             for i, (kind, value, (la, lo)) in enumerate([("roadway", {"widthM": 7.2}, near[0]),
                                                          ("wires", {"clearanceM": 6.0}, near[1]),
                                                          ("signage", {"heightM": 0.6}, near[2])])]
    la, lo = near[0]
    async with c.services.db.write() as s:
        await insert_facts(s, [{**f, "doc": fact_doc(f)} for f in facts])
        await s.execute(insert(SeenMeasurement), [{
            "cell": point_cell(la, lo), "photo_id": "sw-0", "lat": la, "lon": lo, "heading": 90.0,
            "captured_at": "2026-09-01T08:00:00Z", "provider": "panoramax", "license": "CC-BY-SA-4.0",
            "photo_url": "https://photos.example/sw-0.jpg",
            "road_width": {"widthM": 7.2, "method": "kerb-to-kerb", "spreadM": 0.3, "samples": 5},
            "calibration": {"scaleTrust": "high", "focalPx": 230.0, "focalBasis": "measured",
                            "cameraHeightM": 1.65, "pitchDeg": 0.0, "evidence": {}},
            "objects": [], "job_id": 1, "approved_at": at}])
        await s.execute(insert(CoverageCell), [{"cell": x, "state": "covered", "request_id": None, "updated_at": at,
                                                "covered_at": at} for x in Disc.of(LAT, LON, 100).ground])


async def test_disagreements_with_the_prior_and_the_seen_layer_are_listed_never_averaged(db_url, upstream, photos,
                                                                                        model, tmp_path):
    c = await start_coordinator(make_settings(db_url, upstream, photos_url=photos.api_url,
                                              sources=vlm_settings(model)))
    try:
        write_street(tmp_path / "street.osm.pbf")
        await ingest.run(c.services.db, "osm", tmp_path / "street.osm.pbf")
        await sweep_the_point(c)
        anchor = [{"object": "car width", "assumedSizeM": 1.8, "photo": 0}]
        model.reply = reply_for(3, passableWidth={"value": 3.0, "confidence": "high", "photos": [0]},
                                overheadClearance={"value": 5.8, "confidence": "low", "photos": [0]},
                                signage={"value": [], "confidence": "low", "photos": [0, 1, 2]},
                                scaleAnchors=anchor)
        body = (await c.get(URL)).json()
        assert body["status"] == "read" and body["health"]["degraded"] is False
        prior, seen = body["crossCheck"]["widthPrior"], body["crossCheck"]["seen"]
        assert prior["available"] and prior["road"] == {"id": "osm:way/77", "highway": "residential",
                                                        "name": "Jalan Uji", "distanceM": 0.0}
        assert (prior["ruasWidthM"], prior["directions"], prior["carriagewayM"]) == (3.25, 2, 6.5)
        assert prior["license"] == "ODbL-1.0" and seen["covered"] is True and seen["signageFacts"] == 1
        assert seen["roadWidth"]["value"] == 7.2 and seen["lowestWire"]["clearanceM"] == 6.0
        comps = body["crossCheck"]["comparisons"]
        assert [(x["figure"], x["against"]["name"], x["agree"]) for x in comps] == [
            ("passableWidth", "street-class width prior", False),
            ("passableWidth", "seen layer: measured road width", False),
            ("overheadClearance", "seen layer: lowest wire clearance", True),
            ("signage", "seen layer: signage facts", False)]
        dis = body["disagreements"]
        assert dis == [x for x in comps if not x["agree"]]
        # Both values, as each side gave them; the figure itself is the model's, not a blend.
        assert (dis[0]["fingerprint"]["value"], dis[0]["against"]["value"], dis[0]["differenceM"]) == (3.0, 6.5, -3.5)
        assert (dis[1]["fingerprint"]["value"], dis[1]["against"]["value"]) == (3.0, 7.2)
        assert "of highway=residential (osm:way/77), 0 m away" in dis[0]["against"]["detail"]
        assert body["figures"]["passableWidth"]["value"] == 3.0
        assert body["caveats"][0].startswith(
            "Disagreements (3): passableWidth 3.0 against street-class width prior 6.5")
        # A reading within the tolerances agrees, and nothing is listed.
        c.services.cache.clear()
        model.reply = reply_for(3, passableWidth={"value": 6.4, "confidence": "high", "photos": [0]},
                                signage={"value": ["no parking"], "confidence": "low", "photos": [1]},
                                scaleAnchors=anchor)
        body = (await c.get(URL)).json()
        assert [x["agree"] for x in body["crossCheck"]["comparisons"]] == [True, True]
        assert body["disagreements"] == [] and not any(x.startswith("Disagreements") for x in body["caveats"])
    finally:
        await stop_coordinator(c)


async def test_the_prior_says_why_it_is_missing(sqlite_url, upstream, photos, model, tmp_path):
    c = await start_coordinator(make_settings(sqlite_url, upstream, photos_url=photos.api_url,
                                              sources=vlm_settings(model)))
    try:
        body = (await c.get(URL)).json()
        assert body["crossCheck"]["widthPrior"] == {"available": False, "reason": "no loaded map extract covers "
                                                                                   "this point (sis ingest osm)"}
        assert grid.ANTIMERIDIAN not in body["caveats"]
        # Within 50 m of 180 degrees the photo search and the prior's stop at the meridian, and the answer says so.
        body = (await c.get("/earth/fingerprint?lat=0&lon=179.9999")).json()
        assert grid.ANTIMERIDIAN in body["caveats"]
        write_street(tmp_path / "street.osm.pbf")
        await ingest.run(c.services.db, "osm", tmp_path / "street.osm.pbf")
        c.services.cache.clear()
        body = (await c.get(f"/earth/fingerprint?lat={LAT + 0.001}&lon={LON}")).json()      # 110 m off the street
        assert body["crossCheck"]["widthPrior"]["reason"].startswith("no mapped road within 30 m")
    finally:
        await stop_coordinator(c)


def test_an_image_goes_as_it_came_unless_it_must_be_shrunk_or_is_not_one():
    from PIL import Image
    from coordinator.fingerprint.photos import MAX_SIDE_PX, _as_sent

    def encoded(size, fmt):
        buf = io.BytesIO()
        Image.new("RGB", size, (90, 90, 90)).save(buf, fmt)
        return buf.getvalue()
    small = encoded((640, 480), "PNG")
    assert _as_sent(small) == ("image/png", small)
    media, sent = _as_sent(encoded((4000, 3000), "JPEG"))
    assert media == "image/jpeg" and max(Image.open(io.BytesIO(sent)).size) <= MAX_SIDE_PX
    media, sent = _as_sent(encoded((300, 200), "BMP"))                  # Ollama takes no BMP
    assert media == "image/jpeg" and Image.open(io.BytesIO(sent)).format == "JPEG"
    with pytest.raises(ValueError, match="not a readable image"):
        _as_sent(b"<html>a login page</html>")


async def test_the_mcp_face_serves_the_same_reading(c, model):
    import mcp
    async with mcp.Client(c.base_url + "/legacy/mcp", mode="auto") as client:
        result = await client.call_tool("environmental_fingerprint", {"lat": LAT, "lon": LON})
    assert result.is_error is False
    body = result.structured_content
    assert body["status"] == "read" and body["figures"]["passableWidth"]["value"] == 5.5
    assert (await c.get(f"/legacy/fingerprint?lat={LAT}&lon={LON}")).json() == body       # cached, the same
    assert len(model.requests) == 1


def test_the_envelopes_of_other_servers_parse_and_their_errors_are_read():
    from coordinator.fingerprint.vlm import error_message, parse_completion
    schema = reading.answer_schema(3)
    ollama = {"id": "chatcmpl-631", "object": "chat.completion", "created": 1764000000, "model": "qwen2.5vl:7b",
              "system_fingerprint": "fp_ollama",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": json.dumps(sample_content())},
                           "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 0, "completion_tokens": 298, "total_tokens": 298}}
    content, name, usage = parse_completion(ollama, schema)
    assert content == sample_content() and name == "qwen2.5vl:7b" and usage["prompt_tokens"] == 0
    assert error_message(b'{"object":"error","message":"The model `x` does not exist.","type":"NotFoundError",'
                         b'"param":null,"code":404}') == "The model `x` does not exist."
    assert error_message(b'{"error":{"message":"invalid image input","type":"invalid_request_error"}}') == \
        "invalid image input"
    assert error_message(b"<html>502 Bad Gateway</html>") == "<html>502 Bad Gateway</html>"


@pytest.mark.parametrize("option, value, said", [
    ("images", "base64", "SIS_SOURCES__VLM__IMAGES must be one of"),
    ("max_photos", "0", "SIS_SOURCES__VLM__MAX_PHOTOS must be a whole"),
    ("max_tokens", "lots", "SIS_SOURCES__VLM__MAX_TOKENS must be a whole")])
def test_a_wrong_model_option_stops_start_up_with_one_line(option, value, said):
    from coordinator.core.settings import Settings
    from coordinator.sources import build_sources
    from coordinator.sources.registry import SourceSettingsError
    with pytest.raises(SourceSettingsError, match=said):
        build_sources(Settings(sources={"vlm": {"base_url": "http://127.0.0.1:9/v1", option: value}}))


def test_comparisons_keep_to_their_tolerances_and_never_blend():
    from coordinator.fingerprint.crosscheck import comparisons

    def fig(value, confidence="low"):
        return {"value": value, "confidence": confidence, "source": {"photos": ["p"], "model": "m"}}
    figures = {k: fig(None, "unknown") for k in reading.KEYS}
    prior = {"available": True, "ruasWidthM": 5.5, "directions": 2, "directionsAssumed": False, "carriagewayM": 11.0,
             "license": "ODbL-1.0", "road": {"id": "osm:way/1", "highway": "primary", "distanceM": 3.0}}
    seen = {"roadWidth": {"value": 10.0, "spreadM": 0.8, "confidence": "high", "basis": "measured", "photos": 2},
            "lowestWire": {"clearanceM": 5.0, "confidence": "high", "basis": "measured", "photos": ["s"],
                           "distanceM": 12.0}, "signageFacts": 0}
    for width, agree in ((7.7, True), (7.69, False), (14.3, True), (14.31, False)):    # prior tolerance 3.3 m
        got = comparisons({**figures, "passableWidth": fig(width)}, prior, seen)[0]
        assert got["agree"] is agree and got["toleranceM"] == 3.3 and got["against"]["value"] == 11.0
        assert got["fingerprint"]["value"] == width
    got = comparisons({**figures, "passableWidth": fig(8.3)}, prior, seen)[1]          # seen: max(1, 1.6, 2.0)
    assert (got["toleranceM"], got["agree"]) == (2.0, True)
    got = comparisons({**figures, "overheadClearance": fig("nothing overhead")}, prior, seen)
    assert [(x["figure"], x["agree"], x["against"]["value"]) for x in got] == [("overheadClearance", False, 5.0)]
    assert comparisons({**figures, "passableWidth": fig(None, "unknown")}, prior, seen) == []
    assert comparisons(figures, {"available": False, "reason": "x"}, {"roadWidth": None, "lowestWire": None}) == []


def test_photo_times_are_served_in_utc_with_a_z_whatever_offset_the_provider_gave():
    """The provider's own offset was passed on (``…+07:00``), where the seen layer serves the same
    photo's time as ``…Z``; the newest is still chosen as a time, not as text."""
    from sweep_engine.schema import PhotoRef

    from coordinator.fingerprint.photos import Nearby

    def near(pid: str, when: str) -> Nearby:
        return Nearby(PhotoRef(id=pid, lon=107.6, lat=-6.9, captured_at=when, width=2048, height=1536,
                               url=f"https://photos.example/{pid}.jpg", license="CC-BY-SA-4.0",
                               provider="panoramax"), 10.0)

    photos = [near("a", "2026-06-01T15:00:00+07:00"), near("b", "2026-06-01T07:30:00+00:00")]
    assert reading.newest(photos) == "2026-06-01T08:00:00Z"          # 15:00+07:00 is 08:00Z: a is newer
    assert [p.reference()["capturedAt"] for p in photos] == ["2026-06-01T08:00:00Z", "2026-06-01T07:30:00Z"]
