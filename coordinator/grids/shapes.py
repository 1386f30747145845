"""Paths and rings as the bathymetry routes take them (``lon,lat;lon,lat;...``), checked,
and the exact spherical area of a ring.

A ring's edges are straight lines in longitude and latitude, as GeoJSON's are (RFC 7946
§3.1.1), so that the cells a ring covers are the ones it draws on a map. Its longitudes are
unwrapped (each vertex taken within 180 degrees of the one before), so a ring across the
antimeridian (179.5 to -179.5) is the one-degree ring it means, not one round the world.
A path's legs are great circle arcs. Bad input raises ``BadParameter`` (400, the one
error shape).
"""
from __future__ import annotations

import math

import numpy as np
import shapely

from coordinator.core.errors import BadParameter

from .sphere import EARTH_RADIUS_M


def unwrap(lons: list[float]) -> list[float]:
    out = [lons[0]]
    for lon in lons[1:]:
        prev = out[-1]
        out.append(lon + 360.0 * round((prev - lon) / 360.0))
    return out


def ring_polygon(points: list[tuple[float, float]], name: str = "ring") -> shapely.Polygon:
    """A checked polygon (unwrapped longitudes) from a ring's vertices; the closing vertex
    may be repeated or left out."""
    pts = list(points)
    if len(pts) > 1 and pts[0] == pts[-1]:
        pts = pts[:-1]
    if len({(round(x, 9), round(y, 9)) for x, y in pts}) < 3:
        raise BadParameter(f"'{name}' needs at least three distinct vertices", {"parameter": name})
    lons = unwrap([p[0] for p in pts])
    closing = lons[0] + 360.0 * round((lons[-1] - lons[0]) / 360.0)
    if abs(closing - lons[0]) > 1e-9:
        raise BadParameter(f"'{name}' winds round the pole: a ring must close without circling the Earth",
                           {"parameter": name})
    poly = shapely.Polygon(list(zip(lons, [p[1] for p in pts])))
    if poly.area <= 0:
        raise BadParameter(f"'{name}' encloses no area", {"parameter": name})
    if not poly.is_valid:
        raise BadParameter(f"'{name}' crosses itself: {shapely.is_valid_reason(poly)}", {"parameter": name})
    return poly


def span_deg(poly: shapely.Polygon) -> float:
    """The larger side of the ring's (unwrapped) bounding box, the measure the plans'
    ``bboxDeg`` caps."""
    w, s, e, n = poly.bounds
    return max(e - w, n - s)


def ring_area_m2(coords: np.ndarray) -> float:
    """Exact area on the sphere of a ring whose edges are straight in lon/lat: by Green's
    theorem the area is R^2 times the integral of -sin(lat) d(lon) round the ring, and
    along an edge where latitude is linear in longitude that integral is closed-form."""
    lam, phi = np.radians(coords[:, 0]), np.radians(coords[:, 1])
    total = 0.0
    for a in range(len(lam) - 1):
        dl, dp = lam[a + 1] - lam[a], phi[a + 1] - phi[a]
        if dl == 0:
            continue
        if abs(dp) < 1e-12:
            total += math.sin(phi[a]) * dl
        else:
            total += (math.cos(phi[a]) - math.cos(phi[a + 1])) * dl / dp
    return float(abs(total) * EARTH_RADIUS_M ** 2)


def geometry_area_m2(geom) -> float:  # noqa: ANN001
    """The spherical area of a (multi)polygon with lon/lat-straight edges."""
    total = 0.0
    for poly in getattr(geom, "geoms", [geom]):
        if poly.is_empty:
            continue
        total += ring_area_m2(np.asarray(poly.exterior.coords))
        total -= sum(ring_area_m2(np.asarray(h.coords)) for h in poly.interiors)
    return total


def check_path(points: list[tuple[float, float]], name: str = "path") -> list[tuple[float, float]]:
    if len(points) < 2:
        raise BadParameter(f"'{name}' needs at least two points", {"parameter": name})
    return points
