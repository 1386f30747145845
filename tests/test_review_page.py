"""The review page in a real browser (Debian's chromium driven by Playwright): it loads,
pending jobs are drawn on the map over a base map (tiles from a fake tile server on loopback),
the engine's evidence is drawn over the provider's photos where it measured, a fact selected
in the table, on the map or on a photo is highlighted in all three, a keypress approves or
rejects, the database changes. Screenshots are kept under test-artifacts/ (git-ignored)."""
from __future__ import annotations

import asyncio
import contextlib
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
        browser = await launch(pw)
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
    browser = await launch(pw)
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


# ---- What the page says when something fails, what a verdict did, and who acts on what ----------------

ERROR_JSON = '{"error": {"code": "internal_error", "message": "internal error (test)"}}'
HTML_502 = "<html><body><h1>502 Bad Gateway</h1></body></html>"


async def refuse(route) -> None:
    """A route handler: the connection refused, as by a coordinator that is down."""
    await route.abort("connectionrefused")


def slowed(seconds: float):
    """A route handler answering after ``seconds``, as a slow coordinator does."""
    async def slow(route) -> None:
        await asyncio.sleep(seconds)
        await route.continue_()
    return slow


async def launch(pw):
    # Assertions on the page wait up to 15 s, not Playwright's 5: on a machine busy with the rest of the
    # suite a failed fetch took longer than 5 s to be said (a CI run's only failure here).
    from playwright.async_api import expect
    expect.set_options(timeout=15_000)
    return await pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)


async def fresh_page(browser, errors: list[str], width: int = 1400, height: int = 1000):
    """A page in a context of its own (its own sessionStorage), page errors collected."""
    ctx = await browser.new_context(viewport={"width": width, "height": height})
    page = await ctx.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    return page


class Dialogs(list):
    """The messages of the dialogs the page opened (the sweep approval's confirmation), as asked; each
    accepted (OK) or dismissed (Cancel) as ``accept`` says at the time."""

    def __init__(self, page, accept: bool) -> None:
        super().__init__()
        self.accept = accept
        page.on("dialog", self.answer)

    async def answer(self, dialog) -> None:
        self.append(dialog.message)
        await (dialog.accept() if self.accept else dialog.dismiss())


def accept_dialogs(page) -> Dialogs:
    return Dialogs(page, accept=True)


def verdict_posts(page) -> list[str]:
    """The verdicts the page sends, as they are sent."""
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if r.method == "POST" else None)
    return sent


@pytest.fixture
async def in_review(review_page, photos) -> AsyncIterator[tuple[Coordinator, str, list[dict]]]:
    """The coordinator with a sweep's jobs waiting in review, a reviewer's key, the pending list."""
    c = review_page
    photo_in_every_cell(photos)
    await sweep_to_review(c, photos)
    _, token = await keys.create(c.services.db, "Failure Tester")
    pending = (await c.get("/review/v1/pending", headers={"X-Api-Key": token})).json()["pending"]
    assert len(pending) >= 3
    yield c, token, pending


@contextlib.asynccontextmanager
async def review_opened(in_review, width: int = 1400, height: int = 1000):
    """The page opened on ``in_review``'s jobs, the first one shown: the page, the verdicts it posts,
    and the console errors it logs."""
    from playwright.async_api import async_playwright

    c, token, pending = in_review
    errors: list[str] = []
    async with async_playwright() as pw:
        browser = await launch(pw)
        try:
            page = await fresh_page(browser, errors, width, height)
            sent = verdict_posts(page)
            await page.goto(f"{c.base_url}/review/#key={token}")
            await page.wait_for_selector(f"body[data-ready='1'][data-selected='{pending[0]['jobId']}']", timeout=15000)
            yield page, sent, errors
        finally:
            await browser.close()


