"""The agent's log file and lock file refused by the host (audit h17, N4, N5 and the lock):
a log file that cannot be opened or written costs neither the agent nor the console, and a
lock file of another user's is named. The refusals are faked (CI may run as root, which file
permissions do not stop)."""
from __future__ import annotations

import errno
import logging
import os

from node_agent import cli
from node_agent.config import Config, Paths


def _close_handlers() -> None:
    for name in cli.LOGGERS:
        logger = logging.getLogger(name)
        for h in list(logger.handlers):
            logger.removeHandler(h)
            h.close()


def test_a_log_file_that_cannot_be_opened_logs_to_the_console_only(monkeypatch, tmp_path, capsys):
    """A 28-line PermissionError traceback at start, and exit 1."""
    paths = Paths(tmp_path, tmp_path).ensure()
    log_file = paths.log_dir / "sis-node.log"

    def refused(self):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), self.baseFilename)
    monkeypatch.setattr(cli.RotatingLog, "_open", refused)
    try:
        cli.setup_logging(paths, Config(), console=True)
        logging.getLogger("sis.node.test").info("still said")
        err = capsys.readouterr().err
    finally:
        _close_handlers()
    lines = err.splitlines()
    assert len(lines) == 2 and "Traceback" not in err
    assert lines[0].endswith(f"WARNING the log file {log_file} cannot be opened (Permission denied); logging to "
                             "the console only")
    assert lines[1].endswith("INFO still said")


class _Disk:
    """The log file's stream, its writes refused with ENOSPC while ``full``."""

    def __init__(self):
        self.full = True

    def wrap(self, stream):
        disk = self

        class Stream:
            def write(self, text):
                if disk.full:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                return stream.write(text)

            def flush(self):
                if disk.full:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                stream.flush()

            def tell(self):             # flushes first, as a real stream's does
                self.flush()
                return stream.tell()

            def seek(self, *a):
                self.flush()
                return stream.seek(*a)

            def close(self):
                stream.close()
        return Stream()


def test_a_full_log_disk_is_said_once_and_file_logging_resumes(monkeypatch, tmp_path, capsys):
    """Each record printed a 14-line '--- Logging error ---' (200 records, 3,000 lines)."""
    paths = Paths(tmp_path, tmp_path).ensure()
    log_file = paths.log_dir / "sis-node.log"
    cli.setup_logging(paths, Config(), console=True)
    log = logging.getLogger("sis.node.test")
    try:
        log.info("before")
        disk = _Disk()
        handler = next(h for h in logging.getLogger("sis.node").handlers if isinstance(h, cli.RotatingLog))
        handler.stream = disk.wrap(handler.stream)
        real_open = cli.RotatingLog._open
        monkeypatch.setattr(cli.RotatingLog, "_open", lambda self: disk.wrap(real_open(self)))
        for i in range(200):
            log.info("line %03d", i)
        err = capsys.readouterr().err
        assert "--- Logging error ---" not in err and "Traceback" not in err
        assert err.count("\n") == 202          # "before", the 200 records on the console, one line about the file
        assert err.count(f"sis-node: the log file {log_file} cannot be written (No space left on device; free some "
                         f"space); logging to the console only until it can") == 1
        disk.full = False                       # the volunteer frees some space
        log.info("after")
        log.info("and on")
        err = capsys.readouterr().err
        assert err.count(f"sis-node: the log file {log_file} is written again") == 1
    finally:
        _close_handlers()
    text = log_file.read_text(encoding="utf-8")
    assert "before" in text and "after" in text and "and on" in text
    assert "line 1" not in text                 # dropped from the file: they were on the console
    assert text.count("the log file could not be written for a while") == 1


def test_a_lock_file_of_another_user_is_named(monkeypatch, tmp_path, capsys):
    """It said the data folder cannot be written, which it can."""
    home = tmp_path / "home"
    monkeypatch.setenv("SIS_NODE_HOME", str(home))
    home.mkdir()
    lock = home / "agent.lock"
    lock.write_text("")
    real_open = os.open

    def refusing(path, flags, *a, **k):
        if str(path) == str(lock):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, flags, *a, **k)
    monkeypatch.setattr(os, "open", refusing)
    assert cli.main(["run"]) == cli.EXIT_CONFIG
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"sis-node: the lock file {lock} cannot be opened (Permission denied): it belongs to "
                          f"another user or is read-only")
