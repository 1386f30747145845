"""Depth under a point, along a path and under a ring, computed from a ``Grid``.

- A point is answered with its cell's value, as GEBCO published it (cell-registered: the
  value stands for the whole cell), and the cell's TID class.
- A profile samples the great circle legs of a path every ``spacing`` metres (and at its
  end) and interpolates each sample bilinearly between the four cell centres around it.
  A sample's ``measured`` is true only when every cell that weighs in it is a direct
  measurement; its ``tid`` is the nearest cell's class (classes are not interpolated).
- Statistics weigh every cell by its exact spherical area times the share of it inside the
  ring: cells the ring's edge crosses get that share from their intersection with the
  ring, the others are in or out by their centre (the edge does not touch them).

Elevations are GEBCO's (negative below sea level); a depth is minus a negative elevation
and is absent on land. A cell with no value (the grid's fill) is unknown, never zero.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import shapely

from . import classes
from .reader import Grid
from .shapes import geometry_area_m2
from .sphere import EARTH_RADIUS_M, along, band_area_m2, central_angle, unit_vectors

BANDS_M = (0, 200, 1000, 2000, 4000, 6000)          # depth bands: shelf, slope, ..., hadal
_MEASURED_CODES = np.arange(10, 18)
_ESTIMATED_CODES = np.arange(40, 48)


def _lon180(lon: float) -> float:
    return (lon + 180.0) % 360.0 - 180.0


def point(grid: Grid, lon: float, lat: float) -> dict[str, Any] | None:
    """The cell under a point, or None when the point lies outside the grid."""
    x = float(grid.column(np.array(lon + grid.shift_for(lon))))
    y = float(grid.row(np.array(lat)))
    i, j = math.floor(y), math.floor(x)
    if lat >= grid.lat.high_edge and i == grid.lat.n:           # the north edge itself
        i -= 1
    if not 0 <= i < grid.lat.n or (not grid.wraps and not 0 <= j < grid.lon.n):
        return None
    elev, tid = grid.values_at(np.array([i]), np.array([j]))
    e, t = float(elev[0]), int(tid[0])
    cls = classes.tid_class(t) if t >= 0 else None
    return {"elevation": None if math.isnan(e) else e, "tid": cls,
            "cell": {"lon": round(_lon180(grid.lon.first + (j % grid.lon.n) * grid.lon.step), 7),
                     "lat": round(grid.lat.first + i * grid.lat.step, 7), "sizeDeg": grid.lat.step}}


def path_length_m(points: list[tuple[float, float]]) -> tuple[list[float], np.ndarray]:
    v = unit_vectors(np.array([p[0] for p in points]), np.array([p[1] for p in points]))
    return [central_angle(v[k], v[k + 1]) * EARTH_RADIUS_M for k in range(len(points) - 1)], v


def sample_path(points: list[tuple[float, float]], spacing_m: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distances, lons and lats of samples every ``spacing_m`` along the path's great
    circle legs, and its end."""
    legs, v = path_length_m(points)
    total = sum(legs)
    d = np.arange(0.0, total, spacing_m)
    d = np.append(d, total) if not d.size or total - d[-1] > 1e-6 else d
    starts = np.concatenate([[0.0], np.cumsum(legs)])
    lons, lats = np.empty_like(d), np.empty_like(d)
    leg = np.clip(np.searchsorted(starts, d, side="right") - 1, 0, len(legs) - 1)
    for k in np.unique(leg):
        sel = leg == k
        frac = (d[sel] - starts[k]) / legs[k] if legs[k] > 0 else np.zeros(int(sel.sum()))
        lons[sel], lats[sel] = along(v[k], v[k + 1], np.clip(frac, 0, 1))
    return d, lons, lats


