"""``sis-node status | head -1``: a command whose reader has gone stops quietly, as Unix tools do."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from node_agent import cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("args", [["status"], ["settings"], ["--version"], ["--help"]])
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_a_command_whose_output_pipe_is_closed_exits_quietly(tmp_path, args, buffered):
    """It printed a BrokenPipeError traceback (or, buffered, "Exception ignored ... BrokenPipeError",
    status 120). The pipe's reader is closed before the command writes, as ``head -1`` does."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update(SIS_NODE_HOME=str(tmp_path), PYTHONPATH=str(ROOT))
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    read, write = os.pipe()
    os.close(read)
    try:
        out = subprocess.run([sys.executable, "-m", "node_agent.cli", *args], stdout=write, stderr=subprocess.PIPE,
                             env=env, cwd=ROOT, text=True, timeout=60)
    finally:
        os.close(write)
    assert out.stderr == ""
    assert out.returncode in (cli.EXIT_PIPE_CLOSED, 0)   # --help unbuffered: argparse drops the failed write
    if args != ["--help"] or buffered:
        assert out.returncode == cli.EXIT_PIPE_CLOSED


def test_a_closed_pipe_is_told_from_other_write_errors(monkeypatch):
    assert cli._pipe_closed(BrokenPipeError(32, "Broken pipe"))
    assert not cli._pipe_closed(OSError(28, "No space left on device"))
    monkeypatch.setattr(cli.os, "name", "posix")
    assert not cli._pipe_closed(OSError(22, "Invalid argument"))     # EINVAL means a closed pipe on Windows only
