"""Street structures read from the class masks: kerbs, fences, vegetation and overhead wires.

These have no box of their own; their pixels are placed in 3D from the depth
map and summarised per side of the street (left or right of the camera's
heading), which merges two fences on one side into one.  Heights are above
the ground plane, so they rest on the calibrated camera height.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .camera import Camera
from .labels import SEG


@dataclass
class Structure:
    kind: str          # a fact kind: kerbs, fences, vegetation, wires
    east: float        # metres from the camera's ground point
    north: float
    value: dict
    pixels: int
    lon: float = 0.0
    lat: float = 0.0


def _extent(points2d: np.ndarray) -> float:
    """Length along the points' principal direction, 2nd to 98th percentile."""
    centred = points2d - points2d.mean(0)
    direction = np.linalg.svd(centred, full_matrices=False)[2][0]
    along = centred @ direction
    return float(np.percentile(along, 98) - np.percentile(along, 2))


def seg_structures(cam: Camera, depth: np.ndarray, seg: np.ndarray, *, min_pixels: int = 12,
                   max_m: float = 60.0) -> list[Structure]:
    h, w = seg.shape
    vv, uu = np.mgrid[0:h, 0:w]
    psi = math.radians(cam.heading_deg)
    right = np.array([math.cos(psi), -math.sin(psi)])
    out: list[Structure] = []
    for cls, kind in (("kerb", "kerbs"), ("fence", "fences"), ("vegetation", "vegetation"), ("wires", "wires")):
        mask = (seg == SEG[cls]) & np.isfinite(depth) & (depth > 0.5) & (depth < max_m)
        if mask.sum() < min_pixels:
            continue
        pts = cam.points(uu[mask] + 0.5, vv[mask] + 0.5, depth[mask])
        groups = [pts] if kind == "wires" else [pts[pts[:, :2] @ right < 0], pts[pts[:, :2] @ right >= 0]]
        for g in groups:
            if len(g) < min_pixels:
                continue
            e, n = float(np.median(g[:, 0])), float(np.median(g[:, 1]))
            if kind == "kerbs":
                value = {"lengthM": _extent(g[:, :2]), "offsetM": float(abs(np.median(g[:, :2] @ right)))}
            elif kind == "fences":
                value = {"lengthM": _extent(g[:, :2]), "heightM": float(np.percentile(g[:, 2], 98))}
            elif kind == "vegetation":
                value = {"heightM": float(np.percentile(g[:, 2], 98)), "widthM": _extent(g[:, :2])}
            else:
                value = {"clearanceM": float(np.percentile(g[:, 2], 5))}
            lon, lat = cam.to_lonlat(e, n)
            out.append(Structure(kind, e, n, value, int(len(g)), float(lon), float(lat)))
    return out
