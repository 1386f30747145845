"""Files another process holds open, as on Windows (audit h13), simulated on Linux: os.replace, unlink and
open raise PermissionError with WinError 32 (a sharing violation) or 5 (a file deleted and still open
elsewhere, or open without FILE_SHARE_DELETE, as Python's own open() leaves it) while that process holds it."""
from __future__ import annotations

import errno
import json
import os
import pathlib
import sys
import time

import pytest

from node_agent import contribution, files
from node_agent.contribution import Contribution
from node_agent.spool import Spool
from node_agent.submitting import Submitting


def _busy(winerror: int = 32) -> PermissionError:
    e = PermissionError(errno.EACCES, "The process cannot access the file because it is being used by another "
                                      "process")
    e.winerror = winerror
    return e


def _held(real, times: int, ends_with: str, winerror: int = 32):
    """``real``, refused as busy the first ``times`` calls on a path ending with ``ends_with``."""
    calls = []

    def call(*args, **kwargs):
        if any(str(a).endswith(ends_with) for a in args[:2]):     # os.replace's target, a Path method's self
            calls.append(time.monotonic())
            if len(calls) <= times:
                raise _busy(winerror)
        return real(*args, **kwargs)
    call.calls = calls
    return call


@pytest.fixture
def windows(monkeypatch):
    monkeypatch.setattr(sys, "platform", "win32")


@pytest.mark.parametrize("winerror", [5, 32])
def test_a_replace_onto_a_file_held_for_a_moment_is_retried(windows, monkeypatch, tmp_path, winerror):
    target = tmp_path / "contribution.json"
    target.write_text("old")
    held = _held(os.replace, 3, "contribution.json", winerror)
    monkeypatch.setattr(os, "replace", held)
    files.write_atomic(target, b"new")
    assert target.read_bytes() == b"new" and len(held.calls) == 4
    assert list(tmp_path.iterdir()) == [target]


def test_a_delete_of_a_file_held_for_a_moment_is_retried(windows, monkeypatch, tmp_path):
    target = tmp_path / "ls_1.json"
    target.write_text("{}")
    held = _held(pathlib.Path.unlink, 2, "ls_1.json")
    monkeypatch.setattr(pathlib.Path, "unlink", held)
    files.remove(target)
    assert not target.exists() and len(held.calls) == 3


def test_a_file_held_for_longer_is_an_error_after_half_a_second(windows, monkeypatch, tmp_path):
    target = tmp_path / "contribution.json"
    held = _held(os.replace, 10**9, "contribution.json")
    monkeypatch.setattr(os, "replace", held)
    t0 = time.monotonic()
    with pytest.raises(PermissionError):
        files.write_atomic(target, b"new")
    assert 0.5 <= time.monotonic() - t0 < 1.5 and not target.exists()
    assert list(tmp_path.iterdir()) == []       # no temporary file left


def test_other_permission_errors_and_other_systems_are_not_retried(monkeypatch, tmp_path):
    target = tmp_path / "contribution.json"
    held = _held(os.replace, 1, "contribution.json")
    monkeypatch.setattr(os, "replace", held)
    with pytest.raises(PermissionError):        # on Linux, a PermissionError is one
        files.write_atomic(target, b"new")
    monkeypatch.setattr(sys, "platform", "win32")
    held = _held(os.replace, 1, "contribution.json", winerror=1920)    # ERROR_CANT_ACCESS_FILE
    monkeypatch.setattr(os, "replace", held)
    with pytest.raises(PermissionError):
        files.write_atomic(target, b"new")
    assert len(held.calls) == 1


class _Submitter(Submitting):
    """What of an agent ``Submitting._acknowledged`` reads."""

    def __init__(self, spool: Spool, contribution: Contribution) -> None:
        self.spool, self.contribution = spool, contribution


def _acknowledging(monkeypatch, tmp_path):  # noqa: ANN001, ANN202
    """A spooled result of 3 photos acknowledged by the coordinator, and what counts it."""
    monkeypatch.setattr(files, "BUSY_RETRY_S", 0.05)
    spool = Spool(tmp_path / "spool", "http://c")
    item = spool.put("ls_1", "job-1", {"jobId": "job-1"}, {"photos": 3, "facts": 5, "seconds": 2.0, "onGpu": True})
    contrib = Contribution(tmp_path / "contribution.json")
    return spool, item, contrib, _Submitter(spool, contrib)


