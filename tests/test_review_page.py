"""The review page in a real browser (Debian's chromium driven by Playwright): it loads,
pending jobs are drawn on the map, a keypress approves or rejects, the database changes.
A screenshot is kept under test-artifacts/ (git-ignored)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlparse

import pytest
from sqlalchemy import func, select

from coordinator.core.db.models import SeenFact, SweepJob, SweepTransition
from coordinator.review import keys
from tests.test_review_kit import photo_in_every_cell, review_sqlite, sweep_to_review  # noqa: F401
from tests.test_sweeps_kit import photos  # noqa: F401

CHROMIUM = os.environ.get("SIS_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists(),
                                reason=f"no chromium at {CHROMIUM} (apt-get install chromium)")


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


async def test_the_review_page_approves_and_rejects_by_keyboard(review_sqlite, photos):
    from playwright.async_api import async_playwright, expect

    c = review_sqlite
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
    assert hosts <= {urlparse(c.base_url).netloc, urlparse(photos.api_url).netloc}    # no CDN, no tiles
    assert (ARTIFACTS / "review-page.png").stat().st_size > 10_000
