"""Running one load: record the version, hand the file to its kind's loader, checksum
it, and mark the version ready or failed.

The file is checksummed as the loader reads it (``Load.open`` hashes what passes
through), so a multi-gigabyte extract is read once; a loader that opens the file some
other way, seeks, or stops before the end gets the rest hashed afterwards. Progress is
the share of the file's bytes read (or what the loader reports with ``Load.progress``).
Bad records are counted and the first reasons kept with the version; they are never
dropped silently.
"""
from __future__ import annotations

import asyncio
import hashlib
import io
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol

import sqlalchemy as sa

from coordinator.core.db import Database
from coordinator.core.db.models import DatasetVersion
from . import versions
from .kinds import KINDS, DatasetKind, KindRegistry
from .values import column_limits, not_utf8
from .versions import BAD_SAMPLES_KEPT, Extent, Reach, arc_holds

CHUNK = 1 << 20


class IngestError(Exception):
    """A load that could not be done, said in one line (``kind`` unknown, file missing or
    of a suffix the kind does not take, or the loader failing). ``version`` is the failed
    version when one was recorded; ``usage`` tells a mistake in the command (exit 2)
    from a load that failed (exit 1)."""

    def __init__(self, message: str, *, version: DatasetVersion | None = None, usage: bool = False) -> None:
        super().__init__(message)
        self.version = version
        self.usage = usage


class Progress(Protocol):
    """Where a load reports how far it got (a progress bar, or nothing)."""

    def advance(self, done: int, total: int | None) -> None: ...

    def counts(self, records: int, bad: int) -> None: ...

    def close(self) -> None: ...


class NoProgress:
    """Progress for loads nobody watches (tests, a pipe): every report is dropped."""

    def advance(self, done: int, total: int | None) -> None:
        """Dropped: nothing shows progress."""

    def counts(self, records: int, bad: int) -> None:
        """Dropped: the version row keeps the counts."""

    def close(self) -> None:
        """Nothing to close."""


def _declared_as_meant(declared: tuple[float, float, float, float],
                       reach: tuple[float, float, float, float] | None) -> tuple[float, float, float, float]:
    """A declared box as its file meant it. libosmium keeps an extract's header box as
    minima and maxima, so a box across 180 (Fiji: 177 to -178) comes back as -178 to 177,
    the rest of the world: where that box excludes the file's own records and the same box
    read across 180 holds them, it is read across 180."""
    w, s, e, n = declared
    if reach is None or w > e:
        return declared
    rw, _, re, _ = reach
    if not arc_holds(w, e, rw, rw) and arc_holds(e, w, rw, rw) and arc_holds(e, w, re, re):
        return (e, s, w, n)
    return declared


class _HashingReader(io.RawIOBase):
    """The file as a forward-only stream that hashes every byte read through it."""

    def __init__(self, path: Path, on_read) -> None:  # noqa: ANN001
        self._f = open(path, "rb")  # noqa: SIM115 - closed by close()
        self._on_read = on_read
        self.sha = hashlib.sha256()
        self.done = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, buf) -> int:  # noqa: ANN001
        n = self._f.readinto(buf)
        if n:
            self.sha.update(memoryview(buf)[:n])
            self.done += n
            self._on_read(self.done)
        return n

    def close(self) -> None:
        self._f.close()
        super().close()


