"""``sis datasets drop``: what a version stored deleted, its record kept.

Every load is kept, and a region's map extract is a million rows or more: loaded again
each month, old versions fill the disk though answers read only the newest that holds
their box (and trends the one before). Dropping a version deletes what its kind stored
for it (its rows, through the kind's ``discard``; the folder of a kind that keeps files)
and marks its record ``dropped``, so ``sis datasets list`` still says what was loaded,
when and from where, and an answer that named the version names one the list shows.

The record is marked first, in its own transaction: from then on no answer reads the
version, and a drop cut short (the process killed mid-delete) is finished by running it
again, since dropping a dropped version deletes whatever is left of it."""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select, update

from coordinator.core.db import Database
from coordinator.core.db.models import DatasetVersion

from . import versions
from .kinds import KINDS, KindRegistry


class DropError(Exception):
    """A version that cannot be dropped as asked; nothing was changed."""


@dataclass
class Dropped:
    version: DatasetVersion
    was: str                         # its state before: dropped already means only what was left is deleted now
    folder: Path | None              # the files' folder removed, if the version had one
    newest: DatasetVersion | None    # the newest ready version of its kind afterwards

    @property
    def again(self) -> bool:
        return self.was == versions.DROPPED


async def check(db: Database, ids: list[int], *, crashed: bool = False,
                registry: KindRegistry = KINDS) -> list[DatasetVersion]:
    """The versions ``ids`` name, in that order, once each; ``DropError`` naming the first
    that cannot be dropped, before anything is changed: an id no version has, a version of
    a kind this coordinator does not know (its rows could not be found), or one still
    ``loading`` unless ``crashed`` says its load is known to have stopped (a load that is
    running writes on while its rows are deleted)."""
    async with db.read() as s:
        found = {v.id: v for v in (await s.execute(select(DatasetVersion).where(DatasetVersion.id.in_(ids)))).scalars()}
    out = []
    for i in dict.fromkeys(ids):
        v = found.get(i)
        if v is None:
            raise DropError(f"no dataset version {i} (sis datasets list shows them)")
        if registry.get(v.kind) is None:
            raise DropError(f"version {i} is of kind {v.kind!r}, which this coordinator does not know: "
                            "what it stored cannot be found to delete")
        if v.state == versions.LOADING and not crashed:
            raise DropError(f"version {i} of {v.kind} is still loading, or its load stopped without ending it: "
                            "if no `sis ingest` is running, drop it with --crashed")
        out.append(v)
    return out


async def drop(db: Database, version: DatasetVersion, data_dir: str | Path | None,
               registry: KindRegistry = KINDS) -> Dropped:
    """Mark ``version`` dropped, then delete its rows and its folder (checked by ``check``).

    A folder is deleted only where it is the version's own: one its load named (migration
    0018), or ``KIND/ID`` of a version that became ready. A load before 0018 that failed on
    ``File exists`` had found another database's version there, and left it alone."""
    was = version.state
    if was != versions.DROPPED:
        async with db.write() as s:
            await s.execute(update(DatasetVersion).where(DatasetVersion.id == version.id)
                            .values(state=versions.DROPPED))
    kind = registry.get(version.kind)
    if kind is not None and kind.discard is not None:
        await kind.discard(db, version.id)
    folder = None
    if data_dir is not None and (version.folder is not None or was == versions.READY):
        candidate = versions.folder_of(data_dir, version)
        if candidate.is_dir():
            shutil.rmtree(candidate)
            folder = candidate
    async with db.read() as s:
        version = (await s.execute(select(DatasetVersion).where(DatasetVersion.id == version.id))).scalar_one()
    newest = await versions.newest_ready(db, version.kind)
    return Dropped(version, was, folder, newest[0] if newest else None)
