"""Where the agent finds nvidia-smi on Windows (audit h13), simulated on Linux: shutil.which there looks in
the current folder first, so a nvidia-smi.exe in the folder the agent starts from must not be the one run."""
from __future__ import annotations

import os
import shutil
import sys

import pytest

from node_agent import gpu


@pytest.fixture
def windows(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "platform", "win32")
    here = tmp_path / "Downloads"
    here.mkdir()
    (here / "nvidia-smi.exe").write_text("not the driver's")
    monkeypatch.chdir(here)
    real_which = shutil.which

    def which(cmd, mode=os.F_OK | os.X_OK, path=None):   # Windows' which: the current folder first
        found = here / (cmd + ".exe")
        return str(found) if found.is_file() else real_which(cmd, mode, path)
    monkeypatch.setattr(shutil, "which", which)
    for name, sub in (("SystemRoot", "Windows"), ("ProgramFiles", "Program Files")):
        (tmp_path / sub).mkdir()
        monkeypatch.setenv(name, str(tmp_path / sub))
    monkeypatch.setenv("PATH", os.pathsep.join([".", "", str(tmp_path / "bin")]))
    return tmp_path


def _exe(folder):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nvidia-smi.exe").write_text("the driver's")
    return str(folder / "nvidia-smi.exe")


def test_system32_first(windows):
    nvsmi = _exe(windows / "Program Files" / "NVIDIA Corporation" / "NVSMI")
    assert gpu.smi_path() == nvsmi
    system32 = _exe(windows / "Windows" / "System32")
    assert gpu.smi_path() == system32


def test_then_paths_absolute_folders_never_the_current_one(windows):
    assert gpu.smi_path() is None
    on_path = _exe(windows / "bin")
    assert gpu.smi_path() == on_path


def test_the_probe_runs_the_one_found(windows):
    system32 = _exe(windows / "Windows" / "System32")
    ran = []
    gpu.smi_probe(lambda cmd: ran.append(cmd[0]) or "")
    assert ran == [system32]