async def test_failures_while_loading_are_said_where_they_can_be_seen(in_review):
    """A failed /me, /pending or first /jobs/N, and a filter the API refuses, each say what failed in
    the message line, which is visible with no job shown; a slow one says it is loading."""
    from playwright.async_api import async_playwright, expect

    c, token, pending = in_review
    url = f"{c.base_url}/review/#key={token}"
    errors: list[str] = []

    async def fail_json(route):
        await route.fulfill(status=500, content_type="application/json", body=ERROR_JSON)

    async def fail_html(route):
        await route.fulfill(status=502, content_type="text/html", body=HTML_502)

    slow = slowed(2.5)

    async with async_playwright() as pw:
        browser = await launch(pw)
        try:
            for handler, words in ((fail_json, "internal error (test) [HTTP 500]"),
                                   (refuse, "the coordinator did not answer"),
                                   (fail_html, "HTTP 502")):
                page = await fresh_page(browser, errors)
                await page.route("**/review/v1/pending*", handler)
                await page.goto(url)
                await page.wait_for_selector("body[data-ready='failed']", timeout=10000)
                status = page.locator("#status")
                await expect(status).to_be_visible()
                await expect(status).to_contain_text("could not load the pending list: " + words)
                await expect(status).to_have_class("error")
                assert await page.locator("#detail").is_hidden()
                assert "reviewer: Failure Tester" in await page.inner_text("#who")
                await page.context.close()

            # /me failing for a reason other than the key is not "key refused"
            page = await fresh_page(browser, errors)
            await page.route("**/review/v1/me", fail_html)
            await page.goto(url)
            await page.wait_for_selector("body[data-ready='failed']", timeout=10000)
            who = await page.inner_text("#who")
            assert who.startswith("could not check the key: HTTP 502") and "refused" not in who
            await page.context.close()
            page = await fresh_page(browser, errors)
            await page.goto(f"{c.base_url}/review/#key=sisk_not_a_key")
            await page.wait_for_selector("body[data-ready='failed']", timeout=10000)
            assert (await page.inner_text("#who")).startswith("key refused: ")
            await page.context.close()

            # slow answers: the header says the key is being checked, the list says it is loading
            page = await fresh_page(browser, errors)
            await page.route("**/review/v1/me", slow)
            await page.route("**/review/v1/pending*", slow)
            await page.goto(url)
            await expect(page.locator("#who")).to_have_text("checking the key…")
            await expect(page.locator("#loading")).to_have_text("loading the pending list…", timeout=5000)
            await page.wait_for_selector("body[data-ready='1']", timeout=15000)
            assert await page.inner_text("#loading") == ""

            # filters: an unknown sweep lists nothing and says so; a bad bbox is the API's 400, said
            await page.unroute("**/review/v1/pending*")
            await page.fill("#f-sweep", "sr_nosuchsweep")
            await page.press("#f-sweep", "Enter")
            await expect(page.locator("#empty")).to_have_text(
                "No job waits for review of sweep sr_nosuchsweep (or there is no such sweep).")
            await expect(page.locator("#pending li")).to_have_count(0)
            await page.fill("#f-sweep", "")
            await page.fill("#f-bbox", "1,2,3")
            await page.press("#f-bbox", "Enter")
            await expect(page.locator("#status")).to_contain_text("filter refused: ")
            await expect(page.locator("#status")).to_contain_text("[HTTP 400]")
            await expect(page.locator("#status")).to_be_visible()
            await page.context.close()

            # the first job failing to load: said, and no job is shown for a key to act on
            page = await fresh_page(browser, errors)
            sent = verdict_posts(page)
            await page.route(f"**/review/v1/jobs/{pending[0]['jobId']}", fail_html)
            await page.goto(url)
            await expect(page.locator("#status")).to_contain_text(f"could not load {pending[0]['wireId']}: HTTP 502")
            await expect(page.locator("#status")).to_be_visible()
            assert await page.locator("#detail").is_hidden()
            await page.keyboard.press("a")
            await expect(page.locator("#status")).to_contain_text("no job is shown")
            assert sent == []
            await page.context.close()
            assert errors == []
        finally:
            await browser.close()
    assert set((await job_states(c)).values()) == {"in_review"}


async def test_a_rejection_says_the_ground_is_reissued_and_a_sweep_approval_what_is_not_in_review(in_review):
    """r + reason + Enter: the message names the reissued job and the nodes it is closed to. s, confirmed: the
    sweep's jobs approved, with the others counted by state (notInReview); the list is then empty, and
    the message stays in view."""
    from playwright.async_api import async_playwright, expect

    c, token, pending = in_review
    errors: list[str] = []
    async with async_playwright() as pw:
        browser = await launch(pw)
        try:
            page = await fresh_page(browser, errors)
            await page.goto(f"{c.base_url}/review/#key={token}")
            await page.wait_for_selector("body[data-ready='1']", timeout=15000)
            first = pending[0]
            await page.keyboard.press("r")
            await page.keyboard.type("widths not credible")
            await page.keyboard.press("Enter")
            await page.wait_for_selector(f"body[data-last-verdict='{first['jobId']}:rejected']", timeout=10000)
            status = page.locator("#status")
            text = await status.inner_text()
            assert re.match(rf"{first['wireId']} rejected; its ground is reissued as job-\d+ \(reissue 1 of 2\), "
                            r"not offered to \S+", text), text
            await page.wait_for_selector(f"body[data-selected='{pending[1]['jobId']}']", timeout=10000)

            asked = accept_dialogs(page)
            await page.keyboard.press("s")
            await page.wait_for_selector("body[data-last-sweep]", timeout=15000)
            assert len(asked) == 1 and first["sweepId"] in asked[0]
            await expect(page.locator("#pending li")).to_have_count(0)
            n = len(pending) - 1
            await expect(status).to_contain_text(
                f"sweep {first['sweepId']}: {n} approved (", timeout=10000)
            await expect(status).to_contain_text("0 left for a look; not in review: 1 queued, 1 rejected")
            await expect(status).to_be_visible()
            assert "error" not in (await status.get_attribute("class") or "")
            assert await page.locator("#detail").is_hidden()
            await expect(page.locator("#empty")).to_have_text("No job waits for review.")
            assert errors == []
        finally:
            await browser.close()
    after = await job_states(c)
    assert sorted(after.values()) == sorted(["rejected", "queued"] + ["approved"] * (len(pending) - 1))


