"""A GEBCO grid pair on disk (elevation and type identifier), read in windows.

GEBCO publishes its grid as netCDF: 1-D ``lat`` and ``lon`` of cell centres (the grid is
cell-registered: a value is the cell's, and the cell spans half a step either side) and a
2-D ``elevation`` (int16 metres, negative below sea level) over (lat, lon); the TID file
has the same axes and a 1-byte ``tid``. The user-area files are netCDF-3 classic and the
global ones HDF5-based netCDF-4; ``netCDF4.Dataset`` reads both, and reads only the
hyperslab a slice asks for, so a window costs its own size whatever the file's.

Nothing here reads a grid whole: ``window`` reads one rectangle of cells (statistics),
``values_at`` reads cells through a small cache of fixed tiles (profiles and points,
whose cells are scattered along a line). Rows are indexed south to north whatever order
the file keeps them in; columns wrap around the antimeridian when the grid spans the whole
circle. Missing cells (the variable's ``_FillValue``) come back as NaN elevation and -1
type identifier. The netCDF library is not safe to call from several threads at once, so
every read holds the grid's lock.
"""
from __future__ import annotations

import contextlib
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ELEVATION_NAMES = ("elevation", "z")
TID_NAMES = ("tid",)
LAT_NAMES = ("lat", "latitude", "y")
LON_NAMES = ("lon", "longitude", "x")
TILE = 128                 # cells per side of a cached tile
TILES_KEPT = 256           # some 12 MB of tiles per grid


class GridFormatError(ValueError):
    """A file that is not a GEBCO-layout grid, said in one line."""


@dataclass(frozen=True)
class Axis:
    """A regular axis of cell centres, ascending: the first centre, the step, the count."""

    first: float
    step: float
    n: int

    @property
    def low_edge(self) -> float:
        return self.first - self.step / 2

    @property
    def high_edge(self) -> float:
        return self.first + (self.n - 0.5) * self.step


def _axis(values: np.ndarray, name: str) -> tuple[Axis, bool]:
    """The regular axis of a coordinate variable and whether the file keeps it descending."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size < 2:
        raise GridFormatError(f"'{name}' must be a 1-D axis of at least two cell centres")
    descending = v[1] < v[0]
    if descending:
        v = v[::-1]
    step = (v[-1] - v[0]) / (v.size - 1)
    if not step > 0 or np.max(np.abs(np.diff(v) - step)) > step * 1e-3:
        raise GridFormatError(f"'{name}' is not a regular monotonic axis")
    return Axis(float(v[0]), float(step), int(v.size)), bool(descending)


def _var(ds, names: tuple[str, ...], what: str):  # noqa: ANN001, ANN202
    for n in names:
        if n in ds.variables:
            return ds.variables[n]
    raise GridFormatError(f"no {what} variable (looked for {', '.join(names)}; the file has "
                          f"{', '.join(ds.variables) or 'none'})")


def sniff(path: Path) -> str:
    """``netcdf3`` or ``netcdf4`` by the file's magic bytes; GridFormatError for anything else."""
    with open(path, "rb") as f:
        head = f.read(8)
    if head[:3] == b"CDF" and head[3:4] in (b"\x01", b"\x02", b"\x05"):
        return "netcdf3"
    if head == b"\x89HDF\r\n\x1a\n":
        return "netcdf4"
    raise GridFormatError(f"{path.name} is not a netCDF file (it starts {head[:4]!r})")


class GridDamaged(GridFormatError):
    """A grid file whose size is not the one its load wrote or its header describes: cut short
    (a full disk, a copy interrupted) or changed since; its cells cannot be trusted."""


_NC_TYPE_BYTES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 4, 6: 8, 7: 1, 8: 2, 9: 4, 10: 8, 11: 8}


