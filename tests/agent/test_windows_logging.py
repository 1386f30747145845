"""The log's rollover refused, as on Windows while another process holds the log file open (audit h13)."""
from __future__ import annotations

import errno
import logging
import os

from node_agent import cli
from node_agent.config import Config, Paths


def _held_rename(monkeypatch, held: dict):
    real_rename = os.rename

    def rename(src, dst, *a, **k):
        if held["on"] and str(src).endswith("sis-node.log"):
            e = PermissionError(errno.EACCES, "The process cannot access the file because it is being used by "
                                              "another process")
            e.winerror = 32
            raise e
        return real_rename(src, dst, *a, **k)
    monkeypatch.setattr(os, "rename", rename)


def test_a_refused_rollover_loses_no_record_and_is_tried_again(monkeypatch, tmp_path, capsys):
    paths = Paths(tmp_path, tmp_path).ensure()
    cli.setup_logging(paths, Config(log_max_bytes=2000, log_backups=2), console=False)
    log = logging.getLogger("sis.node.test")
    held = {"on": True}
    _held_rename(monkeypatch, held)
    clock = [1000.0]
    monkeypatch.setattr(cli.time, "monotonic", lambda: clock[0])
    try:
        for i in range(60):
            log.info("line %03d %s", i, "x" * 60)
        text = (tmp_path / "logs" / "sis-node.log").read_text(encoding="utf-8")
        assert all(f"line {i:03d}" in text for i in range(60))
        assert "--- Logging error ---" not in capsys.readouterr().err
        assert text.count("the log file could not be rotated") == 1      # once, not at every record
        assert not (tmp_path / "logs" / "sis-node.log.1").exists()

        held["on"] = False                  # let go; a minute later the rollover is tried again
        clock[0] += cli.RotatingLog.retry_s
        log.info("after")
        assert (tmp_path / "logs" / "sis-node.log.1").exists()
        assert "line 059" in (tmp_path / "logs" / "sis-node.log.1").read_text(encoding="utf-8")
        assert (tmp_path / "logs" / "sis-node.log").read_text(encoding="utf-8").strip().endswith("after")
    finally:
        for h in logging.getLogger("sis.node").handlers:
            h.close()