@pytest.fixture
async def parking_review(sqlite_url, photos, tiles) -> AsyncIterator[tuple[Coordinator, str, list[dict]]]:
    """As in_review, but a rejection parks the ground at once (SIS_REISSUE_MAX = 0)."""
    c = await start(sqlite_url, photos, job_max_photos=3, review_tiles_url=tiles.template, reissue_max=0)
    try:
        photo_in_every_cell(photos)
        await sweep_to_review(c, photos)
        _, token = await keys.create(c.services.db, "Parking Tester")
        pending = (await c.get("/review/v1/pending", headers={"X-Api-Key": token})).json()["pending"]
        assert len(pending) >= 3
        yield c, token, pending
    finally:
        await stop_coordinator(c)


async def transition_reason(c, job_id: int, to_state: str) -> str:
    async with c.services.db.read() as s:
        return (await s.execute(select(SweepTransition.reason).where(
            SweepTransition.subject == "job", SweepTransition.subject_id == str(job_id),
            SweepTransition.to_state == to_state))).scalar_one()


async def test_enter_in_the_reason_field_never_rejects_by_surprise_and_a_parked_rejection_says_so(parking_review):
    """A note typed and Enter sends nothing until the reviewer chooses; Approve sends it as the note.
    A rejection past the reissue limit says the ground is parked. Approving the last job leaves its
    confirmation in view. A double press sends one verdict."""
    from playwright.async_api import async_playwright, expect

    c, token, pending = parking_review
    errors: list[str] = []
    async with async_playwright() as pw:
        browser = await launch(pw)
        try:
            page = await fresh_page(browser, errors)
            sent = verdict_posts(page)
            await page.goto(f"{c.base_url}/review/#key={token}")
            await page.wait_for_selector("body[data-ready='1']", timeout=15000)
            first, second = pending[0], pending[1]
            await page.click("#reason")
            await page.keyboard.type("checked against the photos")
            await page.keyboard.press("Enter")
            await expect(page.locator("#status")).to_contain_text("Enter does nothing until you choose")
            await page.wait_for_timeout(500)
            assert sent == [] and (await job_states(c))[first["jobId"]] == "in_review"
            await page.click("#approve")
            await page.wait_for_selector(f"body[data-last-verdict='{first['jobId']}:approved']", timeout=10000)
            assert await transition_reason(c, first["jobId"], "approved") == "checked against the photos"
            assert len(sent) == 1

            await page.wait_for_selector(f"body[data-selected='{second['jobId']}']", timeout=10000)
            await page.keyboard.press("r")
            assert await page.evaluate("document.activeElement.id") == "reason"
            await expect(page.locator("#mode")).to_contain_text(f"Enter rejects {second['wireId']}")
            await page.keyboard.type("a private yard")
            await page.keyboard.press("Enter")
            await page.wait_for_selector(f"body[data-last-verdict='{second['jobId']}:rejected']", timeout=10000)
            text = await page.inner_text("#status")
            assert re.match(rf"{second['wireId']} rejected; its ground is parked \(\d+ cells\), not swept again: "
                            r"rejected 1 times, past the reissue limit .*last reason: a private yard$", text), text

            # the rest approved one by one, a double press each time: one POST per job
            for job in pending[2:]:
                await page.wait_for_selector(f"body[data-selected='{job['jobId']}']", timeout=10000)
                before = len(sent)
                await page.keyboard.press("a")
                await page.keyboard.press("a")
                await page.wait_for_selector(f"body[data-last-verdict='{job['jobId']}:approved']", timeout=10000)
                assert len(sent) == before + 1, sent[before:]
            await expect(page.locator("#pending li")).to_have_count(0)
            await page.wait_for_timeout(300)
            last = pending[-1]
            status = page.locator("#status")
            await expect(status).to_be_visible()
            text = await status.inner_text()
            assert re.match(rf"{last['wireId']} approved · \d+ facts live", text), text
            assert await page.locator("#detail").is_hidden()
            assert errors == []
        finally:
            await browser.close()
    after = await job_states(c)
    assert after[second["jobId"]] == "rejected" and len(after) == len(pending)      # parked: nothing reissued


