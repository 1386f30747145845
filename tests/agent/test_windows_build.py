"""The Nuitka command line of build/node_app.py: what the onefile bootstrap does on a stop signal,
and where it unpacks (Windows-portability audit h13)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _node_app():
    spec = importlib.util.spec_from_file_location("node_app_build", ROOT / "build" / "node_app.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cmd(tmp_path: Path) -> list[str]:
    return _node_app().nuitka_command(tmp_path, "sis-node-windows-x86_64.exe", 2, "0.1.0-abc-def",
                                      tmp_path / "sis_node_launcher.py")


def test_the_onefile_bootstrap_waits_for_the_agent_to_finish_its_job(tmp_path):
    """Nuitka's default --onefile-child-grace-time is 5000 ms: the bootstrap kills the agent 5 s after
    a Ctrl-C or SIGTERM, before the job the first signal lets it finish is done."""
    grace = [a for a in _cmd(tmp_path) if a.startswith("--onefile-child-grace-time")]
    assert grace == ["--onefile-child-grace-time=infinity"]
