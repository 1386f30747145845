"""The review page in a real browser (Debian's chromium driven by Playwright): it loads,
pending jobs are drawn on the map over a base map (tiles from a fake tile server on loopback),
the engine's evidence is drawn over the provider's photos where it measured, a fact selected
in the table, on the map or on a photo is highlighted in all three, a keypress approves or
rejects, the database changes. Screenshots are kept under test-artifacts/ (git-ignored)."""
from __future__ import annotations

import io
import os
import re
import shutil
from pathlib import Path
from typing import AsyncIterator
from urllib.parse import urlparse

import pytest
import tornado.web
from sqlalchemy import func, select

from coordinator.core.db.models import SeenFact, SweepJob, SweepTransition
from coordinator.demo.upstream import LoopbackServer
from coordinator.review import keys
from tests.support import Coordinator, stop_coordinator
from tests.test_review_kit import engine_result, photo_in_every_cell, sweep_to_review
from tests.test_sweeps_kit import photos, start  # noqa: F401

CHROMIUM = os.environ.get("SIS_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists(),
                                reason=f"no chromium at {CHROMIUM} (apt-get install chromium)")


def tile_png(z: int, x: int, y: int) -> bytes:
    """A 256 x 256 PNG map tile, as a tile server sends one: pale ground and a grid of grey streets."""
    from PIL import Image, ImageDraw
    img = Image.new("RGB", (256, 256), (242, 239, 233))
    d = ImageDraw.Draw(img)
    for k in range(0, 256, 64):
        d.rectangle([k + (x % 3) * 8, 0, k + (x % 3) * 8 + 6, 255], fill=(200, 200, 205))
        d.rectangle([0, k + (y % 3) * 8, 255, k + (y % 3) * 8 + 6], fill=(200, 200, 205))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


class FakeTiles(LoopbackServer):
    """A tile server on loopback, in the form of OpenStreetMap's (``/{z}/{x}/{y}.png``), counting requests."""

    def __init__(self) -> None:
        self.requests: list[str] = []

    @property
    def template(self) -> str:
        return f"http://127.0.0.1:{self.port}/tiles/{{z}}/{{x}}/{{y}}.png"

    def app(self) -> tornado.web.Application:
        fake = self

        class Tile(tornado.web.RequestHandler):
            def get(self, z: str, x: str, y: str) -> None:
                fake.requests.append(self.request.path)
                self.set_header("Content-Type", "image/png")
                self.finish(tile_png(int(z), int(x), int(y)))

        return tornado.web.Application([(r"/tiles/([0-9]+)/([0-9]+)/([0-9]+)\.png", Tile)])


@pytest.fixture
async def tiles() -> AsyncIterator[FakeTiles]:
    fake = await FakeTiles().start()
    yield fake
    await fake.stop()


@pytest.fixture
async def review_page(sqlite_url, photos, tiles) -> AsyncIterator[Coordinator]:
    """A coordinator whose jobs hold at most 3 photos, its base map the fake tile server."""
    c = await start(sqlite_url, photos, job_max_photos=3, review_tiles_url=tiles.template,
                    review_tiles_attribution="Test tiles © nobody", review_tiles_attribution_url="")
    yield c
    await stop_coordinator(c)


async def job_states(c) -> dict[int, str]:
    async with c.services.db.read() as s:
        return {j.id: j.state for j in (await s.execute(select(SweepJob))).scalars()}


async def photos_loaded(page) -> None:
    """Wait for every thumbnail to load (awaiting their load events: the page's CSP forbids
    the eval that polling predicates use) and check that each one did."""
    widths = await page.locator("#photos img").evaluate_all(
        "imgs => Promise.all(imgs.map(i => i.complete ? i.naturalWidth : new Promise(done => {"
        " i.addEventListener('load', () => done(i.naturalWidth)); i.addEventListener('error', () => done(0)); })))")
    assert widths and all(w > 0 for w in widths)