async def test_a_verdict_acts_on_the_job_shown_never_on_one_only_highlighted(in_review):
    """A job that fails to load is said, and no job is left for a verdict; a slow answer overtaken by a
    later selection is dropped; while a job loads, a verdict waits."""
    from playwright.async_api import async_playwright, expect

    c, token, pending = in_review
    a, b, third = pending[0], pending[1], pending[2]
    errors: list[str] = []

    slow = slowed(2)

    async with async_playwright() as pw:
        browser = await launch(pw)
        try:
            page = await fresh_page(browser, errors)
            sent = verdict_posts(page)
            await page.goto(f"{c.base_url}/review/#key={token}")
            await page.wait_for_selector(f"body[data-ready='1'][data-selected='{a['jobId']}']", timeout=15000)

            await page.route(f"**/review/v1/jobs/{b['jobId']}", refuse)
            await page.keyboard.press("j")
            await expect(page.locator("#status")).to_contain_text(f"could not load {b['wireId']}: the coordinator did not answer")
            assert await page.locator("#detail").is_hidden()
            assert await page.locator("#pending li.selected").count() == 0
            await page.keyboard.press("a")
            await expect(page.locator("#status")).to_contain_text("no job is shown")
            assert sent == []

            # b slow, then c asked for: c is shown, b's late answer dropped; a verdict while b loads waits
            await page.unroute(f"**/review/v1/jobs/{b['jobId']}")
            await page.route(f"**/review/v1/jobs/{b['jobId']}", slow)
            await page.locator("#pending li").nth(1).click()
            await expect(page.locator("#pending li").nth(1)).to_have_class(re.compile(r"\bloading\b"))
            await page.keyboard.press("a")
            await expect(page.locator("#status")).to_contain_text("wait: the job selected is still loading")
            await page.keyboard.press("j")
            await page.wait_for_selector(f"body[data-selected='{third['jobId']}']", timeout=10000)
            await page.wait_for_timeout(2500)                               # b's answer has come, late
            assert await page.get_attribute("body", "data-selected") == str(third["jobId"])
            assert third["wireId"] in await page.inner_text("#d-title")
            assert (await page.locator("#pending li.selected").get_attribute("data-job-id")) == str(third["jobId"])
            assert sent == []
            await page.keyboard.press("a")
            await page.wait_for_selector(f"body[data-last-verdict='{third['jobId']}:approved']", timeout=10000)
            assert len(sent) == 1 and sent[0].endswith(f"/jobs/{third['jobId']}/approve")
            assert errors == []
        finally:
            await browser.close()
    after = await job_states(c)
    assert after[third["jobId"]] == "approved" and after[a["jobId"]] == after[b["jobId"]] == "in_review"


async def test_unknown_values_units_and_a_photo_that_does_not_load(in_review, photos):
    """An unknown quantity says "unknown"; objects and agreement carry their unit; a photo its provider
    does not give is said so in its caption; every word from upstream stays text."""
    import json

    from playwright.async_api import async_playwright, expect

    c, token, pending = in_review
    evil = '<img src=x onerror="document.body.dataset.pwned=1">'
    errors: list[str] = []

    async def altered(route):
        r = await route.fetch()
        d = await r.json()
        d["facts"][0]["value"] = {"heightM": None, "widthM": 0.4}
        d["facts"][0]["unit"] = "m"
        d["facts"][1]["value"] = None
        d["facts"][1]["basis"] = evil
        for rep in d["replicas"]:
            if rep.get("agreement"):
                rep["agreement"]["maxValueDiff"] = 0.25
        d["replicas"][0]["nodeId"] = evil
        d["photos"][0]["license"] = evil
        await route.fulfill(response=r, body=json.dumps(d))

    async def gone(route):
        await route.fulfill(status=404, content_type="text/plain", body="gone")

    async with async_playwright() as pw:
        browser = await launch(pw)
        try:
            page = await fresh_page(browser, errors)
            await page.route(f"**/review/v1/jobs/{pending[0]['jobId']}", altered)
            await page.route("**/api/pictures/**", gone)
            await page.goto(f"{c.base_url}/review/#key={token}")
            await page.wait_for_selector("body[data-ready='1']", timeout=15000)
            facts = page.locator("#facts tr.fact-row")
            assert await facts.nth(0).locator("td").nth(1).inner_text() == "heightM unknown, widthM 0.4 m"
            assert await facts.nth(1).locator("td").nth(1).inner_text() == "unknown"
            assert "null" not in await page.inner_text("#facts")
            assert evil in await page.inner_text("#facts") and evil in await page.inner_text("#replicas")
            assert "max Δ 0.25 m" in await page.inner_text("#replicas")
            objects = await page.inner_text("#measurements")
            assert re.search(r"pole [0-9.]+ m away, h [0-9.]+ m or more", objects), objects
            await expect(page.locator("#photos .photo-error")).to_have_count(await page.locator("#photos figure").count())
            assert "the photo could not be loaded from its provider" in await page.locator("#photos figcaption").first.inner_text()
            assert await page.get_attribute("body", "data-pwned") is None
            assert await page.locator("img[src='x']").count() == 0
            assert errors == []
        finally:
            await browser.close()


