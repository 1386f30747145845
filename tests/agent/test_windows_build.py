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


def test_the_app_unpacks_outside_the_agents_data_folder(tmp_path):
    """Nuitka's {CACHE_DIR} is %LOCALAPPDATA% on Windows, whose sis-node folder is the agent's data folder
    (identity, spool, logs): the payload must unpack elsewhere."""
    from node_agent import config
    spec = [a for a in _cmd(tmp_path) if a.startswith("--onefile-tempdir-spec=")]
    assert spec == ["--onefile-tempdir-spec={CACHE_DIR}/sis-node-app/0.1.0-abc-def"]
    local = tmp_path / "AppData" / "Local"
    data = config.paths(env={"LOCALAPPDATA": str(local), "APPDATA": str(tmp_path / "Roaming")},
                        platform="win32").data_dir
    unpacked = Path(spec[0].split("=", 1)[1].replace("{CACHE_DIR}", str(local)))
    assert data != unpacked and data not in unpacked.parents
