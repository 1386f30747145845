"""The bathymetry routes of the credentialed family (scope ``earth.bathymetry``), answered
from the newest loaded GEBCO grid (``store``): a point's depth, a profile along a path and
statistics under a ring (docs/bathymetry.md).

Honesty: with no grid loaded, or a grid whose files cannot be read here, every answer is
degraded and its depths unknown, saying which command loads one; a point or a ring outside
the loaded grid is unknown and says so. A depth is never zero for want of data. Every
answer carries the grid's license (GEBCO: public domain) and the citation GEBCO asks for.

The grid is read in a worker thread (``asyncio.to_thread``) so that a window read never
holds the event loop; answers are not cached: they cost a window read, and the statistics'
area cap depends on the caller's plan, which a shared cache must not see.
"""
from __future__ import annotations

import asyncio
import math
from typing import Any

import numpy as np
import shapely.affinity

from coordinator.core.access.caps import caps_for
from coordinator.core.context import ToolContext
from coordinator.core.errors import BadParameter
from coordinator.core.honesty import Answer, Confidence, Health, figure
from coordinator.core.registry import LONLAT_LIST, NUMBER, Param, Tool, lat, lon, tool

from . import bathymetry, classes, store
from .shapes import check_path, ring_polygon, span_deg

TOOLS: list[Tool] = []

SCOPES = ("earth.bathymetry",)
PROFILE_MAX_POINTS = 100
PROFILE_MAX_KM = 2000
PROFILE_MAX_SAMPLES = 1000
PROFILE_DEFAULT_SAMPLES = 500
PROFILE_MIN_SPACING_M = 100
RING_MAX_POINTS = 200

GRID_CAVEAT = ("Depths from the GEBCO grid as loaded (cell size 15 arc-seconds for GEBCO's global grid); an "
               "'estimated' depth is predicted or interpolated (TID 40-47), not a sounding, and can be hundreds of "
               "metres off.")


def _no_grid(loaded: store.Loaded, what: str) -> list[str]:
    return [f"No bathymetry grid can be read here, so the {what} is unknown (not zero): "
            f"{loaded.report.error}."]


def _source(loaded: store.Loaded) -> dict[str, Any]:
    m = loaded.manifest
    return {"license": loaded.license, "citation": m.get("citation"),
            "grid": {"file": m.get("elevationFile"), "tidFile": m.get("tidFile"), "tidSha256": m.get("tidSha256"),
                     "cellDeg": m.get("cellDeg")} if m else None}


def _tid_json(cls: classes.TidClass | None) -> dict[str, Any] | None:
    return cls.as_json() if cls else None


@tool(TOOLS, name="bathymetry", title="Sea-floor depth at a point", routes={"public": "/bathymetry"},
      description="Sea-floor depth (m) of the GEBCO grid cell under a point, with whether it was measured or "
                  "estimated from the cell's type identifier (TID) class, named; land has an elevation and no depth; "
                  "no grid loaded or a point outside it is unknown, never zero.",
      params=(lat(), lon()), scopes=SCOPES, tags=("grids",))