def profile(grid: Grid, lons: np.ndarray, lats: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Bilinear elevation at each sample (NaN outside the grid or where a weighing cell is
    missing), whether every weighing cell was measured, and the nearest cell's TID (-1
    where unknown); plus a mask of the samples inside the grid."""
    shifted = lons + np.array([grid.shift_for(float(x)) for x in lons])
    x = grid.column(shifted) - 0.5                 # in cell-centre units
    y = grid.row(lats) - 0.5
    nr, nc = grid.lat.n, grid.lon.n
    inside = (y >= -0.5) & (y <= nr - 0.5)
    if not grid.wraps:
        inside &= (x >= -0.5) & (x <= nc - 0.5)
    y = np.clip(y, 0, nr - 1)
    i0 = np.floor(y).astype(np.int64)
    fy = y - i0
    i1 = np.minimum(i0 + 1, nr - 1)
    if grid.wraps:
        j0 = np.floor(x).astype(np.int64)
        fx = x - j0
        j1 = j0 + 1
    else:
        x = np.clip(x, 0, nc - 1)
        j0 = np.floor(x).astype(np.int64)
        fx = x - j0
        j1 = np.minimum(j0 + 1, nc - 1)
    rows = np.stack([i0, i0, i1, i1], axis=1)
    cols = np.stack([j0, j1, j0, j1], axis=1)
    w = np.stack([(1 - fy) * (1 - fx), (1 - fy) * fx, fy * (1 - fx), fy * fx], axis=1)
    rows, cols = np.where(inside[:, None], rows, 0), np.where(inside[:, None], cols, 0)
    elev, tid = grid.values_at(rows, cols)
    weighs = w > 1e-12
    missing = np.any(weighs & np.isnan(elev), axis=1)
    value = np.nansum(np.where(weighs, w * elev, 0.0), axis=1)
    value = np.where(inside & ~missing, value, np.nan)
    measured = np.all(~weighs | np.isin(tid, _MEASURED_CODES), axis=1) & inside & ~missing
    nearest = np.argmax(w, axis=1)
    near_tid = np.where(inside, tid[np.arange(len(tid)), nearest], -1)
    return value, measured, near_tid, inside


def coverage(grid: Grid, poly: shapely.Polygon) -> dict[str, Any] | None:
    """The cells under a ring (already shifted into the grid's longitudes): their window's
    elevations, TIDs, spherical areas, the share of each inside the ring, and the ring's
    area inside and outside the grid. None when the ring misses the grid."""
    w, s, e, n = poly.bounds
    i0, i1 = max(math.floor(grid.row(np.array(s))), 0), min(math.ceil(grid.row(np.array(n))), grid.lat.n)
    j0, j1 = math.floor(grid.column(np.array(w))), math.ceil(grid.column(np.array(e)))
    if not grid.wraps:
        j0, j1 = max(j0, 0), min(j1, grid.lon.n)
    total_m2 = geometry_area_m2(poly)
    if i1 <= i0 or j1 <= j0:
        return None
    step_x, step_y = grid.lon.step, grid.lat.step
    x_edges = grid.lon.low_edge + np.arange(j0, j1 + 1) * step_x
    y_edges = grid.lat.low_edge + np.arange(i0, i1 + 1) * step_y
    elev, tid = grid.window(i0, i1, j0, j1)
    xc, yc = (x_edges[:-1] + x_edges[1:]) / 2, (y_edges[:-1] + y_edges[1:]) / 2
    shapely.prepare(poly)
    share = shapely.contains_xy(poly, xc[None, :], yc[:, None]).astype(np.float64)
    # Cells the edge may touch: those holding a point of the edge taken every quarter cell,
    # and their neighbours; their share is their exact intersection with the ring.
    edge = shapely.get_coordinates(shapely.segmentize(poly.exterior, min(step_x, step_y) / 4))
    ci = np.floor((edge[:, 1] - y_edges[0]) / step_y).astype(np.int64)
    cj = np.floor((edge[:, 0] - x_edges[0]) / step_x).astype(np.int64)
    touched = np.zeros(share.shape, dtype=bool)
    for di in (-1, 0, 1):
        for dj in (-1, 0, 1):
            a, b = ci + di, cj + dj
            ok = (a >= 0) & (a < share.shape[0]) & (b >= 0) & (b < share.shape[1])
            touched[a[ok], b[ok]] = True
    ti, tj = np.nonzero(touched)
    boxes = shapely.box(x_edges[tj], y_edges[ti], x_edges[tj + 1], y_edges[ti + 1])
    share[ti, tj] = shapely.area(shapely.intersection(boxes, poly)) / (step_x * step_y)
    row_area = band_area_m2(y_edges[:-1], y_edges[1:], step_x)
    area = row_area[:, None] * share
    extent = shapely.box(grid.lon.low_edge if not grid.wraps else w - 1, max(grid.lat.low_edge, -90),
                         grid.lon.high_edge if not grid.wraps else e + 1, min(grid.lat.high_edge, 90))
    inside_m2 = geometry_area_m2(shapely.intersection(poly, extent))
    return {"elev": elev, "tid": tid, "area": area, "share": share, "ringM2": total_m2, "insideM2": inside_m2,
            "xc": xc, "yc": yc, "cells": int(np.count_nonzero(share > 0))}


def stats(cov: dict[str, Any]) -> dict[str, Any]:
    """Deepest, mean, volume, depth bands and the measured share from ``coverage``."""
    elev, tid, area = cov["elev"], cov["tid"], cov["area"]
    under = cov["share"] > 0
    known = under & ~np.isnan(elev)
    water = known & (elev < 0)
    depth = np.where(water, -elev, 0.0)
    water_m2 = float(area[water].sum())
    known_m2 = float(area[known].sum())
    missing_m2 = float(area[under & np.isnan(elev)].sum())
    volume_m3 = float((area * depth)[water].sum())
    deepest = None
    if water.any():
        k = np.unravel_index(np.argmax(np.where(water, depth, -1.0)), depth.shape)
        deepest = {"depthM": float(depth[k]), "lon": round(_lon180(float(cov["xc"][k[1]])), 7),
                   "lat": round(float(cov["yc"][k[0]]), 7)}
    bands = []
    for lo, hi in zip(BANDS_M, (*BANDS_M[1:], None)):
        sel = water & (depth > lo) & (depth <= (hi if hi is not None else math.inf))
        a = float(area[sel].sum())
        bands.append({"fromM": lo, "toM": hi, "areaKm2": round(a / 1e6, 3),
                      "share": round(a / water_m2, 6) if water_m2 else None})
    by_class = []
    codes, inverse = np.unique(tid[known], return_inverse=True)
    sums = np.bincount(inverse, weights=area[known]) if codes.size else np.array([])
    for code, a in zip(codes.tolist(), sums.tolist()):
        cls = classes.tid_class(code) if code >= 0 else None
        by_class.append({"code": code if code >= 0 else None,
                         "name": cls.name if cls else "no type identifier in the TID grid",
                         "basis": cls.basis if cls else classes.UNKNOWN,
                         "areaKm2": round(a / 1e6, 3), "share": round(a / known_m2, 6) if known_m2 else None})
    measured_m2 = float(area[water & np.isin(tid, _MEASURED_CODES)].sum())
    estimated_m2 = float(area[water & np.isin(tid, _ESTIMATED_CODES)].sum())
    return {"ringM2": cov["ringM2"], "insideM2": cov["insideM2"], "knownM2": known_m2, "missingM2": missing_m2,
            "waterM2": water_m2, "volumeM3": volume_m3, "deepest": deepest, "bands": bands, "byClass": by_class,
            "measuredM2": measured_m2, "estimatedM2": estimated_m2, "cells": cov["cells"]}
