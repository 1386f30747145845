"""One agent per data folder: an OS lock on ``agent.lock`` in the data folder, held for the agent's life.

Two agents on one data folder share its journal, spool and identity: the second
took the first's live job for one "leased before a restart", ran it, and its
result was refused. ``sis-node run`` takes this lock before anything else and
exits at once when another agent holds it (``AlreadyRunning``, whose message
names that agent's process id).

The lock is the operating system's (``fcntl.flock`` on POSIX, ``msvcrt.locking``
on Windows), never the file's existence: the system drops it when its process
ends, however it ends, so a crashed agent leaves nothing that blocks the next
start. The file stays (deleting it on exit would let two agents lock two
different files of one name); it only holds the pid of the agent that holds the
lock, for the message. Read-only commands (``status``, ``settings``, ``pause``,
``resume``) never take the lock: taking it even for a moment could turn away an
agent starting then.

The platform modules are imported where used, so importing this module is safe
on every platform.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

WINDOWS = os.name == "nt"
# Windows locks are mandatory: another process cannot read locked bytes. The pid is written at
# the start of the file, and the byte locked lies far beyond it (locking past the end of a file
# is allowed there), so a second agent can still read who holds the lock.
WINDOWS_LOCK_OFFSET = 1 << 20


class AlreadyRunning(Exception):
    """Another agent holds the data folder's lock; ``pid`` is its process id (None if unknown)."""

    def __init__(self, path: Path, pid: int | None):
        self.path, self.pid = path, pid
        super().__init__(f"another sis-node is already running with this data folder "
                         f"(pid {pid if pid is not None else 'unknown'})")


def _try_lock(fd: int) -> bool:
    """Take the lock on ``fd`` without waiting; False when another process holds it."""
    if WINDOWS:
        import msvcrt
        os.lseek(fd, WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _unlock(fd: int) -> None:
    if WINDOWS:
        import msvcrt
        os.lseek(fd, WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        return
    import fcntl
    fcntl.flock(fd, fcntl.LOCK_UN)


def holder(path: Path) -> int | None:
    """The pid written in the lock file (of the agent holding it, or of the last one), if any."""
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class DataLock:
    """The data folder's lock, held from ``acquire()`` until ``release()`` or the process ends."""

    def __init__(self, path: Path):
        self.path = Path(path)      # ``Paths.lock_file``: agent.lock in the data folder
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> "DataLock":
        """Take the lock, or raise ``AlreadyRunning`` at once if another agent holds it."""
        if self._fd is not None:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Not O_TRUNC: the file of an agent that holds the lock keeps its pid for our message.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o600)
        try:
            locked = _try_lock(fd)
        except BaseException:
            os.close(fd)
            raise
        if not locked:
            os.close(fd)
            raise AlreadyRunning(self.path, holder(self.path))
        with contextlib.suppress(OSError):   # the pid is for the message only; the lock is what counts
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        self._fd = fd
        return self

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)      # no pid: no agent holds it now
                _unlock(fd)
        finally:
            os.close(fd)

    def __enter__(self) -> "DataLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