@dataclass
class Load:
    """One load as its kind's loader sees it."""

    kind: DatasetKind
    path: Path
    version_id: int
    db: Database
    file_bytes: int
    _progress: Progress
    license: str = ""              # the version's license (the kind's, or the one given to ``sis ingest``)
    records: int = 0
    bad_records: int = 0
    bad_samples: list[str] = field(default_factory=list)
    _reach: Reach = field(default_factory=Reach)
    _declared: tuple[float, float, float, float] | None = None
    _reader: _HashingReader | None = None
    _read_elsewhere: bool = False
    companions: dict[str, Path] = field(default_factory=dict)   # the kind's companion files, by option
    data_dir: Path | None = None
    folder_name: str = ""          # the version's folder, relative to ``data_dir``

    def folder(self) -> Path:
        """This version's own folder in the data directory (``versions.folder_of``),
        made empty, for a kind that keeps files rather than rows (a grid read in windows)."""
        if self.data_dir is None:
            raise RuntimeError(f"a {self.kind.name} load keeps files: it needs a data directory (SIS_DATA_DIR)")
        folder = Path(self.data_dir) / (self.folder_name or f"{self.kind.name}/{self.version_id}")
        folder.mkdir(parents=True, exist_ok=False)
        return folder

    def open(self, *, text: bool = False) -> io.BufferedReader | io.TextIOWrapper:
        """The file, to be read once from start to end; it is checksummed as it is read.
        ``text=True`` gives UTF-8 text lines (a byte-order mark is skipped)."""
        if self._reader is not None:
            self._read_elsewhere = True      # opened twice: hash the file on its own at the end
            raw = _HashingReader(self.path, lambda _n: None)
        else:
            raw = self._reader = _HashingReader(self.path, lambda n: self._progress.advance(n, self.file_bytes))
        buffered = io.BufferedReader(raw, CHUNK)
        # Undecodable bytes are kept as lone surrogates: a record holding one is counted bad
        # (``values.not_utf8``), never the end of the load.
        return (io.TextIOWrapper(buffered, encoding="utf-8-sig", errors="surrogateescape", newline="") if text
                else buffered)

    def progress(self, done: int) -> None:
        """For loaders that read the file some other way than ``open``: how many of its
        bytes they have read."""
        self._read_elsewhere = True
        self._progress.advance(done, self.file_bytes)

    def accepted(self, count: int = 1, *, lon: float | None = None, lat: float | None = None,
                 bbox: tuple[float, float, float, float] | None = None) -> None:
        """Count ``count`` records written, and grow the extent by a point or a box
        (west, south, east, north)."""
        self.records += count
        if lon is not None and lat is not None:
            self._reach.add(lon, lat, lon, lat)
        elif bbox is not None:
            self._reach.add(*bbox)
        if self.records % 1000 == 0 or count > 1:
            self._progress.counts(self.records, self.bad_records)

    def bad(self, where: str, reason: str) -> None:
        """Count a record that could not be loaded, with where it is in the file (``line
        12``, ``feature 40``) and why; the first reasons are kept with the version."""
        self.bad_records += 1
        if len(self.bad_samples) < BAD_SAMPLES_KEPT:
            self.bad_samples.append(f"{where}: {reason}"[:300])
        self._progress.counts(self.records, self.bad_records)

    def declare_extent(self, box: tuple[float, float, float, float]) -> None:
        """The ground the file says it covers (an extract's declared bounds), recorded as
        the version's extent instead of its records' reach: coverage is judged by it."""
        self._declared = box

    @property
    def extent(self) -> Extent | None:
        reach = self._reach.box()
        if self._declared is not None:
            return Extent(*_declared_as_meant(self._declared, reach))
        return Extent(*reach) if reach else None

    def _sha256(self) -> str:
        """The file's checksum: from what ``open`` hashed when the file was read through it
        alone, with the part the loader left unread hashed after; else from a pass of its
        own."""
        r = self._reader
        if r is None or self._read_elsewhere:
            return sha256_of(self.path)
        sha = r.sha.copy()
        with open(self.path, "rb") as f:
            f.seek(r.done)
            while chunk := f.read(CHUNK):
                sha.update(chunk)
        return sha.hexdigest()

    def _close(self) -> None:
        if self._reader is not None and not self._reader.closed:
            self._reader.close()


def sha256_of(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            sha.update(chunk)
    return sha.hexdigest()


def unknown_kind(name: str, registry: KindRegistry = KINDS) -> str:
    names = registry.names()
    if not names:
        return (f"unknown dataset kind {name!r}: no kinds are available yet "
                "(capabilities declare them; see docs/datasets.md)")
    return f"unknown dataset kind {name!r}: available kinds are {', '.join(names)}"


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, sa.exc.StatementError):
        return _refused(exc)
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


