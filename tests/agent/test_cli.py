"""The sis-node command: version, help, status of the contribution, settings."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from node_agent import __version__, cli

from .support import FakeEngine, make_agent, request_sweep, run_holding_ahead


def test_version_and_help(capsys):
    out = subprocess.run([sys.executable, "-m", "node_agent.cli", "--version"], capture_output=True, text=True)
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and lines[0] == f"sis-node {__version__}"
    # What the build carries: the engine build, the backends of its torch, the shipped weights.
    import sweep_engine
    import torch
    from node_agent.build_info import weights
    # The build the node names when it enrols (sources and shipped weights), whole: what a
    # coordinator's SIS_ENGINE_BUILDS must list (it printed the sources' hash alone, cut to 16).
    from sweep_engine.config import DEFAULT_WEIGHTS_MANIFEST, EngineConfig
    sent = sweep_engine.build_hash(EngineConfig().weights_manifest)
    assert EngineConfig().weights_manifest == DEFAULT_WEIGHTS_MANIFEST
    assert lines[1] == f"engine {sweep_engine.__version__}, build {sent}"
    assert lines[2].startswith("backends: CPU; ") and f"torch {torch.__version__}" in lines[2]
    assert (f"CUDA {torch.version.cuda}" in lines[2]) == bool(torch.version.cuda)
    shipped = weights()
    assert len(shipped) >= 2 and all(any(w["sha256"][:16] in line and w["name"] in line for line in lines[4:])
                                     for w in shipped)
    out = subprocess.run([sys.executable, "-m", "node_agent.cli", "--help"], capture_output=True, text=True)
    for command in ("run", "status", "pause", "resume", "gpus", "settings", "verify-manifest"):
        assert command in out.stdout
    out = subprocess.run([sys.executable, "-m", "node_agent.cli", "run", "--help"], capture_output=True, text=True)
    assert "--coordinator URL" in out.stdout and "--allow-cpu" in out.stdout


def test_run_with_no_coordinator_says_how_to_give_one(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SIS_NODE_HOME", str(tmp_path))
    assert cli.main(["run"]) == cli.EXIT_CONFIG
    assert "give --coordinator URL" in capsys.readouterr().err


async def test_status_summarises_the_contribution(coord, photos, tmp_path, monkeypatch, capsys):
    await request_sweep(coord)
    home = tmp_path / "a"
    monkeypatch.setenv("SIS_NODE_HOME", str(home))
    agent = make_agent(home, coord.base_url, FakeEngine())
    task = asyncio.create_task(agent.run())
    await agent.wait_until(lambda: agent.contribution.read()["jobs"] >= 2, 60)
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "agent:        " in out and "not running" not in out
    agent.request_stop()
    await asyncio.wait_for(task, 20)

    assert cli.main(["status", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    c = doc["contribution"]
    assert doc["running"] is False and doc["nodeId"].startswith("nd_")
    assert c["jobs"] >= 2 and c["photos"] >= 2 and c["facts"] == c["photos"]
    assert c["cpuSeconds"] > 0 and c["gpuSeconds"] == 0  # a CPU run is never counted as GPU time
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert f"{c['jobs']} jobs, {c['photos']} photos, {c['facts']} facts, 0.00 GPU hours" in out
    assert "CPU hours in development mode" in out and "agent:        not running" in out


async def test_status_names_the_job_held_ahead(coord, photos, tmp_path, monkeypatch, capsys):
    await request_sweep(coord)
    home = tmp_path / "a"
    monkeypatch.setenv("SIS_NODE_HOME", str(home))
    engine = FakeEngine(hold=True)
    agent = make_agent(home, coord.base_url, engine)
    task = await run_holding_ahead(agent, engine)
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    job = agent._ahead.job
    assert f"next job:     {job.job_id} ({len(job.photos)} photos)" in out and "current job:  " in out
    engine.gate.set()
    agent.request_stop()
    await asyncio.wait_for(task, 20)


def test_settings_lists_every_setting_with_its_default(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SIS_NODE_HOME", str(tmp_path))
    assert cli.main(["settings"]) == 0
    out = capsys.readouterr().out
    assert "gpu_memory_fraction = 0.8  (default 0.8; env SIS_NODE_GPU_MEMORY_FRACTION)" in out


def test_gpus_command_explains_itself(capsys):
    code = cli.main(["gpus"])
    out = capsys.readouterr().out
    assert (code == 0 and "usable" in out) or (code == cli.EXIT_NO_GPU and "no usable NVIDIA GPU: " in out)


def test_logs_go_to_a_rotating_file_and_the_console(tmp_path, capsys):
    import logging

    from node_agent.config import Config, Paths

    paths = Paths(tmp_path, tmp_path).ensure()
    cli.setup_logging(paths, Config(log_max_bytes=2000, log_backups=2))
    log = logging.getLogger("sis.node.test")
    for i in range(100):
        log.info("line %d of the rotation test", i)
    names = sorted(p.name for p in paths.log_dir.iterdir())
    assert names == ["sis-node.log", "sis-node.log.1", "sis-node.log.2"]
    assert "line 99 of the rotation test" in capsys.readouterr().err
    # The engine's own lines (a photo it could not measure, its geometry workers) go to the same places.
    logging.getLogger("sweep_engine.pipeline").error("measuring photo p1 failed")
    assert "measuring photo p1 failed" in capsys.readouterr().err
    assert "sweep_engine.pipeline: measuring photo p1 failed" in (paths.log_dir / "sis-node.log").read_text()
    cli.setup_logging(paths, Config(), console=False)  # and leave no console handler behind
    for name in cli.LOGGERS:
        for h in list(logging.getLogger(name).handlers):
            logging.getLogger(name).removeHandler(h)
            h.close()


def test_a_compiled_build_reports_what_was_written_into_it(tmp_path, monkeypatch, capsys):
    """A binary has no sources and must not pay for import torch to answer --version: it
    prints the BUILD_INFO.json that build/node_app.py wrote into it."""
    from node_agent import build_info
    info = {"agentVersion": "9.9.9", "engine": {"version": "0.1.0", "build": "ab" * 32},
            "weights": [{"name": "depth", "architecture": "dav2-metric-outdoor/vits", "sha256": "cd" * 32,
                         "trained": True, "license": "Apache-2.0"}],
            "backends": {"torch": "2.15.0+cpu", "cpu": True, "cuda": None, "cudnn": None}}
    (tmp_path / "BUILD_INFO.json").write_text(json.dumps(info))
    monkeypatch.setattr(build_info, "BUILD_INFO_FILE", tmp_path / "BUILD_INFO.json")
    try:
        cli.main(["--version"])
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ["sis-node 9.9.9", f"engine 0.1.0, build {'ab' * 32}",
                       "backends: CPU; no GPU backend (a CPU-only build) (torch 2.15.0+cpu)"]
    assert out[4] == f"  depth: dav2-metric-outdoor/vits, sha256 {'cd' * 8}"


@pytest.mark.parametrize("command", ["run", "pause", "resume"])
@pytest.mark.parametrize("home", ["/proc/sis-node-test", "{tmp}/a-file/sis-node"])
def test_a_data_folder_that_cannot_be_made_is_one_line_and_status_2(tmp_path, monkeypatch, capsys, command, home):
    """FileNotFoundError / NotADirectoryError came out of Paths.ensure as a traceback."""
    (tmp_path / "a-file").write_text("")
    folder = home.format(tmp=tmp_path)
    monkeypatch.setenv("SIS_NODE_HOME", folder)
    assert cli.main([command]) == cli.EXIT_CONFIG
    err = capsys.readouterr().err
    assert err.startswith(f"sis-node: the folder {folder} cannot be made (") and err.count("\n") == 1


@pytest.mark.parametrize("setting", [("file", "coordinator = \n", "node.toml"),
                                     ("env", "abc", "cpu_busy_percent: 'abc' is not a number")])
def test_resume_with_a_setting_it_cannot_read_lifts_the_pause_and_names_the_setting(tmp_path, monkeypatch, capsys,
                                                                                     setting):
    """It printed "resumed", then a ConfigError traceback."""
    where, value, needle = setting
    monkeypatch.setenv("SIS_NODE_HOME", str(tmp_path))
    assert cli.main(["pause"]) == 0
    if where == "file":
        (tmp_path / "node.toml").write_text(value)
    else:
        monkeypatch.setenv("SIS_NODE_CPU_BUSY_PERCENT", value)
    capsys.readouterr()
    assert cli.main(["resume"]) == cli.EXIT_CONFIG
    out = capsys.readouterr()
    assert out.out == "resumed\n" and out.err.startswith("sis-node: ") and needle in out.err
    assert not (tmp_path / "paused.json").exists()


def test_an_unknown_log_level_is_a_configuration_problem(tmp_path, monkeypatch, capsys):
    """ValueError: Unknown level: 'VERBOSE' came out of logging at start."""
    monkeypatch.setenv("SIS_NODE_HOME", str(tmp_path))
    monkeypatch.setenv("SIS_NODE_LOG_LEVEL", "verbose")
    assert cli.main(["run", "--coordinator", "http://127.0.0.1:9", "--allow-cpu"]) == cli.EXIT_CONFIG
    assert "log_level: 'verbose' is not one of DEBUG, INFO, WARNING, ERROR" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["paused.json", "contribution.json", "status.json"])
@pytest.mark.parametrize("content", ['"y"', "[1]", "{"])
def test_status_takes_a_file_that_is_not_a_json_object_as_unreadable_with_a_warning(tmp_path, monkeypatch, capsys,
                                                                                   caplog, name, content):
    """A paused.json, contribution.json or status.json of "y" or [1] raised AttributeError/TypeError."""
    monkeypatch.setenv("SIS_NODE_HOME", str(tmp_path))
    (tmp_path / name).write_text(content)
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "contribution: 0 jobs, 0 photos" in out and "agent:        not running" in out
    assert ("paused:       yes (paused by the volunteer)" in out) == (name == "paused.json")
    assert f"{tmp_path / name} " in caplog.text
    assert cli.main(["status", "--json"]) == 0
    json.loads(capsys.readouterr().out)



@pytest.mark.parametrize("command", ["run", "pause"])
@pytest.mark.parametrize("how", ["EACCES", "EROFS"])
def test_a_data_folder_that_cannot_be_written_is_one_line_and_status_2(tmp_path, monkeypatch, capsys, command, how):
    """run: a traceback at lock.py (OSError: Read-only file system: .../agent.lock), status 1;
    pause: a traceback, and status 0 as if paused."""
    import errno
    import os

    from node_agent import config as config_mod

    home = tmp_path / "home"
    monkeypatch.setenv("SIS_NODE_HOME", str(home))
    made = config_mod.paths().ensure()
    folders = [home, *{made.data_dir, made.config_dir, made.spool_dir, made.log_dir} - {home}]
    if os.geteuid() != 0 and how == "EACCES":
        for d in folders:
            d.chmod(0o555)
    else:   # root writes through chmod 0o555 (and a read-only mount needs no root): refuse at os.open
        code = getattr(errno, how)
        real_open = os.open

        def refusing(path, flags, *a, **k):
            if str(path).startswith(str(home)) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
                raise OSError(code, os.strerror(code), str(path))
            return real_open(path, flags, *a, **k)

        monkeypatch.setattr(os, "open", refusing)
    try:
        assert cli.main([command]) == cli.EXIT_CONFIG
    finally:
        for d in folders:
            d.chmod(0o755)
    err = capsys.readouterr().err
    assert err.startswith(f"sis-node: the data folder {home} cannot be written (") and err.count("\n") == 1
    assert err.endswith("): give SIS_NODE_HOME a folder this user can write\n")
