"""Where a loaded bathymetry grid lives and how answers open it.

A ``bathymetry`` load keeps its two files in its version's folder of the data directory,
``SIS_DATA_DIR/bathymetry/VERSION/`` (``elevation.nc``, ``tid.nc`` and ``manifest.json``
with what the load found: the files' names, the TID file's checksum, the grid's shape,
its title and the citation GEBCO asks for). The dataset version row names the load; the
folder holds the data, so no table and no migration. Every coordinator serving the routes
must see the same folder (a shared mount where several run).

An open grid is kept per process and version (``services.extras``), so each answer reads
only its window; a newer ready version is opened on the first answer after it is loaded.
The first answer after the current version changed (a newer one loaded, or this one
dropped) forgets the grid it replaces, whose files close once the last answer reading
it is done (``Grid.__del__``): a dropped version's disk space comes back without a
restart.

Every open compares the files' sizes with those the load recorded in the manifest, and
every answer from an open grid compares them with those it was opened at (two stats): a file
cut short (a full disk, a copy interrupted) is "not usable", and answers say its depths are
unknown, as for a folder that is missing, never the zeros netCDF reads where bytes are gone.
"""
from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.core.honesty import SourceReport
from coordinator.datasets import versions

from .reader import Grid, GridDamaged, GridFormatError

KIND = "bathymetry"
LICENSE = "public-domain"
ELEVATION_FILE, TID_FILE, MANIFEST_FILE = "elevation.nc", "tid.nc", "manifest.json"
DOIS = {2025: "10.5285/37c52e96-24ea-67ce-e063-7086abc05f29"}   # UPSTREAMS.md §2.7
_EXTRA = "bathymetry_grids"
SIZES = ((ELEVATION_FILE, "elevationBytes"), (TID_FILE, "tidBytes"))
log = logging.getLogger("sis.grids")
_said: set[str] = set()        # each damaged grid logged once per process, not at every answer




def citation(title: str, file_name: str) -> str:
    """The citation GEBCO asks for, with the grid's year read from its title or file name;
    said plainly where neither gives one (a synthetic grid, a renamed file)."""
    m = re.search(r"GEBCO[ _]?((?:19|20)\d\d)", f"{title} {file_name}", re.IGNORECASE)
    if not m:
        return ("GEBCO Compilation Group, GEBCO Grid (the file names no GEBCO release; cite the release it "
                "came from)")
    year = int(m.group(1))
    doi = f" (doi:{DOIS[year]})" if year in DOIS else ""
    return f"GEBCO Compilation Group ({year}) GEBCO {year} Grid{doi}"


@dataclass
class Loaded:
    """The grid an answer reads, with its version's report and manifest; ``grid`` is None
    (and ``report`` unusable, saying why) when none can be read."""

    grid: Grid | None
    report: SourceReport
    manifest: dict[str, Any]
    license: str
    sizes: tuple[int, ...] = ()    # the files' sizes when opened: a file cut short since is seen


def _sizes(folder: Path) -> tuple[int, ...]:
    return tuple(os.stat(folder / name).st_size for name, _ in SIZES)


def check_sizes(folder: Path, manifest: dict[str, Any]) -> tuple[int, ...]:
    """The files' sizes, or ``GridDamaged`` where one is not the size its load wrote (recorded
    in the manifest since this check came; a grid loaded before has none, and a classic
    netCDF file's size is then checked against its header by the reader)."""
    sizes = _sizes(folder)
    for (name, key), have in zip(SIZES, sizes):
        want = manifest.get(key)
        if isinstance(want, int) and have != want:
            how = "cut short (a full disk, a copy interrupted)" if have < want else "changed since"
            raise GridDamaged(f"{name} is {have} bytes where its load wrote {want}: {how}")
    return sizes


async def current(services: Any) -> Loaded:
    version, report = await versions.current(services.db, KIND)
    folder = None if version is None else versions.folder_of(services.settings.data_dir, version)
    grids: dict[Path, Loaded] | None = services.extras.get(_EXTRA)
    if grids is None:
        grids = services.extras[_EXTRA] = {}

        async def close() -> None:
            close_all(services)

        services._closers.append(close)       # closed with the process's other resources
    for other in [f for f in grids if f != folder]:
        del grids[other]                       # no longer current: closed once no answer reads it
    if version is None:
        report.error = f"no {KIND} grid has been loaded: sis ingest {KIND} GRID.nc --tid TID.nc"
        return Loaded(None, report, {}, LICENSE)
    hit = grids.get(folder)
    if hit is not None:
        try:
            same = _sizes(folder) == hit.sizes      # two stats: a file cut short or gone meanwhile is seen
        except OSError:
            same = False
        if same:
            return hit
        # Closed now, not when the last answer lets it go: HDF5 hands a file still open to the next
        # open of its path, so the reopen below would read the old state instead of the file's.
        del grids[folder]
        if hit.grid is not None:
            hit.grid.close_now()
    try:
        manifest = json.loads((folder / MANIFEST_FILE).read_text())
        sizes = check_sizes(folder, manifest)
        grid = Grid(folder / ELEVATION_FILE, folder / TID_FILE)
    except FileNotFoundError:
        bad = SourceReport(report.name, version.license, ok=False, dataset=report.dataset, absent=True,
                           error=versions.missing_files(services.settings.data_dir, version))
        return Loaded(None, bad, {}, version.license)     # not kept: the folder may be mounted later
    except GridDamaged as exc:
        error = (f"the files of {KIND} version {version.id} in {folder.resolve()} (SIS_DATA_DIR) are not usable: "
                 f"{exc}; load the grid again (sis ingest {KIND} GRID.nc --tid TID.nc)")
        if error not in _said:
            _said.add(error)
            log.error("%s", error)
        bad = SourceReport(report.name, version.license, ok=False, dataset=report.dataset, absent=True,
                           error=error)                   # absent as a missing folder: no retry mends it
        return Loaded(None, bad, {}, version.license)     # not kept: a copy put back is read at the next answer
    except (OSError, ValueError, GridFormatError) as exc:
        bad = SourceReport(report.name, version.license, ok=False, dataset=report.dataset,
                           error=f"the files of {KIND} version {version.id} cannot be read from "
                                 f"{folder} (SIS_DATA_DIR): {exc}")
        return Loaded(None, bad, {}, version.license)     # not kept: the folder may be mounted later
    loaded = grids[folder] = Loaded(grid, report, manifest, version.license, sizes)
    return loaded


def close_all(services: Any) -> None:
    for loaded in services.extras.pop(_EXTRA, {}).values():
        if loaded.grid is not None:
            loaded.grid.close()
