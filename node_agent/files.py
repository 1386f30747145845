"""Durable writes: a file is either its old content or its new content, never half of either.

Write to a temporary file in the same folder, fsync it, rename it over the
target (atomic on POSIX and on Windows via ``os.replace``), then fsync the
folder so the rename itself survives a power cut.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


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
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, mode)  # the umask may have narrowed or the file existed with other bits
    os.replace(tmp, path)
    _fsync_dir(path.parent)


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


def remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        return
    _fsync_dir(path.parent)
