"""The ``bathymetry`` dataset kind: a GEBCO elevation grid and its type-identifier grid
(netCDF), loaded by ``sis ingest bathymetry GEBCO_2025.nc --tid GEBCO_2025_TID.nc``.

The files are kept, not turned into rows: each is copied into the version's folder of the
data directory (``versions.folder_of``), the elevation file through ``load.open`` so it is
checksummed in the same pass, then both are opened and checked to be one grid (axes,
variables, types) without reading their cells. The manifest records both copies' sizes
(``elevationBytes``, ``tidBytes``), which every open compares (``store.current``): a file cut
short since (a full disk, a restore interrupted) is refused, not read as zeros. The
elevation file's sha256 is the version's; neither checksum is taken again at open (some
0.4 GB/s: 20 s for GEBCO's global grid, at every process's first answer). The version's records are the grid's cells
and its extent the grid's edges. A load that fails removes its folder. GeoTIFF tiles are
not taken: reading them in windows needs GDAL (rasterio), a heavy dependency for a format
GEBCO also publishes as netCDF.
"""
from __future__ import annotations

import hashlib
import json
import shutil

from coordinator.datasets.ingest import CHUNK
from coordinator.datasets.kinds import dataset_kind

from .reader import Grid, sniff
from .store import ELEVATION_FILE, KIND, LICENSE, MANIFEST_FILE, TID_FILE, citation


@dataset_kind(KIND, description="GEBCO elevation grid (netCDF) with its TID grid (--tid)", license=LICENSE,
              suffixes=(".nc",), companions={"tid": "the grid's type-identifier (TID) grid, netCDF"})
async def load(load) -> None:  # noqa: ANN001
    tid_path = load.companions["tid"]
    if not tid_path.name.lower().endswith(".nc"):
        raise ValueError(f"--tid {tid_path.name}: a TID grid ends with .nc")
    for given in (load.path, tid_path):      # checked as given, so that a refusal names the operator's file,
        sniff(given)                         # not the copy it is read from
    folder = load.folder()
    try:
        with load.open() as src, open(folder / ELEVATION_FILE, "wb") as out:
            shutil.copyfileobj(src, out, CHUNK)
        sha = hashlib.sha256()
        with open(tid_path, "rb") as src, open(folder / TID_FILE, "wb") as out:
            while chunk := src.read(CHUNK):
                sha.update(chunk)
                out.write(chunk)
        grid = Grid(folder / ELEVATION_FILE, folder / TID_FILE)
        try:
            title = str(getattr(grid.elev.ds, "title", ""))
            manifest = {"elevationFile": load.path.name, "tidFile": tid_path.name, "tidSha256": sha.hexdigest(),
                        "elevationBytes": (folder / ELEVATION_FILE).stat().st_size,
                        "tidBytes": (folder / TID_FILE).stat().st_size,
                        "rows": grid.lat.n, "columns": grid.lon.n, "cellDeg": grid.lat.step,
                        "wrapsAntimeridian": grid.wraps, "title": title,
                        "citation": citation(title, load.path.name)}
            w, s, e, n = grid.extent
            load.accepted(grid.cells, bbox=(w, s, e, n))
        finally:
            grid.close()
        (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
