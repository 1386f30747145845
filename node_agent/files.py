"""Durable writes: a file is either its old content or its new content, never half of either.

Write to a temporary file in the same folder, fsync it, rename it over the
target (atomic on POSIX and on Windows via ``os.replace``), then fsync the
folder so the rename itself survives a power cut.

On Windows a file another process holds open (``sis-node status`` reading it, an
antivirus scan, a file deleted there and still open) can be neither replaced nor
deleted nor, sometimes, opened: the call raises PermissionError (WinError 5 or 32)
until that process lets go, mostly within milliseconds. Such calls are retried for
up to half a second (``busy_retried``) before the error is let through.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

T = TypeVar("T")

# ERROR_ACCESS_DENIED (a file being deleted, or open elsewhere without FILE_SHARE_DELETE, as
# Python's own open() leaves it), ERROR_SHARING_VIOLATION, ERROR_LOCK_VIOLATION.
_WINDOWS_BUSY = frozenset({5, 32, 33})
BUSY_RETRY_S = 0.5


def windows_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is Windows saying that another process holds the file for now."""
    return (sys.platform == "win32" and isinstance(exc, PermissionError)
            and getattr(exc, "winerror", None) in _WINDOWS_BUSY)


def busy_retried(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``call(*args, **kwargs)``, retried for up to ``BUSY_RETRY_S`` while Windows says the file is
    held by another process (``windows_busy``); any other error, or that one past the time, is raised."""
    deadline = time.monotonic() + BUSY_RETRY_S
    delay = 0.005
    while True:
        try:
            return call(*args, **kwargs)
        except PermissionError as exc:
            if not windows_busy(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def _fsync_dir(folder: Path) -> None:
    if os.name == "nt":  # Windows cannot open a folder for fsync; NTFS journals the rename
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Durably replace ``path`` with ``data``; the file is created with ``mode`` (user-only by default)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # O_BINARY: on Windows os.open opens in text mode unless told, and os.write then writes each
    # LF as CRLF (the bytes a reader gets back, and a digest of them, would differ).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0), mode)
    try:
        try:
            view = memoryview(data)
            while view:                 # os.write may write less than asked
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, mode)  # the umask may have narrowed or the file existed with other bits
        busy_retried(os.replace, tmp, path)
    except BaseException as exc:
        # A full disk (ENOSPC) left the half-written temporary file behind, taking the space
        # a retry needs; the target is untouched either way.
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename in (None, tmp, str(tmp)):
            # os.write's ENOSPC names no file, os.open's the temporary one: the target named here,
            # the job loop says which file cannot be written and goes on (``Agent._run``), where it
            # took an unnamed one for a fault of its own and stopped.
            exc.filename = str(path)
        raise
    _fsync_dir(path.parent)


def why_not_written(exc: OSError) -> str:
    """A write's failure in words for a volunteer: the system's reason, and what to do for a full disk."""
    why = exc.strerror or str(exc) or type(exc).__name__
    return why + ("; free some space" if exc.errno == errno.ENOSPC else "")


def write_json(path: Path, doc: Any, mode: int = 0o600) -> None:
    write_atomic(path, json.dumps(doc, indent=1, sort_keys=True).encode(), mode)


def read_json(path: Path) -> Any | None:
    """The JSON in ``path``, or None when it does not exist or cannot be read as JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None


class Unreadable(Exception):
    """A file that exists and does not hold what it should; the message names it and why."""


def read_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when there is no such file. A file that exists and
    is not a JSON object (empty, cut short, ``"y"``, ``[1]``, unreadable) raises ``Unreadable``:
    ``read_json`` answers None for it as for no file, and a caller that took it for a first
    run made a new identity over the node's enrolment, or a caller that used it as an object
    raised AttributeError in ``sis-node status``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:     # permissions, a folder, bytes that are not UTF-8
        raise Unreadable(f"{path} cannot be read ({exc.__class__.__name__}: {exc})") from None
    try:
        doc = json.loads(text)
    except ValueError:
        raise Unreadable(f"{path} is not JSON" + (" (it is empty)" if not text.strip() else "")) from None
    if not isinstance(doc, dict):
        raise Unreadable(f"{path} does not hold a JSON object")
    return doc


def remove(path: Path) -> None:
    try:
        busy_retried(path.unlink)
    except FileNotFoundError:
        return
    _fsync_dir(path.parent)
