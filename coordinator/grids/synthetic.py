"""Small grids in GEBCO's layout, written with netCDF4, whose answers are known exactly: for
tests, the benchmark and anyone trying the routes without a GEBCO download. Nothing here is
presented as real: the files say ``synthetic`` in their title.

``write_pair`` writes an elevation file (``lat``, ``lon`` of cell centres, ``elevation``
int16 metres) and its TID file (``tid``, one byte) over a box at a given cell size, the
values given as functions of the cells' centre longitudes and latitudes (arrays).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

Field = Callable[[np.ndarray, np.ndarray], np.ndarray]


def axes(west: float, south: float, east: float, north: float, cell_deg: float) -> tuple[np.ndarray, np.ndarray]:
    nlon, nlat = round((east - west) / cell_deg), round((north - south) / cell_deg)
    return (south + (np.arange(nlat) + 0.5) * cell_deg, west + (np.arange(nlon) + 0.5) * cell_deg)


def write_pair(folder: Path, box: tuple[float, float, float, float], cell_deg: float, elevation: Field,
               tid: Field, *, fmt: str = "NETCDF3_CLASSIC", tid_dtype: str = "i1", descending: bool = False,
               fill: int | None = None, name: str = "synthetic") -> tuple[Path, Path]:
    """Write ``{name}.nc`` and ``{name}_tid.nc`` into ``folder``; row blocks at a time, so a
    large synthetic grid never sits in memory whole."""
    import netCDF4

    folder.mkdir(parents=True, exist_ok=True)
    lats, lons = axes(*box, cell_deg)
    if descending:
        lats = lats[::-1]
    paths = (folder / f"{name}.nc", folder / f"{name}_tid.nc")
    chunk = {} if fmt.startswith("NETCDF3") else {"zlib": True, "complevel": 1,
                                                   "chunksizes": (min(240, lats.size), min(240, lons.size))}
    for path, var, dtype, field in ((paths[0], "elevation", "i2", elevation), (paths[1], "tid", tid_dtype, tid)):
        with netCDF4.Dataset(str(path), "w", format=fmt) as ds:
            ds.title = f"{name}: a synthetic grid in the GEBCO layout (not real bathymetry)"
            ds.createDimension("lat", lats.size)
            ds.createDimension("lon", lons.size)
            la = ds.createVariable("lat", "f8", ("lat",))
            lo = ds.createVariable("lon", "f8", ("lon",))
            la.units, lo.units = "degrees_north", "degrees_east"
            la[:], lo[:] = lats, lons
            kw = {"fill_value": fill} if fill is not None and var == "elevation" else {}
            v = ds.createVariable(var, dtype, ("lat", "lon"), **chunk, **kw)
            if var == "elevation":
                v.units = "m"
            step = max(1, 2_000_000 // max(lons.size, 1))
            for r in range(0, lats.size, step):
                la_blk = lats[r:r + step]
                lon2, lat2 = np.meshgrid(lons, la_blk)
                v[r:r + step, :] = np.asarray(field(lon2, lat2)).astype(dtype)
    return paths
