"""One agent per data folder: the OS lock on agent.lock (node_agent.lock). The real processes
(a second `sis-node run`, a crashed agent's lock) are in test_crash.py."""
from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from node_agent import lock
from node_agent.config import Paths

from .support import FakeEngine, make_agent

ROOT = Path(__file__).resolve().parents[2]


def test_a_second_lock_on_a_data_folder_is_refused_naming_the_holder(tmp_path):
    paths = Paths(tmp_path, tmp_path).ensure()
    first = lock.DataLock(paths.lock_file).acquire()
    with pytest.raises(lock.AlreadyRunning) as refused:
        lock.DataLock(paths.lock_file).acquire()
    assert refused.value.pid == os.getpid()
    assert str(refused.value) == f"another sis-node is already running with this data folder (pid {os.getpid()})"
    first.release()
    with lock.DataLock(paths.lock_file) as again:      # free once released
        assert again.held and lock.holder(paths.lock_file) == os.getpid()
    assert lock.holder(paths.lock_file) is None


async def test_an_agent_holds_the_lock_while_it_runs_and_a_second_one_touches_nothing(tmp_path):
    home = tmp_path / "a"
    first = make_agent(home, "http://127.0.0.1:9", FakeEngine())
    first.data_lock.acquire()               # as `sis-node run` does before it makes the agent
    try:
        second = make_agent(home, "http://127.0.0.1:9", FakeEngine())
        with pytest.raises(lock.AlreadyRunning):
            await second.run()
        assert not second.paths.status_file.exists()     # refused before writing anything
    finally:
        first.data_lock.release()


def test_the_lock_module_imports_without_fcntl_as_on_windows():
    code = ("import sys; sys.modules['fcntl'] = None; sys.modules['msvcrt'] = None\n"
            "import node_agent.lock, node_agent.loop, node_agent.cli; print('imported')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "imported", out.stderr


def test_on_windows_the_lock_is_msvcrt_locking_on_a_byte_past_the_pid(tmp_path, monkeypatch):
    """Windows locks are mandatory: the locked byte lies past the pid, which stays readable."""
    held: dict[tuple[int, int], int] = {}
    calls = []

    def locking(fd: int, mode: int, nbytes: int) -> None:
        key = (os.fstat(fd).st_ino, os.lseek(fd, 0, os.SEEK_CUR))
        calls.append((mode, key[1], nbytes))
        if mode == fake.LK_NBLCK:
            if key in held:
                raise OSError(36, "Resource deadlock avoided")
            held[key] = fd
        elif mode == fake.LK_UNLCK:
            del held[key]
    fake = types.SimpleNamespace(LK_NBLCK=2, LK_UNLCK=0, locking=locking)
    monkeypatch.setitem(sys.modules, "msvcrt", fake)
    monkeypatch.setitem(sys.modules, "fcntl", None)     # never reached for on Windows
    monkeypatch.setattr(lock, "WINDOWS", True)
    path = Paths(tmp_path, tmp_path).ensure().lock_file
    first = lock.DataLock(path).acquire()
    assert calls == [(fake.LK_NBLCK, lock.WINDOWS_LOCK_OFFSET, 1)]
    with pytest.raises(lock.AlreadyRunning) as refused:
        lock.DataLock(path).acquire()
    assert refused.value.pid == os.getpid()
    first.release()
    assert calls[-1] == (fake.LK_UNLCK, lock.WINDOWS_LOCK_OFFSET, 1) and not held
    lock.DataLock(path).acquire().release()
