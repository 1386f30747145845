"""Set-up (issue 31, item 13): ``make run`` and ``make demo`` install the coordinator
without the engine's extra (it never imports torch), while ``make test`` and the node-app
targets install the dev and engine extras; each install has its own stamp."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def dry(target: str, venv: Path) -> list[str]:
    """The commands ``make <target>`` would run against the virtual environment ``venv``."""
    out = subprocess.run(["make", "-n", f"VENV={venv}", target], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    return out.splitlines()


def installs(lines: list[str]) -> list[str]:
    return [line for line in lines if "uv pip install" in line]


@pytest.mark.parametrize("target", ["run", "demo", "install"])
def test_serving_installs_the_project_without_the_engine(tmp_path, target):
    (line,) = installs(dry(target, tmp_path / "venv"))
    assert line.endswith(" -e .") and "engine" not in line and "dev" not in line


@pytest.mark.parametrize("target", ["test", "bench", "node-app", "node-app-check", "install-full"])
def test_tests_and_builds_install_the_dev_and_engine_extras(tmp_path, target):
    lines = installs(dry(target, tmp_path / "venv"))
    assert lines[0].endswith("-e '.[dev,engine]'"), lines


def fake_venv(path: Path, *stamps: str) -> Path:
    (path / "bin").mkdir(parents=True)
    for exe in ("python", "uv"):
        (path / "bin" / exe).write_text("#!/bin/sh\n")
        (path / "bin" / exe).chmod(0o755)
    later = time.time() + 5      # newer than pyproject.toml
    for stamp in stamps:
        (path / stamp).touch()
        os.utime(path / stamp, (later, later))
    return path


def test_each_install_has_its_stamp_and_the_full_one_serves_both(tmp_path):
    core = fake_venv(tmp_path / "core", ".installed-core-stamp")
    assert installs(dry("run", core)) == []
    assert len(installs(dry("test", core))) == 1                         # the core install lacks the extras
    full = fake_venv(tmp_path / "full", ".installed-full-stamp", ".installed-core-stamp")
    assert installs(dry("run", full)) == [] and installs(dry("test", full)) == []
    stale = fake_venv(tmp_path / "stale", ".installed-full-stamp", ".installed-core-stamp")
    past = (ROOT / "pyproject.toml").stat().st_mtime - 60
    for stamp in (".installed-full-stamp", ".installed-core-stamp"):
        os.utime(stale / stamp, (past, past))
    assert len(installs(dry("run", stale))) == 1 and len(installs(dry("test", stale))) == 1


def test_the_coordinator_and_its_cli_never_import_torch():
    code = ("import sys, coordinator.faces.app, coordinator.cli, coordinator.services\n"
            "from coordinator.cli import main\n"
            "sys.argv = ['sis', 'serve', '--help']\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchvision', 'timm', 'transformers'))\n"
            "assert not bad, bad\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "--demo" in r.stdout