async def test_the_review_page_approves_and_rejects_by_keyboard(review_page, photos, tiles):
    from playwright.async_api import async_playwright, expect

    c = review_page
    photo_in_every_cell(photos)
    await sweep_to_review(c, photos)
    before = await job_states(c)
    assert len(before) >= 3 and set(before.values()) == {"in_review"}
    _, token = await keys.create(c.services.db, "Page Tester")

    hosts: set[str] = set()
    images: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))

            def seen(req) -> None:
                hosts.add(urlparse(req.url).netloc)
                if req.resource_type == "image" and "/api/pictures/" in req.url:
                    images.append(req.url)
            page.on("request", seen)

            await page.goto(f"{c.base_url}/review/#key={token}")
            await page.wait_for_selector("body[data-ready='1']", timeout=15000)
            assert "reviewer: Page Tester" in await page.inner_text("#who")
            await expect(page.locator("#pending li")).to_have_count(len(before), timeout=10000)
            # streets under the facts: the base map's tiles, from the configured tile server
            await page.wait_for_selector("body[data-basemap='loaded']", timeout=10000)
            assert await page.locator(".leaflet-tile-loaded").count() > 0 and tiles.requests
            assert "Test tiles © nobody" in await page.inner_text(".leaflet-control-attribution")
            # every pending job's area, and the selected job's facts, are drawn on the map
            assert await page.locator(".leaflet-overlay-pane path").count() >= len(before)
            facts = int(await page.get_attribute("body", "data-facts"))
            assert facts > 0 and await page.locator("path.fact").count() == facts
            await photos_loaded(page)
            assert images and all(u.startswith(photos.api_url) for u in images)    # straight from the provider
            assert not any(u.startswith(c.base_url) for u in images)

            first = int(await page.get_attribute("body", "data-selected"))
            await page.keyboard.press("a")
            await page.wait_for_selector(f"body[data-last-verdict='{first}:approved']", timeout=10000)
            await photos_loaded(page)
            ARTIFACTS.mkdir(exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / "review-page.png"), full_page=True)

            second = int(await page.get_attribute("body", "data-selected"))
            assert second != first
            await page.keyboard.press("r")
            assert await page.evaluate("document.activeElement.id") == "reason"
            await page.keyboard.type("blurred photos, widths not credible")
            await page.keyboard.press("Enter")
            await page.wait_for_selector(f"body[data-last-verdict='{second}:rejected']", timeout=10000)
            # The list re-renders after the verdict: wait for it rather than reading it at once.
            await expect(page.locator("#pending li")).to_have_count(len(before) - 2, timeout=10000)
            assert errors == []
        finally:
            await browser.close()

    after = await job_states(c)
    assert after[first] == "approved" and after[second] == "rejected"
    # The rejected job's ground is queued again as a new job (docs/review.md), the rest still wait.
    reissued = [j for j in after if j not in before]
    assert len(reissued) == 1 and after[reissued[0]] == "queued"
    assert [s for j, s in after.items() if j not in (first, second, *reissued)] == ["in_review"] * (len(before) - 2)
    async with c.services.db.read() as s:
        live = (await s.execute(select(func.count()).select_from(SeenFact).where(SeenFact.job_id == first))).scalar_one()
        why = (await s.execute(select(SweepTransition.reason).where(
            SweepTransition.subject == "job", SweepTransition.subject_id == str(second),
            SweepTransition.to_state == "rejected"))).scalar_one()
    assert live > 0 and why == "blurred photos, widths not credible"
    # no CDN, no tile server but the configured one
    assert hosts <= {urlparse(c.base_url).netloc, urlparse(photos.api_url).netloc, f"127.0.0.1:{tiles.port}"}
    assert (ARTIFACTS / "review-page.png").stat().st_size > 10_000