_INSERT = re.compile(r"^\s*INSERT INTO\s+(\S+)\s*\(([^)]*)\)", re.IGNORECASE)
SAID_CHARS = 300


def _refused(exc: sa.exc.StatementError) -> str:
    """A statement the database refused, said as the database said it, with the rows being
    written named by their first and last record's ``fid``. Never SQLAlchemy's own message,
    which holds the statement and every parameter: a refused batch printed its 2,000 rows on
    the operator's terminal and into the version's error."""
    said = " ".join(str(exc.orig if exc.orig is not None else exc).split())[:SAID_CHARS]
    m = _INSERT.match(exc.statement or "")
    if not m:
        return f"the database refused a statement: {said}"
    table, columns = m.group(1), [c.strip().strip('"') for c in m.group(2).split(",")]
    rows = exc.params if isinstance(exc.params, list) else [exc.params]
    fids = [f for f in (_fid(r, columns) for r in rows) if f is not None]
    which = (f" ({fids[0]!r:.80})" if len(fids) == 1 else f" (from {fids[0]!r:.80} to {fids[-1]!r:.80})"
             if fids else "")
    return f"the database refused {len(rows)} row{'s' if len(rows) != 1 else ''} of {table}{which}: {said}"


def _fid(row: Any, columns: list[str]) -> Any:
    if isinstance(row, Mapping):
        return row.get("fid")
    if isinstance(row, (tuple, list)) and "fid" in columns and len(row) == len(columns):
        return row[columns.index("fid")]
    return None


_LIMITS = column_limits(DatasetVersion.__table__)


def _kept_name(name: str) -> str:
    """A file's name as its version keeps it: one not UTF-8 (a Latin-1 name on a UTF-8 system,
    which Python reads with its bytes as lone surrogates, and no database stores) with those
    bytes written ``\\xNN``. Kept as it was, the version's row was refused with a traceback."""
    return name if not_utf8(name) is None else os.fsencode(name).decode("utf-8", "backslashreplace")


def _storable(text: str) -> str:
    """A failure's reason as its version keeps it: a file's name not UTF-8, or a NUL an error
    quotes, written with backslashes, so that recording the failure is not refused too."""
    if not_utf8(text) is None:
        return text
    try:
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:          # a lone surrogate that is no undecodable byte
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00")


def _given_text(option: str, value: str | None) -> str | None:
    """Why text given to ``sis ingest`` cannot be kept with the version, or None: refused
    before anything is recorded (PostgreSQL refused it with the version's row)."""
    if value is None:
        return None
    why = not_utf8(value)
    if why:
        return f"--{option}: {why}"
    limit = _LIMITS.get(option)
    if limit is not None and len(value) > limit:
        return f"--{option} is {len(value)} characters, longer than the {limit} a dataset version keeps"
    return None