async def test_the_keyboard_reaches_the_list_the_facts_and_the_photos(in_review):
    """Pending items, fact rows and photos answer Enter; map markers are named and out of the Tab order;
    the key typed and Enter leave the field, so j moves through the list."""
    from playwright.async_api import async_playwright, expect

    c, token, pending = in_review
    errors: list[str] = []
    async with async_playwright() as pw:
        browser = await launch(pw)
        try:
            page = await fresh_page(browser, errors)
            await page.goto(f"{c.base_url}/review/")
            await page.click("#key")
            await page.keyboard.type(token)
            await page.keyboard.press("Enter")
            await page.wait_for_selector(f"body[data-ready='1'][data-selected='{pending[0]['jobId']}']", timeout=15000)
            assert await page.evaluate("document.activeElement.id") != "key"
            await page.keyboard.press("j")
            await page.wait_for_selector(f"body[data-selected='{pending[1]['jobId']}']", timeout=10000)
            assert await page.input_value("#key") == ""

            await page.locator("#pending li button").nth(2).focus()
            await page.keyboard.press("Enter")
            await page.wait_for_selector(f"body[data-selected='{pending[2]['jobId']}']", timeout=10000)
            row = page.locator("#facts tr.fact-row").first
            assert await row.get_attribute("tabindex") == "0"
            await row.focus()
            await page.keyboard.press("Enter")
            await page.wait_for_selector("body[data-fact='0']")
            shot = page.locator("#photos .shot").first
            assert await shot.get_attribute("tabindex") == "0"
            await shot.focus()
            await page.keyboard.press("Enter")
            await expect(page.locator("#photos figure").first).to_have_class(re.compile(r"\blarge\b"))
            assert await shot.get_attribute("aria-expanded") == "true"
            # the markers (focusable through their tooltips) are named and left out of the Tab order
            facts = page.locator("#map path.fact")
            assert await facts.count() == int(await page.get_attribute("body", "data-facts")) > 0
            assert await facts.evaluate_all(
                "ps => ps.every(p => p.getAttribute('tabindex') === '-1' && p.getAttribute('aria-label').startsWith('fact '))")
            assert await page.locator("#map path[tabindex='-1'][aria-label^='photo ']").count() > 0
            assert await page.locator("#map path:not([tabindex='-1'])").evaluate_all(
                "ps => ps.every(p => !p.classList.contains('fact'))")
            assert errors == []
        finally:
            await browser.close()


async def test_on_a_narrow_screen_the_map_is_drawn_and_nothing_overflows(in_review):
    """At 375 px wide (a phone) the map is drawn above the list, and no table pushes the page sideways."""
    from playwright.async_api import async_playwright

    c, token, pending = in_review
    errors: list[str] = []
    async with async_playwright() as pw:
        browser = await launch(pw)
        try:
            page = await fresh_page(browser, errors, width=375, height=740)
            await page.goto(f"{c.base_url}/review/#key={token}")
            await page.wait_for_selector("body[data-ready='1'][data-selected]", timeout=15000)
            box = await page.locator("#map").bounding_box()
            assert box["width"] > 300 and box["height"] > 150, box
            assert await page.evaluate("document.documentElement.scrollWidth") <= 376
            jobs = await page.locator("#jobs").bounding_box()
            assert jobs["x"] >= 0 and jobs["x"] + jobs["width"] <= 376
            ARTIFACTS.mkdir(exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / "review-narrow.png"), full_page=True)
            assert errors == []
        finally:
            await browser.close()


# ---- Accessibility (WCAG 2.2 AA): shortcuts, focus, names, states, contrast ------------------------------

async def test_the_single_key_shortcuts_can_be_turned_off_and_a_sweep_is_approved_only_once_confirmed(in_review):
    """WCAG 2.1.4: a switch turns j k a r s off (remembered across reloads); approving a whole sweep, by
    s or by its button, asks first, and Cancel sends nothing."""
    from playwright.async_api import expect

    c, token, pending = in_review
    first = pending[0]
    async with review_opened(in_review) as (page, sent, errors):
        switch = page.get_by_label("single-key shortcuts")
        assert await switch.is_checked()

        # s asks; Cancel sends nothing and says so; the button asks the same
        asked = Dialogs(page, accept=False)
        await page.keyboard.press("s")
        await expect(page.locator("#status")).to_contain_text(f"sweep {first['sweepId']} not approved: cancelled")
        assert len(asked) == 1 and first["sweepId"] in asked[0] and "dissenting replica is left" in asked[0]
        await page.get_by_role("button", name=re.compile("^Approve whole sweep")).click()
        await expect(page.locator("#status")).to_contain_text("not approved: cancelled")
        await page.wait_for_timeout(300)
        assert len(asked) == 2 and sent == []

        # the shortcuts off: no letter acts, also after a reload
        await switch.uncheck()
        await page.locator("#d-title").focus()
        for key in ("a", "j", "s", "r"):
            await page.keyboard.press(key)
        await page.wait_for_timeout(400)
        assert sent == [] and len(asked) == 2
        assert await page.get_attribute("body", "data-selected") == str(first["jobId"])
        assert await page.evaluate("document.activeElement.id") == "d-title"
        assert not await page.locator("#approve .key-hint").is_visible()
        await page.reload()
        await page.wait_for_selector(f"body[data-ready='1'][data-selected='{first['jobId']}']", timeout=15000)
        assert not await switch.is_checked()
        await page.keyboard.press("a")
        await page.wait_for_timeout(300)
        assert sent == []

        # on again: a approves; the sweep approved once confirmed, by its button
        await switch.check()
        await page.locator("#d-title").focus()
        await page.keyboard.press("a")
        await page.wait_for_selector(f"body[data-last-verdict='{first['jobId']}:approved']", timeout=10000)
        assert len(sent) == 1
        await page.reload()
        await page.wait_for_selector("body[data-ready='1'][data-selected]", timeout=15000)
        assert await switch.is_checked()
        asked.accept = True
        await page.get_by_role("button", name=re.compile("^Approve whole sweep")).click()
        await page.wait_for_selector("body[data-last-sweep]", timeout=15000)
        assert len(asked) == 3 and any(u.endswith(f"/sweeps/{first['sweepId']}/approve") for u in sent)
        assert errors == []
    assert "in_review" not in set((await job_states(c)).values())