async def bathymetry_point(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    loaded = await store.current(ctx.services)
    lon_, lat_ = params["lon"], params["lat"]
    caveats = [GRID_CAVEAT]
    cell = None
    if loaded.grid is not None:
        cell = await asyncio.to_thread(bathymetry.point, loaded.grid, lon_, lat_)
    if loaded.grid is None or cell is None or cell["elevation"] is None:
        if loaded.grid is None:
            caveats = _no_grid(loaded, "depth")
        elif cell is None:
            w, s, e, n = loaded.grid.extent
            caveats.append(f"The point lies outside the loaded grid ({w:g},{s:g},{e:g},{n:g}), so its depth is "
                           "unknown (not zero).")
        else:
            caveats.append("The grid has no value in this cell (its fill value), so the depth is unknown "
                           "(not zero, and not land).")
        unknown = figure(None, Confidence.UNKNOWN)
        return Answer({"lon": lon_, "lat": lat_, "elevationM": unknown, "depthM": unknown, "basis": classes.UNKNOWN,
                       "measured": None, "tid": _tid_json(cell["tid"]) if cell else None,
                       "cell": cell["cell"] if cell else None, **_source(loaded)},
                      caveats=caveats, health=Health([loaded.report]))
    e = cell["elevation"]
    cls = cell["tid"]
    basis = cls.basis if cls else classes.UNKNOWN
    conf = Confidence.HIGH if basis in (classes.MEASURED, classes.LAND) else Confidence.LOW
    if e < 0:
        depth = figure(-e, conf)
    else:
        depth = figure(None, Confidence.UNKNOWN)
        caveats.append(f"The cell lies {e:g} m above sea level: it has an elevation and no sea-floor depth.")
    if cls is None:
        caveats.append("The TID grid has no class for this cell, so whether the depth was measured is unknown.")
    return Answer({"lon": lon_, "lat": lat_, "elevationM": figure(e, conf), "depthM": depth, "basis": basis,
                   "measured": basis == classes.MEASURED if cls else None, "tid": _tid_json(cls),
                   "cell": cell["cell"], **_source(loaded)}, caveats=caveats, health=Health([loaded.report]))


def _spacing(params: dict[str, Any], length_m: float) -> float:
    asked = params.get("spacingM")
    if asked is None:
        return max(float(PROFILE_MIN_SPACING_M), length_m / (PROFILE_DEFAULT_SAMPLES - 1))
    if length_m / asked + 1 > PROFILE_MAX_SAMPLES:
        least = math.ceil(length_m / (PROFILE_MAX_SAMPLES - 1))
        raise BadParameter(f"'spacingM' of {asked:g} m gives more than {PROFILE_MAX_SAMPLES} samples over this "
                           f"path of {length_m / 1000:.1f} km: use at least {least} m",
                           {"parameter": "spacingM", "value": asked, "maxSamples": PROFILE_MAX_SAMPLES,
                            "leastSpacingM": least})
    return float(asked)


@tool(TOOLS, name="bathymetry_profile", title="Depth profile along a path", routes={"public": "/bathymetry/profile"},
      description="Elevation and depth sampled along the great circle legs of a path every spacingM metres (default: "
                  f"{PROFILE_DEFAULT_SAMPLES} samples, at least {PROFILE_MIN_SPACING_M} m apart) and at its end, each "
                  "interpolated bilinearly between the four GEBCO cell centres around it, with measured true only when "
                  f"all four were measured; at most {PROFILE_MAX_POINTS} points, {PROFILE_MAX_KM} km and "
                  f"{PROFILE_MAX_SAMPLES} samples.",
      params=(Param("path", LONLAT_LIST, "Path: semicolon-separated lon,lat pairs, at least two", required=True,
                    max_points=PROFILE_MAX_POINTS),
              Param("spacingM", NUMBER, "Distance between samples in metres (default: the path's length over "
                    f"{PROFILE_DEFAULT_SAMPLES - 1}, at least {PROFILE_MIN_SPACING_M})",
                    minimum=PROFILE_MIN_SPACING_M, maximum=100_000)),
      scopes=SCOPES, tags=("grids",))
async def bathymetry_profile(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    points = check_path(params["path"])
    legs, _ = bathymetry.path_length_m(points)
    length = sum(legs)
    if length <= 0:
        raise BadParameter("'path' has no length: its points are all one", {"parameter": "path"})
    if length > PROFILE_MAX_KM * 1000:
        raise BadParameter(f"'path' is {length / 1000:.1f} km long: at most {PROFILE_MAX_KM} km",
                           {"parameter": "path", "lengthKm": round(length / 1000, 1), "maxKm": PROFILE_MAX_KM})
    spacing = _spacing(params, length)
    loaded = await store.current(ctx.services)
    caveats = [GRID_CAVEAT, "Each sample is interpolated bilinearly between the four cell centres around it; "
               "'measured' is true only when all of them were measured, and 'tid' is the nearest cell's class."]
    d, lons, lats = bathymetry.sample_path(points, spacing)
    if loaded.grid is None:
        value = np.full(d.shape, np.nan)
        measured, tids, inside = np.zeros(d.shape, bool), np.full(d.shape, -1), np.zeros(d.shape, bool)
        caveats = _no_grid(loaded, "profile")
    else:
        value, measured, tids, inside = await asyncio.to_thread(bathymetry.profile, loaded.grid, lons, lats)
    samples, legend = [], {}
    for k in range(d.size):
        v = float(value[k])
        known = not math.isnan(v)
        t = int(tids[k])
        if t >= 0 and t not in legend:
            legend[t] = classes.tid_class(t).as_json()
        samples.append({"distanceM": round(float(d[k]), 1), "lon": round(float(lons[k]), 6),
                        "lat": round(float(lats[k]), 6), "elevationM": round(v, 1) if known else None,
                        "depthM": round(-v, 1) if known and v < 0 else None,
                        "measured": bool(measured[k]) if known and t >= 0 else None, "tid": t if t >= 0 else None})
    unknown = int(np.count_nonzero(np.isnan(value)))
    if loaded.grid is not None and unknown:
        outside = int(np.count_nonzero(~inside))
        why = [f"{outside} outside the loaded grid"] if outside else []
        why += [f"{unknown - outside} on cells with the grid's fill value"] if unknown - outside else []
        caveats.append(f"{unknown} of {d.size} samples are unknown (null, not zero, and not land): "
                       f"{' and '.join(why)}.")
    land = int(np.count_nonzero(value >= 0))     # NaN compares false: unknown samples are not land
    if land:
        caveats.append(f"{land} of {d.size} samples lie at or above sea level (land): they have an elevation and "
                       "no sea-floor depth, so their depthM is null while their elevationM is known.")
    return Answer({"lengthM": round(length, 1), "spacingM": round(spacing, 1), "count": d.size,
                   "unknownSamples": unknown, "measuredSamples": int(np.count_nonzero(measured)),
                   "interpolation": "bilinear between the four surrounding cell centres; great circle legs",
                   "samples": samples, "classes": {str(k): v for k, v in sorted(legend.items())},
                   **_source(loaded)}, caveats=caveats, health=Health([loaded.report]))


@tool(TOOLS, name="bathymetry_stats", title="Depth statistics under a ring", routes={"public": "/bathymetry/stats"},
      description="Under a ring (edges straight in lon/lat, as GeoJSON's; across the antimeridian too): the deepest "
                  "cell, the mean depth and water volume (cells weighed by their spherical area and the share inside "
                  "the ring), the area in depth bands and the share of the sea floor whose depth was measured rather "
                  f"than estimated, by TID class. The ring's bounding box is capped by the plan's bboxDeg; at most "
                  f"{RING_MAX_POINTS} points.",
      params=(Param("ring", LONLAT_LIST, "Ring: semicolon-separated lon,lat pairs (closing pair optional)",
                    required=True, max_points=RING_MAX_POINTS),),
      scopes=SCOPES, tags=("grids",))
async def bathymetry_stats(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    poly = ring_polygon(params["ring"])
    cap = caps_for(ctx.caller).bbox_deg
    span = span_deg(poly)
    if span > cap + 1e-9:
        raise BadParameter(f"'ring' spans {span:.4g} deg: its bounding box sides must be at most {cap:g} deg "
                           f"(bboxDeg of the {ctx.caller.plan} plan)",
                           {"parameter": "ring", "cap": "bboxDeg", "limit": cap, "plan": ctx.caller.plan,
                            "spanDeg": round(span, 6)})
    loaded = await store.current(ctx.services)
    unknown = figure(None, Confidence.UNKNOWN)
    empty = {"areaKm2": None, "coveredShare": None, "deepest": None, "meanDepthM": unknown, "volumeKm3": unknown,
             "waterAreaKm2": unknown, "measuredShare": unknown, "estimatedShare": unknown, "bands": [],
             "byClass": [], "cells": 0}
    if loaded.grid is None:
        return Answer({**empty, **_source(loaded)}, caveats=_no_grid(loaded, "sea floor under the ring"),
                      health=Health([loaded.report]))
    grid = loaded.grid
    w, _, e, _ = poly.bounds
    shifted = shapely.affinity.translate(poly, xoff=grid.shift_for((w + e) / 2))
    cov = await asyncio.to_thread(bathymetry.coverage, grid, shifted)
    caveats = [GRID_CAVEAT, "Cells are weighed by their area on a sphere of 6371 km and by the share of each inside "
               "the ring; the volume is the water between sea level and the grid's floor."]
    if cov is None:
        gw, gs, ge, gn = grid.extent
        caveats.append(f"The ring lies outside the loaded grid ({gw:g},{gs:g},{ge:g},{gn:g}): nothing is known "
                       "under it (not zero).")
        return Answer({**empty, **_source(loaded)}, caveats=caveats, health=Health([loaded.report]))
    st = bathymetry.stats(cov)
    covered = st["knownM2"] / st["ringM2"] if st["ringM2"] else 0.0
    conf = Confidence.HIGH if covered > 0.999 else Confidence.LOW
    water = st["waterM2"]
    has_water = water > 0
    if st["knownM2"] <= 0:
        # Nothing read: every cell under the ring is the grid's fill (or off the grid). That is
        # no data, not land: there is no "no sea floor" to report, only an unknown depth.
        outside = _share(st["ringM2"] - st["insideM2"], st["ringM2"])
        where = (f"{outside:.1%} of it lies outside the loaded grid and the rest on cells with the grid's fill value"
                 if outside > 0.001 else "every cell under it has the grid's fill value")
        caveats.append(f"No cell under the ring has a value in the grid ({where}): the depth there is unknown, "
                       "not zero, and whether it is sea or land is unknown too.")
    elif covered <= 0.999:
        caveats.append(f"Only {covered:.1%} of the ring's area has grid values (the rest lies outside the grid or "
                       "on cells with the grid's fill value): the figures describe that part only.")
    if st["knownM2"] > 0 and not has_water:
        caveats.append(("No cell under the ring lies below sea level" if covered > 0.999 else
                        "No cell with a value under the ring lies below sea level")
                       + ": the ground read is land, with no sea floor to describe, so the depths are null and the "
                         "water area and volume zero.")
    return Answer({
        "areaKm2": round(st["ringM2"] / 1e6, 3), "coveredShare": round(covered, 6),
        "deepest": {**st["deepest"], "confidence": conf.value} if st["deepest"] else None,
        "meanDepthM": figure(round(st["volumeM3"] / water, 2), conf) if has_water else unknown,
        "volumeKm3": figure(round(st["volumeM3"] / 1e9, 6), conf) if st["knownM2"] > 0 else unknown,
        "waterAreaKm2": figure(round(water / 1e6, 3), conf) if st["knownM2"] > 0 else unknown,
        "measuredShare": figure(round(st["measuredM2"] / water, 6), conf) if has_water else unknown,
        "estimatedShare": figure(round(st["estimatedM2"] / water, 6), conf) if has_water else unknown,
        "bands": st["bands"] if st["knownM2"] > 0 else [], "byClass": st["byClass"], "cells": st["cells"],
        **_source(loaded)}, caveats=caveats, health=Health([loaded.report]))


def _share(part: float, whole: float) -> float:
    return max(part, 0.0) / whole if whole else 0.0
