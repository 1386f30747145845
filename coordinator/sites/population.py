"""A gridded population dataset (people per cell), kept as a file and read in windows.

The format loaded is the Esri ASCII grid (``.asc``), in which WorldPop and GHSL publish
their population counts: a header of ``ncols``, ``nrows``, ``xllcorner`` or ``xllcenter``,
``yllcorner`` or ``yllcenter``, ``cellsize`` (or GDAL's ``dx`` and ``dy``) and an optional
``NODATA_value``, then ``nrows`` rows of ``ncols`` numbers, north row first. Each cell holds
the people counted in it (not a density), in WGS84 degrees.

Why a file and not rows: a country at 3 arc-seconds is hundreds of millions of cells, and a
brief or a score only ever reads the small window under its area. The load parses the text
once into a float32 ``.npy`` in the version's folder of the data directory (NaN where the grid
has no value), which is then memory-mapped, so a window is read without reading the rest.

A sum over an area weights each cell by the share of it inside the area (population assumed
even within a cell): exact for a bbox, by a 4 x 4 point sample of each cell for a circle.
Cells without a value (the grid's NODATA: water, outside the producer's mask) are counted
apart, never as zero people: the answer says how much of the area had no value.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, TextIO

import numpy as np

KIND = "population"
LICENSE = "CC-BY-4.0"          # WorldPop and GHS-POP are both published under CC BY 4.0
GRID_FILE = "population.npy"
MANIFEST_FILE = "manifest.json"
EARTH_R = 6_371_008.8
HEADER_KEYS = ("ncols", "nrows", "xllcorner", "xllcenter", "yllcorner", "yllcenter", "cellsize", "dx", "dy",
               "nodata_value")
SUBSAMPLE = 4


@dataclass(frozen=True)
class Header:
    ncols: int
    nrows: int
    west: float
    south: float
    dx: float
    dy: float
    nodata: float | None

    @property
    def east(self) -> float:
        return self.west + self.ncols * self.dx

    @property
    def north(self) -> float:
        return self.south + self.nrows * self.dy

    def as_json(self) -> dict:
        return {"ncols": self.ncols, "nrows": self.nrows, "west": self.west, "south": self.south,
                "dx": self.dx, "dy": self.dy, "nodata": self.nodata}


def _corner(found: dict, axis: str, step: float) -> float:
    """The grid's lower-left edge on one axis, from ``?llcorner`` or half a cell below ``?llcenter``."""
    if f"{axis}llcorner" in found:
        return found[f"{axis}llcorner"]
    if f"{axis}llcenter" in found:
        return found[f"{axis}llcenter"] - step / 2
    raise ValueError(f"not an Esri ASCII grid: no {axis}llcorner or {axis}llcenter")


def read_header(lines: TextIO) -> tuple[Header, str | None]:
    """The header, and the first data line already read (None if the file ends)."""
    found: dict[str, float] = {}
    while True:
        line = lines.readline()
        if not line:
            first = None
            break
        parts = line.split()
        if not parts:
            continue
        key = parts[0].lower()
        if key not in HEADER_KEYS:
            first = line
            break
        if len(parts) != 2:
            raise ValueError(f"header line {line.strip()!r} is not 'key value'")
        found[key] = float(parts[1])
    for need in ("ncols", "nrows"):
        if need not in found:
            raise ValueError(f"not an Esri ASCII grid: no {need} in the header")
    dx = found.get("dx", found.get("cellsize"))
    dy = found.get("dy", found.get("cellsize"))
    if dx is None or dy is None or dx <= 0 or dy <= 0:
        raise ValueError("not an Esri ASCII grid: no positive cellsize (or dx and dy) in the header")
    ncols, nrows = int(found["ncols"]), int(found["nrows"])
    if ncols <= 0 or nrows <= 0 or ncols != found["ncols"] or nrows != found["nrows"]:
        raise ValueError("ncols and nrows must be positive whole numbers")
    west, south = _corner(found, "x", dx), _corner(found, "y", dy)
    head = Header(ncols, nrows, west, south, dx, dy, found.get("nodata_value"))
    if not (-180 - 1e-9 <= head.west and head.east <= 180 + 1e-9 and -90 - 1e-9 <= head.south
            and head.north <= 90 + 1e-9):
        raise ValueError(f"the grid [{head.west}, {head.south}, {head.east}, {head.north}] is not in "
                         "WGS84 degrees (a projected grid is not taken)")
    return head, first


def write_npy(lines: TextIO, out: Path, on_row=None) -> tuple[Header, int, int]:  # noqa: ANN001
    """Parse an ``.asc`` into ``out`` (float32, NaN where NODATA); returns the header, the
    cells with a value and the cells without one. A row of the wrong length, a value that
    is not a finite number or a negative count fails the load: a grid cannot skip a row."""
    head, first = read_header(lines)
    grid = np.lib.format.open_memmap(out, mode="w+", dtype=np.float32, shape=(head.nrows, head.ncols))
    values: list[float] = []
    row = 0
    pending = [first] if first is not None else []

    def rows() -> Iterable[str]:
        yield from pending
        yield from lines

    for line in rows():
        values.extend(line.split())
        while len(values) >= head.ncols:
            if row >= head.nrows:
                raise ValueError(f"more than nrows={head.nrows} rows of values")
            try:
                arr = np.array(values[:head.ncols], dtype=np.float64)
            except ValueError:
                raise ValueError(f"row {row + 1}: a value is not a number") from None
            del values[:head.ncols]
            if not np.all(np.isfinite(arr)) or np.any(np.abs(arr) > np.finfo(np.float32).max):
                raise ValueError(f"row {row + 1}: a value is not a finite number (inf, nan, or past float32)")
            if head.nodata is not None:
                arr[arr == head.nodata] = np.nan
            if np.any(arr < 0):
                raise ValueError(f"row {row + 1}: a negative count of people")
            grid[row] = arr
            row += 1
            if on_row is not None:
                on_row(row)
    if values or row != head.nrows:
        raise ValueError(f"{row} full rows of values where the header says nrows={head.nrows}")
    grid.flush()
    missing = int(np.isnan(grid).sum())
    del grid
    return head, head.nrows * head.ncols - missing, missing