def test_a_count_that_cannot_be_written_keeps_the_result_spooled(windows, monkeypatch, tmp_path):
    """The coordinator acknowledged the result; its count cannot be written (the file held past the retries):
    the result stays spooled, so it is sent again and counted then, instead of being deleted uncounted."""
    spool, item, contrib, agent = _acknowledging(monkeypatch, tmp_path)
    real = os.replace
    monkeypatch.setattr(os, "replace", _held(real, 10**9, "contribution.json"))
    with pytest.raises(PermissionError):
        Submitting._acknowledged(agent, item, {"resultState": "valid"})
    assert spool.get("ls_1") is not None and contrib.read()["jobs"] == 0
    monkeypatch.setattr(os, "replace", real)     # let go: the resend is acknowledged and counted
    Submitting._acknowledged(agent, spool.get("ls_1"), {"resultState": "valid", "duplicate": True})
    assert spool.get("ls_1") is None and contrib.read()["jobs"] == 1 and contrib.read()["photos"] == 3


def test_a_result_counted_and_not_deleted_is_not_counted_again_when_resent(windows, monkeypatch, tmp_path):
    """Counted first, then its spooled file held past the retries: the result stays spooled, is sent
    again and answered as a resend, and was counted a second time."""
    spool, item, contrib, agent = _acknowledging(monkeypatch, tmp_path)
    real = os.unlink
    monkeypatch.setattr(os, "unlink", _held(real, 10**9, "ls_1.json"))
    with pytest.raises(PermissionError):
        Submitting._acknowledged(agent, item, {"resultState": "valid"})
    assert spool.get("ls_1") is not None and contrib.read()["jobs"] == 1
    monkeypatch.setattr(os, "unlink", real)
    Submitting._acknowledged(agent, spool.get("ls_1"), {"resultState": "valid", "duplicate": True})
    assert spool.get("ls_1") is None and contrib.read()["jobs"] == 1 and contrib.read()["photos"] == 3


def test_a_result_counted_and_not_deleted_is_not_counted_again_after_a_restart(windows, monkeypatch, tmp_path):
    """The run remembered the leases it counted, in memory: the agent restarted between the count
    and the resend counted the result a second time. The file keeps the latest leases counted."""
    spool, item, contrib, agent = _acknowledging(monkeypatch, tmp_path)
    real = os.unlink
    monkeypatch.setattr(os, "unlink", _held(real, 10**9, "ls_1.json"))
    with pytest.raises(PermissionError):
        Submitting._acknowledged(agent, item, {"resultState": "valid"})
    monkeypatch.setattr(os, "unlink", real)
    restarted = _Submitter(Spool(tmp_path / "spool", "http://c"), Contribution(tmp_path / "contribution.json"))
    Submitting._acknowledged(restarted, restarted.spool.get("ls_1"), {"resultState": "valid", "duplicate": True})
    doc = restarted.contribution.read()
    assert restarted.spool.get("ls_1") is None and doc["jobs"] == 1 and doc["photos"] == 3
    assert "countedLeases" not in doc                                    # the counts alone, as status shows them
    for i in range(contribution.COUNTED_LEASES + 5):                     # the file keeps the latest only
        restarted.contribution.acknowledged(f"ls_x{i}", 1, 0, 0.0, False)
    kept = json.loads((tmp_path / "contribution.json").read_text())["countedLeases"]
    assert len(kept) == contribution.COUNTED_LEASES and kept[-1] == f"ls_x{contribution.COUNTED_LEASES + 4}"


def test_a_spooled_result_held_by_another_process_is_not_taken_for_corrupt(windows, monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(files, "BUSY_RETRY_S", 0.05)
    spool = Spool(tmp_path / "spool", "http://c")
    spool.put("ls_1", "job-1", {"jobId": "job-1"})
    real = pathlib.Path.read_text
    monkeypatch.setattr(pathlib.Path, "read_text", _held(real, 10**9, "ls_1.json", winerror=5))
    assert spool.pending() == []
    assert not spool.corrupt_dir.exists() and (tmp_path / "spool" / "ls_1.json").exists()
    assert "held by another process" in caplog.text
    monkeypatch.setattr(pathlib.Path, "read_text", real)
    assert [i.lease_id for i in spool.pending()] == ["ls_1"]


def test_a_spooled_result_held_for_a_moment_is_read(windows, monkeypatch, tmp_path):
    spool = Spool(tmp_path / "spool", "http://c")
    spool.put("ls_1", "job-1", {"jobId": "job-1"})
    monkeypatch.setattr(pathlib.Path, "read_text", _held(pathlib.Path.read_text, 2, "ls_1.json"))
    assert [i.lease_id for i in spool.pending()] == ["ls_1"]