async def test_the_arrows_move_in_the_list_only_and_no_letter_acts_from_the_map(in_review):
    """ArrowDown on the focused map pans it (Leaflet's), never loads the next job; a letter typed there
    does nothing; in the list the arrows move to the next or previous job, focus following."""
    c, token, pending = in_review
    async with review_opened(in_review) as (page, sent, errors):
        await page.locator("#map").focus()
        for key in ("ArrowDown", "ArrowDown", "j", "a", "s"):
            await page.keyboard.press(key)
        await page.wait_for_timeout(500)
        assert await page.get_attribute("body", "data-selected") == str(pending[0]["jobId"])
        assert sent == [] and await page.evaluate("document.activeElement.id") == "map"
        # outside the list (the job's title) the arrows are the page's
        await page.locator("#d-title").focus()
        await page.keyboard.press("ArrowDown")
        await page.wait_for_timeout(300)
        assert await page.get_attribute("body", "data-selected") == str(pending[0]["jobId"])

        items = page.locator("#pending li button")
        await items.nth(0).focus()
        await page.keyboard.press("ArrowDown")
        await page.wait_for_selector(f"body[data-selected='{pending[1]['jobId']}']", timeout=10000)
        assert await page.evaluate("document.activeElement.closest('li').dataset.jobId") == str(pending[1]["jobId"])
        await page.keyboard.press("ArrowDown")
        await page.wait_for_selector(f"body[data-selected='{pending[2]['jobId']}']", timeout=10000)
        await page.keyboard.press("ArrowUp")
        await page.wait_for_selector(f"body[data-selected='{pending[1]['jobId']}']", timeout=10000)
        assert await page.evaluate("document.activeElement.closest('li').dataset.jobId") == str(pending[1]["jobId"])
        assert sent == [] and errors == []


async def test_focus_is_put_back_on_the_next_jobs_title_after_a_verdict(in_review):
    """The Approve button disabled while its verdict is sent, the detail hidden, the list rebuilt: focus
    does not drop to the page's body but lands on the title of the job shown next (the list's title when
    none is left)."""
    from playwright.async_api import expect

    c, token, pending = in_review
    focused = "document.activeElement.id"
    async with review_opened(in_review) as (page, sent, errors):
        await page.locator("#approve").focus()
        await page.keyboard.press("Enter")
        await page.wait_for_selector(f"body[data-last-verdict='{pending[0]['jobId']}:approved']", timeout=10000)
        await page.wait_for_selector(f"body[data-selected='{pending[1]['jobId']}']:not([data-sending])", timeout=10000)
        assert await page.evaluate(focused) == "d-title"
        await expect(page.locator("#d-title")).to_contain_text(pending[1]["wireId"])

        # a rejection typed in the reason field (the field hidden while the list reloads)
        await page.locator("#reject").click()
        await page.keyboard.type("not this street")
        await page.keyboard.press("Enter")
        await page.wait_for_selector(f"body[data-last-verdict='{pending[1]['jobId']}:rejected']", timeout=10000)
        await page.wait_for_selector(f"body[data-selected='{pending[2]['jobId']}']:not([data-sending])", timeout=10000)
        assert await page.evaluate(focused) == "d-title"

        # the last ones approved by their button: none left, focus on the list's title
        for job in pending[2:]:
            await page.wait_for_selector(f"body[data-selected='{job['jobId']}']:not([data-sending])", timeout=10000)
            await page.locator("#approve").click()
            await page.wait_for_selector(f"body[data-last-verdict='{job['jobId']}:approved']", timeout=10000)
        await expect(page.locator("#pending li")).to_have_count(0)
        await page.wait_for_selector("body:not([data-sending])")
        assert await page.evaluate(focused) == "pending-title"
        assert errors == []


