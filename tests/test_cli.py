"""The `sis` command as a user runs it: a real subprocess."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest

from tests.support import free_port

SIS = [sys.executable, "-m", "coordinator.cli"]


def run(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*SIS, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_help_lists_the_commands():
    out = run("--help")
    assert out.returncode == 0
    for cmd in ("serve", "migrate", "settings", "poll"):
        assert cmd in out.stdout
    serve = run("serve", "--help").stdout
    for flag in ("--host", "--port", "--database", "--demo"):
        assert flag in serve


def test_settings_lists_every_setting_with_a_default_and_help():
    out = run("settings")
    assert out.returncode == 0
    from coordinator.settings import Settings
    for name in Settings.model_fields:
        line = next(line for line in out.stdout.splitlines() if line.startswith(f"SIS_{name.upper()} "))
        assert len(line.split()) > 2


def test_settings_come_from_a_toml_file_and_the_environment(tmp_path, monkeypatch):
    from coordinator.settings import load
    cfg = tmp_path / "sis.toml"
    cfg.write_text('port = 9191\nusgs_feed = "2.5_day"\n')
    monkeypatch.setenv("SIS_CONFIG", str(cfg))
    monkeypatch.setenv("SIS_USGS_FEED", "significant_week")
    s = load()
    assert s.port == 9191 and s.usgs_feed == "significant_week"   # env wins over the file
    assert load(port=7000).port == 7000                           # flags win over both


def test_serve_demo_answers_and_stops_cleanly(tmp_path):
    port = free_port()
    proc = subprocess.Popen([*SIS, "serve", "--demo", "--port", str(port), "--database",
                             f"sqlite+aiosqlite:///{tmp_path}/sis.db"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "SIS_POLL_INTERVAL_S": "0"})
    try:
        line = proc.stdout.readline()
        assert f"serving on http://127.0.0.1:{port}" in line, proc.stderr.read() if proc.poll() else line
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/earth/events", timeout=20) as r:
            body = json.load(r)
        assert body["health"]["sourcesUsable"] == 2 and body["caveats"][0].startswith("Demo data")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=20) as r:
            assert json.load(r)["status"] == "ok"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


@pytest.mark.postgres
def test_serve_refuses_an_unmigrated_postgres_and_migrate_fixes_it(pg_database):
    if not pg_database:
        pytest.skip("PostgreSQL suite: set SIS_TEST_DATABASE_URL")
    import asyncio

    from tests.conftest import reset_postgres
    asyncio.run(reset_postgres(pg_database))
    out = run("serve", "--port", str(free_port()), "--database", pg_database)
    assert out.returncode == 2 and "run `sis migrate`" in out.stderr
    out = run("migrate", "--database", pg_database)
    assert out.returncode == 0, out.stderr


def test_serve_settles_the_collector_once_started():
    """Start-up objects are frozen out of the cyclic collector and young collections are
    rarer (``cli.settle_gc``): full collections no longer walk the whole process."""
    import gc

    from coordinator.cli import GC_YOUNG_THRESHOLD, settle_gc

    before = gc.get_threshold()
    try:
        settle_gc()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *before[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