async def open_page(pw, c: Coordinator, token: str, hosts: set[str], errors: list[str]):
    browser = await pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
    page = await browser.new_page(viewport={"width": 1400, "height": 1000})
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda req: hosts.add(urlparse(req.url).netloc))
    await page.goto(f"{c.base_url}/review/#key={token}")
    await page.wait_for_selector("body[data-ready='1']", timeout=15000)
    return browser, page


async def rect(locator) -> tuple[float, float, float, float]:
    b = await locator.bounding_box()
    return b["x"], b["y"], b["x"] + b["width"], b["y"] + b["height"]


async def test_the_engines_evidence_is_drawn_over_its_photos_and_a_fact_is_highlighted_everywhere(
        review_page, photos, tiles):
    from playwright.async_api import async_playwright, expect

    c = review_page
    photo_in_every_cell(photos)
    await sweep_to_review(c, photos, first_job=engine_result)     # the first job measured by the engine
    _, token = await keys.create(c.services.db, "Evidence Tester")
    first = (await c.get("/review/v1/pending", headers={"X-Api-Key": token})).json()["pending"][0]
    job = (await c.get(f"/review/v1/jobs/{first['jobId']}", headers={"X-Api-Key": token})).json()
    boxes = sum(1 for m in job["measurements"] for o in m["objects"] if o.get("box"))
    rows = sum(len((m["roadWidth"] or {}).get("rows") or []) for m in job["measurements"])
    assert boxes >= 3 and rows >= 10
    hosts: set[str] = set()
    errors: list[str] = []
    async with async_playwright() as pw:
        browser, page = await open_page(pw, c, token, hosts, errors)
        try:
            assert int(await page.get_attribute("body", "data-selected")) == first["jobId"]
            await photos_loaded(page)
            # every box and every road row the engine sent is drawn, over the photo it came from
            await expect(page.locator("svg.evidence rect.box")).to_have_count(boxes)
            await expect(page.locator("svg.evidence line.road-row")).to_have_count(rows)
            assert await page.locator("svg.evidence polyline.road-edge").count() == 2 * sum(
                1 for m in job["measurements"] if (m["roadWidth"] or {}).get("rows"))
            # ... in the photo's own pixels: a box sits where its pixels are on the image as shown
            m = next(m for m in job["measurements"] if any(o.get("box") for o in m["objects"]))
            ref = next(p for p in job["photos"] if p["id"] == m["photoId"])
            j, o = next((j, o) for j, o in enumerate(m["objects"]) if o.get("box"))
            fig = page.locator(f"#photos figure[data-photo='{m['photoId']}']")
            ix0, iy0, ix1, iy1 = await rect(fig.locator("img"))
            bx0, by0, bx1, by1 = await rect(fig.locator(f"g.ev-obj[data-object='{j}'] rect.box"))
            sx, sy = (ix1 - ix0) / ref["width"], (iy1 - iy0) / ref["height"]
            u0, v0, u1, v1 = o["box"]
            assert abs(bx0 - (ix0 + u0 * sx)) < 2.5 and abs(bx1 - (ix0 + u1 * sx)) < 2.5
            assert abs(by0 - (iy0 + v0 * sy)) < 2.5 and abs(by1 - (iy0 + v1 * sy)) < 2.5
            scale = [o for mm in job["measurements"] for o in mm["objects"] if o.get("usedForScale")]
            assert await page.locator("svg.evidence rect.box.scale").count() == len(scale)
            ARTIFACTS.mkdir(exist_ok=True)
            await fig.locator(".shot").click(position={"x": 3, "y": 3})        # a click on the photo enlarges it
            await expect(fig).to_have_class(re.compile(r"\blarge\b"))
            await fig.screenshot(path=str(ARTIFACTS / "review-evidence-photo.png"))
            await fig.locator(".shot").click(position={"x": 3, "y": 3})

            # a roadway fact selected in the table: its rows on its photos, its marker on the map
            facts = job["facts"]
            road = next(i for i, f in enumerate(facts) if f["kind"] == "roadway")
            await page.click(f"#facts tr[data-fact='{road}']")
            await page.wait_for_selector(f"body[data-fact='{road}']")
            assert await page.locator("#facts tr.hl").count() == 1
            with_rows = [p for p in facts[road]["source"]
                         if ((next(mm for mm in job["measurements"] if mm["photoId"] == p)["roadWidth"] or {})
                             .get("rows"))]
            assert with_rows and await page.locator("svg.evidence g.ev-road.hl").count() == len(with_rows)
            assert await page.locator("#photos figure.hl").count() == len(facts[road]["source"])
            assert await page.locator("path.fact.hl").count() == 1
            shown = page.locator(f"#photos figure[data-photo='{with_rows[0]}']")
            await shown.locator(".shot").click(position={"x": 3, "y": 3})     # enlarged
            await page.screenshot(path=str(ARTIFACTS / "review-evidence.png"), full_page=True)
            await shown.screenshot(path=str(ARTIFACTS / "review-evidence-selected.png"))
            await shown.locator(".shot").click(position={"x": 3, "y": 3})

            # the other way round: an object's box on a photo selects the fact it rests on ...
            linked = page.locator("svg.evidence g.ev-obj[data-fact]")
            assert await linked.count() > 0
            k = int(await linked.first.get_attribute("data-fact"))
            await linked.first.locator("rect.box").click(force=True)
            await page.wait_for_selector(f"body[data-fact='{k}']")
            assert facts[k]["kind"] in ("poles", "signage", "gates", "entrances", "drainage")
            assert await page.locator(f"#facts tr.hl[data-fact='{k}']").count() == 1
            assert int(await page.get_attribute("body", "data-fact-marks")) >= 1
            # ... and so does its marker on the map; Escape clears the selection
            await page.locator(f"path.fact-n{road}").dispatch_event("click")
            await page.wait_for_selector(f"body[data-fact='{road}']")
            assert await page.locator(f"#facts tr.hl[data-fact='{road}']").count() == 1
            await page.keyboard.press("Escape")
            assert await page.locator("#facts tr.hl, svg.evidence g.hl, path.fact.hl").count() == 0
            # keyboard verdicts still work on the page with its evidence
            await page.keyboard.press("a")
            await page.wait_for_selector(f"body[data-last-verdict='{first['jobId']}:approved']", timeout=10000)
            assert errors == []
        finally:
            await browser.close()
    assert hosts <= {urlparse(c.base_url).netloc, urlparse(photos.api_url).netloc, f"127.0.0.1:{tiles.port}"}
    assert (ARTIFACTS / "review-evidence.png").stat().st_size > 10_000
    assert (ARTIFACTS / "review-evidence-photo.png").stat().st_size > 10_000
    assert (ARTIFACTS / "review-evidence-selected.png").stat().st_size > 10_000


async def test_without_a_tile_template_the_page_has_no_base_map_and_says_so(sqlite_url, photos):
    from playwright.async_api import async_playwright

    c = await start(sqlite_url, photos, job_max_photos=3, review_tiles_url="")
    try:
        photo_in_every_cell(photos)
        await sweep_to_review(c, photos)
        _, token = await keys.create(c.services.db, "No Tiles")
        assert (await c.get("/review/v1/me", headers={"X-Api-Key": token})).json()["baseMap"] is None
        hosts: set[str] = set()
        errors: list[str] = []
        async with async_playwright() as pw:
            browser, page = await open_page(pw, c, token, hosts, errors)
            try:
                assert await page.get_attribute("body", "data-basemap") == "none"
                assert re.search(r"No base map: .*SIS_REVIEW_TILES_URL is empty", await page.inner_text("#basemap"))
                assert "no base map" in await page.inner_text(".leaflet-control-attribution")
                assert await page.locator(".leaflet-tile").count() == 0
                assert errors == []
            finally:
                await browser.close()
        assert hosts <= {urlparse(c.base_url).netloc, urlparse(photos.api_url).netloc}
    finally:
        await stop_coordinator(c)
