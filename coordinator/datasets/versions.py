"""The record of every load (``dataset_versions``): created when a load starts, finished
or failed when it ends, and read by the answers that name the version they came from."""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import func, select, update

from coordinator.core.db import Database
from coordinator.core.db.models import DatasetVersion
from coordinator.core.honesty import SourceReport
from coordinator.core.times import iso

LOADING, READY, FAILED = "loading", "ready", "failed"
DROPPED = "dropped"            # its rows and files deleted by ``sis datasets drop``, its record kept
BAD_SAMPLES_KEPT = 20          # the first bad records' reasons kept with the version


@dataclass(frozen=True)
class Extent:
    """West, south, east, north in degrees (WGS 84). West greater than east is an extent
    across the antimeridian, as RFC 7946 writes such a box (an extract of Fiji: 177 to
    -178): its longitudes run east from ``west`` through 180 to ``east`` (``arc_holds``)."""

    west: float
    south: float
    east: float
    north: float

    def as_list(self) -> list[float]:
        return [self.west, self.south, self.east, self.north]


def arc_span(west: float, east: float) -> float:
    """Degrees of longitude from ``west`` eastwards to ``east`` (through 180 when west > east)."""
    return east - west if west <= east else east - west + 360.0


def arc_holds(west: float, east: float, lo: float, hi: float, slack: float = 0.0) -> bool:
    """Whether the longitudes ``lo``..``hi`` (a box that does not cross 180) lie in the arc
    ``west``..``east`` widened by ``slack`` each side."""
    span = arc_span(west, east) + 2 * slack
    return span >= 360.0 or (lo - (west - slack)) % 360.0 + (hi - lo) <= span + 1e-9


def arc_meets(west: float, east: float, lo: float, hi: float) -> bool:
    """Whether the longitudes ``lo``..``hi`` (not crossing 180) share any with the arc."""
    span = arc_span(west, east)
    return span >= 360.0 or (lo - west) % 360.0 <= span or (west - lo) % 360.0 <= hi - lo


class Reach:
    """The narrowest longitudes holding every point and box a load accepted, and their
    latitudes. Plain minima and maxima give a load spanning 180 (points at 179.9 and
    -179.9) the whole band round the Earth but its own ground; the same read in 0-360
    degrees gives it the 0.2 degrees it has. Both are kept as records come, and the
    narrower one is the extent (``box``)."""

    __slots__ = ("plain", "shifted")

    def __init__(self) -> None:
        self.plain: list[float] | None = None     # west, south, east, north in -180..180
        self.shifted: list[float] | None = None   # west, east in 0..360; None once a box spans 0 there

    def add(self, w: float, s: float, e: float, n: float) -> None:
        w3, e3 = (w + 360.0 if w < 0 else w), (e + 360.0 if e < 0 else e)
        if self.plain is None:
            self.plain, self.shifted = [w, s, e, n], ([w3, e3] if w3 <= e3 else None)
            return
        b = self.plain
        if w < b[0]:
            b[0] = w
        if s < b[1]:
            b[1] = s
        if e > b[2]:
            b[2] = e
        if n > b[3]:
            b[3] = n
        t = self.shifted
        if t is not None:
            if w3 > e3:              # a box across 0 degrees: the 0-360 reading cannot hold it
                self.shifted = None
            else:
                if w3 < t[0]:
                    t[0] = w3
                if e3 > t[1]:
                    t[1] = e3

    def box(self) -> tuple[float, float, float, float] | None:
        if self.plain is None:
            return None
        w, s, e, n = self.plain
        t = self.shifted
        if t is not None and t[1] - t[0] < e - w:
            w, e = (t[0] - 360.0 if t[0] > 180.0 else t[0]), (t[1] - 360.0 if t[1] > 180.0 else t[1])
        return (w, s, e, n)


def _now() -> datetime:
    return datetime.now(timezone.utc)


async def create(db: Database, kind: str, *, source: str, license: str, file_name: str,
                 file_bytes: int | None) -> DatasetVersion:
    """Record a load as it starts (state ``loading``), in its own transaction, so that a
    load that never ends is still there to see."""
    version = DatasetVersion(kind=kind, state=LOADING, source=source, license=license, file_name=file_name,
                             file_bytes=file_bytes, sha256=None, loaded_at=_now(), finished_at=None,
                             records=0, bad_records=0, bad_samples=[], error=None)
    async with db.write() as s:
        s.add(version)
        await s.flush()
        version.folder = f"{kind}/{version.id}-{secrets.token_hex(4)}"
    return version


def missing_files(data_dir: str | Path, version: DatasetVersion) -> str:
    """What an answer says of a ready version whose folder this process cannot find: where it looked,
    absolute (``var/data`` is relative to each process's working folder, and an ingest run from
    another folder put its files where the server never looks), and that no retry finds them."""
    return (f"the files of {version.kind} version {version.id} are not in {Path(folder_of(data_dir, version)).resolve()} "
            "(SIS_DATA_DIR): every coordinator must see the folder `sis ingest` wrote them to")


