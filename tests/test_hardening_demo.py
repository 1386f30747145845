"""Demo mode (issue 31, items 9 and 10): ``make demo`` keeps its own database
(var/demo.db), so ``make run`` afterwards serves no recorded-sample data, and a sweep
request answered from the demo's synthetic photo provider says so in its health and
caveats."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from coordinator.demo.photos import DEMO_CENTRE
from coordinator.core.honesty import DEMO_CAVEAT
from tests.support import make_settings, start_coordinator, stop_coordinator
from tests.test_sweeps_kit import request_sweep

ROOT = Path(__file__).resolve().parents[1]


def make_dry(target: str) -> str:
    """The serving command ``make <target>`` would run."""
    out = subprocess.run(["make", "-n", target], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return "\n".join(line for line in out.splitlines() if "sis serve" in line)


def test_make_demo_and_make_run_use_different_databases():
    demo, run = make_dry("demo"), make_dry("run")
    assert "--demo" in demo and "--demo" not in run
    assert re.search(r"--database \S*var/demo\.db", demo), demo
    assert "demo.db" not in run and "--database" not in run      # run keeps the default, var/sis.db


async def test_a_demo_sweep_request_labels_the_photo_providers_health_demo(sqlite_url):
    c = await start_coordinator(make_settings(sqlite_url, None, demo=True))
    try:
        r = await request_sweep(c, *DEMO_CENTRE, radius=400)
        assert r.status == 200, r.body
        body = r.json()
        assert body["queued"] is True
        assert [s.get("demo") for s in body["health"]["sources"]] == [True]
        assert body["caveats"][0] == DEMO_CAVEAT
    finally:
        await stop_coordinator(c)


async def test_demo_keyed_panels_answer_from_their_samples_and_never_send_a_real_key(sqlite_url, monkeypatch):
    """make demo answers every source it has a recorded sample of: the keyed ones too, with the
    sample's own key; a key the operator set is never sent to the demo upstream."""
    monkeypatch.setenv("SIS_SOURCES__WAQI__API_KEY", "real-secret")
    c = await start_coordinator(make_settings(sqlite_url, None, demo=True))
    try:
        assert c.services.sources["waqi"].api_key == "demo"
        assert c.services.sources["firms"].api_key == "DEMO_MAP_KEY"
        assert c.services.sources["tomtom_traffic"].api_key is None     # no sample: says the key is missing
        for path in ("/public/v1/anon/fires?bbox=113.75,-2.5,114,-2.25", "/public/v1/anon/air-quality",
                     "/public/v1/anon/volcano-alerts", "/earth/w/fred-unrate"):
            body = (await c.get(path)).json()
            assert body["health"]["degraded"] is False, (path, body["health"])
            assert all(s.get("demo") for s in body["health"]["sources"]), path
    finally:
        await stop_coordinator(c)


async def test_every_demo_answer_says_it_is_demo_data(sqlite_url):
    """The sweep layer's facts come from the fake provider's synthetic photos, though no
    source's health names it: under --demo its answers say it too."""
    c = await start_coordinator(make_settings(sqlite_url, None, demo=True))
    try:
        lat, lon = DEMO_CENTRE
        for path in (f"/earth/seen?lat={lat}&lon={lon}", "/earth/sweep-queue", "/public/v1/anon/seen-areas",
                     "/earth/events", "/earth/limits"):
            body = (await c.get(path)).json()
            assert body["caveats"][0] == DEMO_CAVEAT and body["caveats"].count(DEMO_CAVEAT) == 1, path
    finally:
        await stop_coordinator(c)
    plain = await start_coordinator(make_settings(sqlite_url, None))
    try:
        assert DEMO_CAVEAT not in (await plain.get("/earth/sweep-queue")).json()["caveats"]
    finally:
        await stop_coordinator(plain)
