"""The spool keeps every result durably until it is acknowledged."""
from __future__ import annotations

import os
import stat

from node_agent.files import write_atomic
from node_agent.spool import Spool


def test_a_spooled_result_survives_a_restart_and_leaves_on_acknowledgement(tmp_path):
    s = Spool(tmp_path / "spool")
    s.put("ls_1", "job-1", {"jobId": "job-1"}, {"photos": 3})
    s.put("ls_2", "job-2", {"jobId": "job-2"})
    again = Spool(tmp_path / "spool")  # a new process sees the same files
    pending = again.pending()
    assert [p.job_id for p in pending] == ["job-1", "job-2"]
    assert pending[0].stats == {"photos": 3}
    again.attempted(pending[0])
    assert Spool(tmp_path / "spool").get("ls_1").attempts == 1
    again.acknowledged(pending[0])
    assert [p.job_id for p in Spool(tmp_path / "spool").pending()] == ["job-2"]


def test_spool_files_are_the_users_own_and_no_temporary_file_is_left(tmp_path):
    s = Spool(tmp_path / "spool")
    item = s.put("ls_1", "job-1", {"jobId": "job-1"})
    assert stat.S_IMODE(os.stat(item.path).st_mode) == 0o600
    assert [p.name for p in (tmp_path / "spool").iterdir()] == ["ls_1.json"]


def test_atomic_write_keeps_the_old_content_when_the_new_one_never_lands(tmp_path, monkeypatch):
    target = tmp_path / "f.json"
    write_atomic(target, b"old")

    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", boom)
    try:
        write_atomic(target, b"new")
    except OSError:
        pass
    assert target.read_bytes() == b"old"


def test_a_refused_result_is_kept_aside_with_its_reason_and_never_resent(tmp_path):
    s = Spool(tmp_path / "spool")
    item = s.put("ls_1", "job-1", {"jobId": "job-1"})
    s.rejected(item, "422: facts[0] outside the area")
    assert s.pending() == []
    kept = list(s.rejected_dir.glob("*.json"))
    assert len(kept) == 1 and "outside the area" in kept[0].read_text()


def test_an_unreadable_spool_file_is_moved_aside_not_resent_nor_deleted(tmp_path, caplog):
    s = Spool(tmp_path / "spool")
    (tmp_path / "spool" / "ls_bad.json").write_text("{not json")
    assert s.pending() == []
    assert (s.corrupt_dir / "ls_bad.json").exists()
    assert "cannot be read" in caplog.text