def folder_of(data_dir: str | Path, version: DatasetVersion) -> Path:
    """Where a version of a kind that keeps files keeps them: the folder its load named
    (``KIND/ID-TOKEN``, unique, so that a database made afresh beside the data directory
    of another never takes that one's files for its own, nor fails on its folders), or
    ``KIND/ID`` for versions loaded before migration 0018."""
    return Path(data_dir) / (version.folder or f"{version.kind}/{version.id}")


async def _end(db: Database, version_id: int, **values) -> DatasetVersion:  # noqa: ANN003
    """End a load still ``loading``; one dropped meanwhile (``sis datasets drop --crashed``
    while it ran after all) stays dropped, and is returned as it is."""
    async with db.write() as s:
        await s.execute(update(DatasetVersion).where(DatasetVersion.id == version_id, DatasetVersion.state == LOADING)
                        .values(finished_at=_now(), **values))
        return (await s.execute(select(DatasetVersion).where(DatasetVersion.id == version_id))).scalar_one()


async def finish(db: Database, version_id: int, *, sha256: str, records: int, bad_records: int,
                 bad_samples: list[str], extent: Extent | None) -> DatasetVersion:
    """Mark a load ready, with what it found; from now on it may be served."""
    box = extent.as_list() if extent else [None] * 4
    return await _end(db, version_id, state=READY, sha256=sha256, records=records, bad_records=bad_records,
                      bad_samples=bad_samples[:BAD_SAMPLES_KEPT], west=box[0], south=box[1], east=box[2],
                      north=box[3])


async def fail(db: Database, version_id: int, error: str, *, sha256: str | None = None, records: int = 0,
               bad_records: int = 0, bad_samples: list[str] | None = None) -> DatasetVersion:
    """Mark a load failed, with why and how far it got; it is never served."""
    return await _end(db, version_id, state=FAILED, error=error, sha256=sha256, records=records,
                      bad_records=bad_records, bad_samples=(bad_samples or [])[:BAD_SAMPLES_KEPT])


async def list_versions(db: Database, kind: str | None = None) -> list[DatasetVersion]:
    """Every version (of one kind), oldest first."""
    q = select(DatasetVersion).order_by(DatasetVersion.id)
    if kind is not None:
        q = q.where(DatasetVersion.kind == kind)
    async with db.read() as s:
        return list((await s.execute(q)).scalars())


async def all_ready(db: Database, versions: list[DatasetVersion]) -> bool:
    """Whether every one of these versions is still ready: one dropped (``sis datasets drop``) while an
    answer read it had its rows deleted under the reads, and the answer, built from what was left
    (nothing disappeared, nothing unchanged), was cached as if whole."""
    ids = [v.id for v in versions]
    if not ids:
        return True
    async with db.read() as s:
        ready = (await s.execute(select(func.count()).select_from(DatasetVersion).where(
            DatasetVersion.id.in_(ids), DatasetVersion.state == READY))).scalar_one()
    return ready == len(ids)


async def newest_ready(db: Database, kind: str, n: int = 1) -> list[DatasetVersion]:
    """The ``n`` newest ready versions of a kind, newest first (trends compare the two
    newest). Ids grow with every load, so they order loads even when clocks do not."""
    q = (select(DatasetVersion).where(DatasetVersion.kind == kind, DatasetVersion.state == READY)
         .order_by(DatasetVersion.id.desc()).limit(n))
    async with db.read() as s:
        return list((await s.execute(q)).scalars())


def extent_of(version: DatasetVersion) -> list[float] | None:
    if version.west is None:
        return None
    return [version.west, version.south, version.east, version.north]


def provenance(version: DatasetVersion) -> dict:
    """What an answer names of the dataset version it came from."""
    if version.state != READY:
        raise ValueError(f"dataset version {version.id} is {version.state}: only ready versions are served")
    return {"dataset": version.kind, "version": version.id,
            "loadedAt": iso(version.loaded_at),
            "license": version.license, "sha256": version.sha256}


DEMO_PREFIX = "demo: "     # the source of a load made by ``sis serve --demo`` (synthetic data) begins so


def is_demo(version: DatasetVersion) -> bool:
    return version.source.startswith(DEMO_PREFIX)


def report(version: DatasetVersion) -> SourceReport:
    """A ready version as the source an answer read: named by its provenance, and marked
    demo when ``--demo`` loaded it, so its answers carry the demo caveat like every
    bundled sample's."""
    return SourceReport(f"dataset:{version.kind}", version.license, ok=True, records=version.records,
                        dataset=provenance(version), demo=is_demo(version))


async def current(db: Database, kind: str) -> tuple[DatasetVersion | None, SourceReport]:
    """The newest ready version of ``kind`` and the health report an answer from it carries:
    the version named (``provenance``), or, when none was loaded, an unusable source saying
    which command loads one, so that an answer over no data says so instead of "none"."""
    newest = await newest_ready(db, kind)
    if not newest:
        return None, SourceReport(f"dataset:{kind}", "n/a", ok=False, absent=True,
                                  error=f"no {kind} dataset has been loaded: sis ingest {kind} FILE")
    v = newest[0]
    return v, report(v)