async def test_names_roles_and_states_of_the_pages_controls(in_review):
    """Status messages are live regions and the list's heading is only its title; pending jobs are
    buttons, the one shown aria-current; a fact row's name joins its cells with commas and says whether
    it is selected; the map is a named region and its markers images; photos are buttons named by what
    they do; the filters have visible labels and a refused bbox is marked invalid; an h1; a hint when
    no key is given."""
    from playwright.async_api import async_playwright, expect

    c, token, pending = in_review
    errors: list[str] = []
    async with async_playwright() as pw:
        browser = await launch(pw)
        try:
            page = await fresh_page(browser, errors)
            await page.goto(f"{c.base_url}/review/")
            await expect(page.locator("#empty")).to_contain_text("Enter your reviewer key above")
            assert await page.get_by_role("status").filter(has_text="Enter your reviewer key above").count() == 1
            await page.goto("about:blank")      # a new document: a fragment alone would not load the page again
            await page.goto(f"{c.base_url}/review/#key=sisk_not_a_key")
            await page.wait_for_selector("body[data-ready='failed']", timeout=10000)
            assert await page.get_by_role("status").filter(has_text="key refused: ").count() == 1
            await page.goto("about:blank")
            await page.goto(f"{c.base_url}/review/#key={token}")
            await page.wait_for_selector(f"body[data-ready='1'][data-selected='{pending[0]['jobId']}']", timeout=15000)

            assert await page.get_by_role("heading", level=1).inner_text() == "Sweep review"
            assert await page.get_by_role("region", name="jobs").count() == 1
            assert await page.locator("#loading").evaluate("e => e.closest('h2') === null")
            await expect(page.get_by_role("heading", name=f"Pending ({len(pending)})", exact=True)).to_have_count(1)

            jobs = page.locator("#pending").get_by_role("button")
            await expect(jobs).to_have_count(len(pending))
            assert await jobs.nth(0).get_attribute("aria-current") == "true"
            assert await page.locator("#pending [aria-current='true']").count() == 1
            await page.get_by_role("button", name=re.compile(rf"^{pending[1]['wireId']} · ")).click()
            await page.wait_for_selector(f"body[data-selected='{pending[1]['jobId']}']", timeout=10000)
            assert await jobs.nth(1).get_attribute("aria-current") == "true"
            assert await jobs.nth(0).get_attribute("aria-current") is None

            rows = page.locator("#facts tr.fact-row")
            row = rows.first
            cells = await row.locator("td").all_inner_texts()
            assert len(cells) == 6 and re.fullmatch(r"-?[0-9.]+, -?[0-9.]+", cells[5]), cells
            assert await row.get_attribute("aria-label") == "fact 1: " + ", ".join(cells)
            assert set(await rows.evaluate_all("rs => rs.map(r => r.getAttribute('aria-selected'))")) == {"false"}
            await row.click()
            await page.wait_for_selector("body[data-fact='0']")
            assert await row.get_attribute("aria-selected") == "true"
            assert await page.locator("#facts tr[aria-selected='true']").count() == 1

            assert await page.get_by_role("region", name="map of the swept area").count() == 1
            facts = page.locator("#map path.fact")
            assert await facts.count() > 0
            assert await facts.evaluate_all("ps => ps.every(p => p.getAttribute('role') === 'img')")

            photo = (await page.locator("#photos figure").first.get_attribute("data-photo"))
            shot = page.get_by_role("button", name=f"enlarge photo {photo}", exact=True)
            await expect(shot).to_have_count(1)
            assert await page.locator("#photos img").evaluate_all("is => is.every(i => i.getAttribute('alt') === '')")
            await shot.click(position={"x": 3, "y": 3})
            await expect(page.get_by_role("button", name=f"shrink photo {photo}", exact=True)).to_have_count(1)

            bbox = page.get_by_label("Area", exact=True)
            await expect(page.get_by_label("Sweep", exact=True)).to_have_id("f-sweep")
            await bbox.fill("1,2,3")
            await bbox.press("Enter")
            await expect(page.locator("#status")).to_contain_text("filter refused: ")
            await expect(bbox).to_have_attribute("aria-invalid", "true")
            await bbox.fill("")
            await bbox.press("Enter")
            await page.wait_for_selector("body:not([data-loading])")
            await expect(bbox).not_to_have_attribute("aria-invalid", "true")
            assert errors == []
        finally:
            await browser.close()


def luminance(rgb: str) -> float:
    r, g, b = (int(x) / 255 for x in re.findall(r"\d+", rgb)[:3])
    f = lambda c: c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4    # noqa: E731
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b)


def contrast(a: str, b: str) -> float:
    x, y = sorted((luminance(a), luminance(b)), reverse=True)
    return (x + 0.05) / (y + 0.05)