@dataclass
class Window:
    """The cells under a box: their counts (NaN: no value) and their centres."""

    values: np.ndarray          # (rows, cols), north row first
    lats: np.ndarray            # centre latitude of each row
    lons: np.ndarray            # centre longitude of each column
    dx: float
    dy: float


class Grid:
    """A loaded version's grid, memory-mapped."""

    def __init__(self, folder: Path) -> None:
        meta = json.loads((folder / MANIFEST_FILE).read_text())
        h = meta["header"]
        self.header = Header(h["ncols"], h["nrows"], h["west"], h["south"], h["dx"], h["dy"], h["nodata"])
        self.cells = np.load(folder / GRID_FILE, mmap_mode="r")

    def window(self, box: tuple[float, float, float, float]) -> Window:
        """The cells any part of which lies in ``box`` (w, s, e, n)."""
        h = self.header
        w, s, e, n = box
        c0 = max(0, int(math.floor((w - h.west) / h.dx)))
        c1 = min(h.ncols, int(math.ceil((e - h.west) / h.dx)))
        r0 = max(0, int(math.floor((h.north - n) / h.dy)))
        r1 = min(h.nrows, int(math.ceil((h.north - s) / h.dy)))
        values = np.asarray(self.cells[r0:r1, c0:c1], dtype=np.float64) if r1 > r0 and c1 > c0 \
            else np.zeros((0, 0))
        lats = h.north - (np.arange(r0, r1) + 0.5) * h.dy
        lons = h.west + (np.arange(c0, c1) + 0.5) * h.dx
        return Window(values, lats, lons, h.dx, h.dy)


@dataclass(frozen=True)
class Sum:
    people: float               # over the cells with a value, weighted by their share in the area
    area_km2: float             # of the area
    no_value_km2: float         # of the part of the area over cells without a value
    cells: int                  # cells touched
    cell_km2: float             # a cell's area at the area's latitude

    @property
    def no_value_share(self) -> float:
        return self.no_value_km2 / self.area_km2 if self.area_km2 else 0.0


def _km2(lat: np.ndarray | float, dx: float, dy: float) -> np.ndarray | float:
    m = math.radians(1) * EARTH_R
    return dx * dy * m * m * np.cos(np.radians(lat)) / 1e6


def _overlap(centres: np.ndarray, half: float, lo: float, hi: float) -> np.ndarray:
    return np.clip(np.minimum(centres + half, hi) - np.maximum(centres - half, lo), 0, None) / (2 * half)


def sum_box(win: Window, box: tuple[float, float, float, float]) -> Sum:
    """People in a bbox: each cell by the exact share of it inside."""
    w, s, e, n = box
    share = np.outer(_overlap(win.lats, win.dy / 2, s, n), _overlap(win.lons, win.dx / 2, w, e))
    return _sum(win, share)


def sum_circle(win: Window, lat: float, lon: float, radius_m: float) -> Sum:
    """People in a circle: each cell by the share of a 4 x 4 sample of its points inside."""
    k = SUBSAMPLE
    offs = (np.arange(k) + 0.5) / k - 0.5
    ys = (win.lats[:, None] + offs[None, :] * win.dy)            # (rows, k)
    xs = (win.lons[:, None] + offs[None, :] * win.dx)            # (cols, k)
    m = math.radians(1) * EARTH_R
    dy_m = (ys - lat) * m
    dx_m = (xs - lon) * m * math.cos(math.radians(lat))
    inside = (dy_m[:, None, :, None] ** 2 + dx_m[None, :, None, :] ** 2) <= radius_m ** 2   # (r, c, k, k)
    share = inside.mean(axis=(2, 3)) if inside.size else np.zeros(win.values.shape)
    return _sum(win, share)


def _sum(win: Window, share: np.ndarray) -> Sum:
    if win.values.size == 0:
        return Sum(0.0, 0.0, 0.0, 0, 0.0)
    cell_km2 = np.broadcast_to(np.asarray(_km2(win.lats, win.dx, win.dy))[:, None], share.shape)
    missing = np.isnan(win.values)
    area = float((share * cell_km2).sum())
    no_value = float((share * cell_km2)[missing].sum())
    people = float(np.nansum(np.where(missing, 0.0, win.values) * share))
    return Sum(people, area, no_value, int((share > 0).sum()), float(cell_km2.mean()))


def write_asc(path: Path, west: float, south: float, cellsize: float, rows: list[list[float | None]],
              nodata: float = -9999) -> None:
    """Write an Esri ASCII grid (rows north first; None is NODATA): tests and the demo make
    their small population files with it."""
    with open(path, "w") as f:
        f.write(f"ncols {len(rows[0])}\nnrows {len(rows)}\nxllcorner {west!r}\nyllcorner {south!r}\n"
                f"cellsize {cellsize!r}\nNODATA_value {nodata:g}\n")
        for r in rows:
            f.write(" ".join(f"{nodata:g}" if v is None else f"{v:g}" for v in r) + "\n")