def classic_size(path: Path) -> int | None:
    """The size in bytes a netCDF-3 file (CDF-1, CDF-2 or CDF-5) must have at least, from its
    header: where its last variable's data ends. None where the header cannot be read this way
    (left to the netCDF library to judge).

    The netCDF library reads a classic file cut short without a word, the missing cells as
    zeros (an elevation of 0 m, "at sea level", for a cell 1000 m deep), where an HDF5-based
    netCDF-4 file cut short is refused at open. Reading only the header, this costs a few
    hundred bytes whatever the grid's size."""
    import struct

    try:
        with open(path, "rb") as f:
            data = f.read(1 << 20)            # a GEBCO header is a few kilobytes
        version = data[3]
        off = 4
        big = version == 5                    # CDF-5: 64-bit counts and dimension ids

        def take(n: int) -> bytes:
            nonlocal off
            if off + n > len(data):
                raise ValueError("header past the bytes read")
            b = data[off:off + n]
            off += n
            return b

        def u32() -> int:
            return struct.unpack(">I", take(4))[0]

        def count() -> int:
            return struct.unpack(">Q", take(8))[0] if big else u32()

        def name() -> None:
            n = count()
            take((n + 3) // 4 * 4)

        def attributes() -> None:
            tag, n = u32(), count()
            if tag not in (0, 0x0C):
                raise ValueError("not an attribute list")
            for _ in range(n):
                name()
                size = _NC_TYPE_BYTES[u32()] * count()
                take((size + 3) // 4 * 4)

        numrecs = count()
        tag, ndims = u32(), count()
        if tag not in (0, 0x0A):
            return None
        dims = []
        for _ in range(ndims):
            name()
            dims.append(count())
        attributes()
        tag, nvars = u32(), count()
        if tag not in (0, 0x0B):
            return None
        fixed_end, record_vars = 0, []
        for _ in range(nvars):
            name()
            ids = [count() for _ in range(count())]
            attributes()
            size = _NC_TYPE_BYTES[u32()]
            vsize = count()
            begin = struct.unpack(">I" if version == 1 else ">Q", take(4 if version == 1 else 8))[0]
            shape = [dims[i] for i in ids]
            if shape and shape[0] == 0:        # a record variable: its data comes record by record
                for n in shape[1:]:
                    size *= n
                record_vars.append((begin, size, vsize))
            else:
                for n in shape:
                    size *= n
                fixed_end = max(fixed_end, begin + size)
        if record_vars and numrecs not in (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF) and numrecs > 0:
            recsize = record_vars[0][1] if len(record_vars) == 1 else sum(v for _, _, v in record_vars)
            fixed_end = max(fixed_end, max(b + (numrecs - 1) * recsize + s for b, s, _ in record_vars))
        return fixed_end
    except (OSError, ValueError, KeyError, IndexError, struct.error):
        return None


def hdf5_size(path: Path) -> int | None:
    """The size in bytes an HDF5-based netCDF-4 file must have, from its superblock's
    end-of-file address (versions 0 to 3, at the file's start as netCDF writes it), or None
    where it cannot be read this way. HDF5 refuses such a file cut short, and netCDF says only
    "HDF error": this says how short it is, once the open has failed (never a reason to refuse
    a file the library opens)."""
    import struct

    try:
        with open(path, "rb") as f:
            head = f.read(128)
        version = head[8]
        if version in (0, 1):
            size_o = head[13]
            at = 24 + (4 if version == 1 else 0)        # base address, after the fixed fields
        elif version in (2, 3):
            size_o = head[9]
            at = 12
        else:
            return None
        fmt = {4: ">I", 8: ">Q"}.get(size_o)
        if fmt is None:
            return None
        fmt = "<" + fmt[1:]                              # HDF5 is little-endian
        base = struct.unpack_from(fmt, head, at)[0]
        eof = struct.unpack_from(fmt, head, at + 2 * size_o)[0]     # after the free-space or extension address
        return base + eof
    except (OSError, IndexError, struct.error):
        return None


class _Layer:
    """One 2-D variable of one open file, read in windows of ascending rows."""

    def __init__(self, path: Path, names: tuple[str, ...], what: str) -> None:
        import netCDF4

        fmt = sniff(path)
        if fmt == "netcdf3":
            self._whole(path, classic_size(path))
        try:
            self.ds = netCDF4.Dataset(str(path), "r")
        except OSError as exc:
            self._whole(path, hdf5_size(path))
            raise GridFormatError(f"{path.name}: netCDF cannot open it ({exc})") from None
        self.ds.set_auto_maskandscale(False)
        try:
            self.var = _var(self.ds, names, what)
            lat_v, lon_v = _var(self.ds, LAT_NAMES, "latitude"), _var(self.ds, LON_NAMES, "longitude")
            self.lat, self.lat_desc = _axis(lat_v[:], lat_v.name)
            self.lon, lon_desc = _axis(lon_v[:], lon_v.name)
            if lon_desc:
                raise GridFormatError(f"{path.name}: longitudes run west-ward; GEBCO grids run east-ward")
            if self.var.dimensions != (lat_v.dimensions[0], lon_v.dimensions[0]):
                raise GridFormatError(f"{path.name}: '{self.var.name}' is over {self.var.dimensions}, "
                                      f"not ({lat_v.name}, {lon_v.name})")
            if not np.issubdtype(self.var.dtype, np.integer) and not np.issubdtype(self.var.dtype, np.floating):
                raise GridFormatError(f"{path.name}: '{self.var.name}' is not numeric")
            self.fill = getattr(self.var, "_FillValue", None)
            self.dtype = self.var.dtype
        except BaseException:
            self.ds.close()
            raise

    @staticmethod
    def _whole(path: Path, need: int | None) -> None:
        have = path.stat().st_size
        if need is not None and have < need:
            raise GridDamaged(f"{path.name} is {have} bytes where its header describes {need}: cut short "
                              "(a full disk, a copy interrupted)")

    def read(self, i0: int, i1: int, c0: int, c1: int) -> np.ndarray:
        """Rows i0..i1 (south to north), file columns c0..c1 (within the file)."""
        n = self.lat.n
        if self.lat_desc:
            return np.asarray(self.var[n - i1:n - i0, c0:c1])[::-1]
        return np.asarray(self.var[i0:i1, c0:c1])

    def close(self) -> None:
        if self.ds.isopen():
            self.ds.close()


class Grid:
    """An elevation grid and its TID grid, checked to share their axes."""

    def __init__(self, elevation: Path, tid: Path) -> None:
        self._lock = threading.Lock()
        self.elev = _Layer(Path(elevation), ELEVATION_NAMES, "elevation")
        try:
            self.tid = _Layer(Path(tid), TID_NAMES, "type identifier (tid)")
        except BaseException:
            self.elev.close()
            raise
        try:
            for a, b, name in ((self.elev.lat, self.tid.lat, "latitudes"), (self.elev.lon, self.tid.lon, "longitudes")):
                if a.n != b.n or abs(a.first - b.first) > a.step / 100 or abs(a.step - b.step) > a.step * 1e-6:
                    raise GridFormatError(f"the elevation and TID grids have different {name} "
                                          f"({a.n} from {a.first:g} by {a.step:g} against {b.n} from {b.first:g})")
            if not np.issubdtype(self.tid.dtype, np.integer):
                raise GridFormatError("the TID grid's 'tid' is not an integer variable")
        except BaseException:
            self.close()
            raise
        self.lat, self.lon = self.elev.lat, self.elev.lon
        self.wraps = abs(self.lon.n * self.lon.step - 360) < self.lon.step / 2
        self._tiles: OrderedDict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = OrderedDict()

    # -- geometry -------------------------------------------------------------
    @property
    def extent(self) -> tuple[float, float, float, float]:
        """West, south, east, north edges of the grid's cells, in degrees."""
        return (self.lon.low_edge, max(self.lat.low_edge, -90.0), self.lon.high_edge, min(self.lat.high_edge, 90.0))

    @property
    def cells(self) -> int:
        return self.lat.n * self.lon.n

    def shift_for(self, lon: float) -> float:
        """The multiple of 360 to add to ``lon`` so that it falls in the grid's longitudes
        (a grid may run -180..180 or 0..360)."""
        return -360.0 * math.floor((lon - self.lon.low_edge) / 360.0)

    def column(self, lon: np.ndarray) -> np.ndarray:
        """Column (float, in cell units from the west edge) of longitudes already shifted
        into the grid's range; may exceed the grid where it wraps."""
        return (lon - self.lon.low_edge) / self.lon.step

    def row(self, lat: np.ndarray) -> np.ndarray:
        return (lat - self.lat.low_edge) / self.lat.step

    # -- reading --------------------------------------------------------------
    def window(self, i0: int, i1: int, j0: int, j1: int) -> tuple[np.ndarray, np.ndarray]:
        """Elevation (float, NaN where missing) and TID (int16, -1 where missing) of rows
        i0..i1 and columns j0..j1; columns outside 0..n wrap where the grid spans the
        circle (a ring across the antimeridian) and must lie inside it otherwise."""
        i0, i1 = max(i0, 0), min(i1, self.lat.n)
        pieces = self._column_pieces(j0, j1)
        with self._lock:
            elev = [self.elev.read(i0, i1, a, b) for a, b in pieces]
            tid = [self.tid.read(i0, i1, a, b) for a, b in pieces]
        return self._elevation(np.concatenate(elev, axis=1)), self._tid(np.concatenate(tid, axis=1))

    def _column_pieces(self, j0: int, j1: int) -> list[tuple[int, int]]:
        n = self.lon.n
        if not self.wraps:
            if j0 < 0 or j1 > n:
                raise ValueError(f"columns {j0}..{j1} lie outside a grid of {n} that does not wrap")
            return [(j0, j1)]
        pieces, j = [], j0
        while j < j1:
            start = j % n
            take = min(j1 - j, n - start)
            pieces.append((start, start + take))
            j += take
        return pieces

    def _elevation(self, raw: np.ndarray) -> np.ndarray:
        out = raw.astype(np.float64)
        if self.elev.fill is not None:
            out[raw == self.elev.fill] = np.nan
        return out

    def _tid(self, raw: np.ndarray) -> np.ndarray:
        out = raw.astype(np.int16)               # codes 0..72 read alike from a signed or unsigned byte
        if self.tid.fill is not None:
            out[raw == self.tid.fill] = -1
        return out

    def values_at(self, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Elevation and TID of scattered cells (rows inside the grid; columns inside it or,
        where the grid wraps, taken round the circle), read through the tile cache."""
        cols = cols % self.lon.n if self.wraps else cols
        elev = np.empty(rows.shape, dtype=np.float64)
        tid = np.empty(rows.shape, dtype=np.int16)
        ti, tj = rows // TILE, cols // TILE
        keys = np.unique(np.stack([ti.ravel(), tj.ravel()], axis=1), axis=0)
        with self._lock:                          # the tile cache and the files alike
            for a, b in keys:
                e, t = self._tile(int(a), int(b))
                sel = (ti == a) & (tj == b)
                r, c = rows[sel] - a * TILE, cols[sel] - b * TILE
                elev[sel], tid[sel] = e[r, c], t[r, c]
        return elev, tid

    def _tile(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        key = (a, b)
        hit = self._tiles.get(key)
        if hit is not None:
            self._tiles.move_to_end(key)
            return hit
        i0, j0 = a * TILE, b * TILE
        i1, j1 = min(i0 + TILE, self.lat.n), min(j0 + TILE, self.lon.n)
        e, t = self.elev.read(i0, i1, j0, j1), self.tid.read(i0, i1, j0, j1)
        tile = (self._elevation(e), self._tid(t))
        self._tiles[key] = tile
        if len(self._tiles) > TILES_KEPT:
            self._tiles.popitem(last=False)
        return tile

    def close(self) -> None:
        """Close both files (again: nothing). Also done when the grid is let go: the store
        forgets a grid that is no longer current, and the last answer reading it lets it go."""
        if hasattr(self, "elev"):
            self.elev.close()
        if hasattr(self, "tid"):
            self.tid.close()

    def close_now(self) -> None:
        """Close both files once no read is under way (a changed file: see ``store.current``);
        an answer still holding the grid then fails rather than reads a closed file."""
        with self._lock:
            self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):     # at interpreter exit the library may be gone already
            self.close()