async def run(db: Database, kind_name: str, path: str | Path, *, license: str | None = None,
              source: str | None = None, progress: Progress | None = None,
              registry: KindRegistry = KINDS, companions: Mapping[str, str | Path | None] | None = None,
              data_dir: str | Path | None = None) -> DatasetVersion:
    """Load ``path`` as ``kind_name`` and return its version, ready; ``IngestError`` (with
    the failed version) when it cannot be loaded. An unknown kind, or companion files the
    kind does not take or misses, record nothing. ``data_dir`` is where kinds that keep
    files keep them (``Load.folder``)."""
    kind = registry.get(kind_name)
    if kind is None:
        raise IngestError(unknown_kind(kind_name, registry), usage=True)
    given = {k: Path(v) for k, v in (companions or {}).items() if v is not None}
    foreign = sorted(set(given) - set(kind.companions))
    if foreign:
        raise IngestError(f"a {kind.name} load takes no --{foreign[0]}" + (
            f" (it takes {', '.join('--' + c for c in kind.companions)})" if kind.companions else ""), usage=True)
    missing = [c for c in kind.companions if c not in given]
    if missing:
        raise IngestError(f"a {kind.name} load needs --{missing[0]} ({kind.companions[missing[0]]})", usage=True)
    for option, value in (("license", license), ("source", source)):
        why = _given_text(option, value)
        if why:
            raise IngestError(why, usage=True)
    path = Path(path)
    progress = progress or NoProgress()
    size = path.stat().st_size if path.is_file() else None
    name = _kept_name(path.name)
    version = await versions.create(db, kind.name, source=source or name, license=license or kind.license,
                                    file_name=name, file_bytes=size)
    if size is None:
        what = "a folder, not a file" if path.is_dir() else "no such file"
        failed = await versions.fail(db, version.id, _storable(f"{path}: {what}"))
        raise IngestError(f"{path}: {what} (version {version.id} marked failed)", version=failed, usage=True)
    if not kind.takes(path.name):
        reason = (f"{path.name}: a {kind.name} file ends with {' or '.join(kind.suffixes)}")
        failed = await versions.fail(db, version.id, _storable(reason))
        raise IngestError(f"{reason} (version {version.id} marked failed)", version=failed, usage=True)

    for option, companion in given.items():
        if not companion.is_file():
            what = "a folder, not a file" if companion.is_dir() else "no such file"
            failed = await versions.fail(db, version.id, _storable(f"--{option} {companion}: {what}"))
            raise IngestError(f"--{option} {companion}: {what} (version {version.id} marked failed)",
                              version=failed, usage=True)

    load = Load(kind=kind, path=path, version_id=version.id, db=db, file_bytes=size, _progress=progress,
                license=version.license, companions=given,
                data_dir=Path(data_dir) if data_dir is not None else None, folder_name=version.folder)
    try:
        await kind.load(load)
        sha = load._sha256()
    except BaseException as exc:   # interrupted or cancelled too: the version must not stay ``loading``
        load._close()
        error = _one_line(exc) if isinstance(exc, Exception) else "interrupted"
        failed = await asyncio.shield(_fail(db, kind, load, error))
        if not isinstance(exc, Exception):
            raise
        where = f" after {load.records} records" if load.records else ""
        raise IngestError(f"loading {path.name} as {kind.name} failed{where}: {error} "
                          f"(version {version.id} marked failed)", version=failed) from exc
    finally:
        progress.counts(load.records, load.bad_records)     # the final counts, not the last thousand's
        progress.close()
    load._close()
    if not load.records:
        # Nothing read is not "nothing there": served, an empty version would replace the one
        # before it and answer every question with none (an empty file, or one of another kind).
        first = f"; the first: {load.bad_samples[0]}" if load.bad_samples else ""
        error = (f"no {kind.name} record could be read from it ({load.bad_records} bad{first}): is it empty, "
                 f"or a file of another kind?")
        failed = await _fail(db, kind, load, error)
        raise IngestError(f"loading {path.name} as {kind.name} failed: {error} (version {version.id} marked failed; "
                          "the version served before it stays served)", version=failed)
    done = await versions.finish(db, version.id, sha256=sha, records=load.records, bad_records=load.bad_records,
                                 bad_samples=load.bad_samples, extent=load.extent)
    if done.state != versions.READY:    # dropped while it loaded: what it wrote after the drop goes too
        if kind.discard is not None:
            await kind.discard(db, version.id)
        if load.data_dir is not None:
            shutil.rmtree(versions.folder_of(load.data_dir, done), ignore_errors=True)
        raise IngestError(f"version {version.id} was dropped while it loaded (sis datasets drop --crashed): "
                          "nothing of it is kept", version=done)
    return done


async def _fail(db: Database, kind: DatasetKind, load: Load, error: str) -> DatasetVersion:
    try:
        sha = sha256_of(load.path)
    except OSError:
        sha = None
    if kind.discard is not None:
        try:
            await kind.discard(db, load.version_id)
        except Exception as exc:  # noqa: BLE001 - the failure is recorded with the first error
            error = f"{error}; discarding its rows failed too: {_one_line(exc)}"
    return await versions.fail(db, load.version_id, _storable(error), sha256=sha, records=load.records,
                               bad_records=load.bad_records, bad_samples=load.bad_samples)
