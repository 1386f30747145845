"""sis-node's output redirected on Windows, where it encodes in the ANSI code page, strictly (audit h13):
simulated with PYTHONIOENCODING=cp1252."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_status_with_text_outside_the_code_page_is_printed_escaped(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    reason = "revoked by the operators: \u201cGPU \u2192 too hot\u201d \u2713"
    (home / "status.json").write_text(json.dumps({"state": "stopped", "pid": 1, "stoppedBecause": reason}))
    env = {**os.environ, "SIS_NODE_HOME": str(home), "PYTHONIOENCODING": "cp1252"}
    out = subprocess.run([sys.executable, "-m", "node_agent.cli", "status"], capture_output=True, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    text = out.stdout.decode("cp1252")
    assert "\u201cGPU \\u2192 too hot\u201d \\u2713" in text      # cp1252 has the quotes, not the arrow or tick