async def test_selection_marks_and_the_dissent_text_have_enough_contrast(in_review):
    """WCAG 1.4.11 / 1.4.3: the job shown, the fact selected and its photos are marked by a colour of
    3:1 or more against what is around it (not only a pale tint); "(dissent)" on the job shown is 4.5:1."""
    from playwright.async_api import async_playwright

    c, token, pending = in_review
    errors: list[str] = []
    white = "rgb(255, 255, 255)"
    async with async_playwright() as pw:
        browser = await launch(pw)
        try:
            page = await fresh_page(browser, errors)
            await page.goto(f"{c.base_url}/review/#key={token}")
            await page.wait_for_selector("body[data-ready='1'][data-selected]", timeout=15000)
            li = page.locator("#pending li.selected")
            tint = await li.evaluate("e => getComputedStyle(e).backgroundColor")
            bar = await li.evaluate("e => getComputedStyle(e).boxShadow")
            assert "inset" in bar and contrast(bar, white) >= 3 and contrast(bar, tint) >= 3, (bar, tint)
            # "(dissent)" as the job shown would show it
            await li.locator("button").evaluate(
                "b => { const s = document.createElement('span'); s.className = 'dissent'; s.textContent = '(dissent)'; b.appendChild(s); }")
            ink = await li.locator(".dissent").evaluate("e => getComputedStyle(e).color")
            assert contrast(ink, tint) >= 4.5, (ink, tint)

            await page.locator("#facts tr.fact-row").first.click()
            await page.wait_for_selector("body[data-fact='0']")
            row = page.locator("#facts tr.hl")
            tint = await row.evaluate("e => getComputedStyle(e).backgroundColor")
            bar = await row.locator("td").first.evaluate("e => getComputedStyle(e).boxShadow")
            assert "inset" in bar and contrast(bar, white) >= 3 and contrast(bar, tint) >= 3, (bar, tint)
            fig = page.locator("#photos figure.hl").first
            border = await fig.evaluate("e => getComputedStyle(e).borderTopColor")
            assert contrast(border, white) >= 3, border
            marker = await page.locator("path.fact.hl").evaluate("e => getComputedStyle(e).stroke")
            assert contrast(marker, "rgb(238, 241, 244)") >= 3, marker
            # fact rows are targets of 24 px or more (WCAG 2.5.8)
            heights = await page.locator("#facts tr.fact-row").evaluate_all("rs => rs.map(r => r.getBoundingClientRect().height)")
            assert min(heights) >= 24, heights
            assert errors == []
        finally:
            await browser.close()


async def test_esc_closes_a_map_tooltip_and_reduced_motion_turns_the_maps_animation_off(in_review):
    """WCAG 1.4.13: a marker's tooltip is dismissed by Esc. A reviewer asking for reduced motion gets
    no zoom or fade animation on the map (Leaflet's animated panes and fading tiles)."""
    from playwright.async_api import async_playwright, expect

    c, token, pending = in_review
    errors: list[str] = []
    async with async_playwright() as pw:
        browser = await launch(pw)
        try:
            page = await fresh_page(browser, errors)
            await page.goto(f"{c.base_url}/review/#key={token}")
            await page.wait_for_selector("body[data-ready='1'][data-selected]", timeout=15000)
            await page.locator("#map path.fact").first.dispatch_event("mouseover")
            await expect(page.locator(".leaflet-tooltip")).to_have_count(1)
            await page.keyboard.press("Escape")
            await expect(page.locator(".leaflet-tooltip")).to_have_count(0)
            assert await page.locator("#map.leaflet-fade-anim").count() == 1      # motion by default

            ctx = await browser.new_context(viewport={"width": 1400, "height": 1000}, reduced_motion="reduce")
            still = await ctx.new_page()
            still.on("pageerror", lambda e: errors.append(str(e)))
            await still.goto(f"{c.base_url}/review/#key={token}")
            await still.wait_for_selector("body[data-ready='1'][data-selected]", timeout=15000)
            assert await still.locator("#map.leaflet-fade-anim").count() == 0
            assert await still.locator("#map .leaflet-proxy").count() == 0           # no zoom animation's proxy
            assert await page.locator("#map .leaflet-proxy").count() == 1
            assert errors == []
        finally:
            await browser.close()


async def test_a_key_pressed_again_while_the_list_reloads_leaves_the_verdicts_confirmation(in_review):
    """a a, the second while the list is loaded again after the verdict: it sends nothing, says to wait,
    and once the list is back the verdict's own words are shown again (the wait replaced them for good;
    on a busy machine the parked-rejection test saw it)."""
    from playwright.async_api import expect

    c, token, pending = in_review
    async with review_opened(in_review) as (page, sent, errors):
        await page.route("**/review/v1/pending*", slowed(1.5))
        await page.keyboard.press("a")
        await page.wait_for_selector(f"body[data-last-verdict='{pending[0]['jobId']}:approved']", timeout=10000)
        await page.keyboard.press("a")
        await expect(page.locator("#status")).to_have_text("wait: a verdict is being sent")
        await page.wait_for_selector(f"body[data-selected='{pending[1]['jobId']}']:not([data-sending])", timeout=10000)
        await expect(page.locator("#status")).to_have_text(re.compile(rf"^{pending[0]['wireId']} approved · \d+ facts live"))
        assert "error" not in (await page.locator("#status").get_attribute("class") or "")
        assert len(sent) == 1 and errors == []
