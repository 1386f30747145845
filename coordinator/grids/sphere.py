"""Geometry on the sphere for grid answers: the area of a latitude-longitude cell, great
circle distances and points along a great circle.

The Earth is taken as a sphere of the IUGG mean radius. A cell between latitudes a and b
and longitudes spanning d (radians) has the exact spherical area R^2 d (sin b - sin a);
summing these is what makes a volume right near the poles, where cells shrink with the
cosine of latitude. The sphere differs from the WGS 84 ellipsoid by up to some 0.3 % in an
area, which docs/bathymetry.md states; the grid's own depth errors are far larger.
"""
from __future__ import annotations

import math

import numpy as np

EARTH_RADIUS_M = 6_371_008.8


def band_area_m2(south_deg: float | np.ndarray, north_deg: float | np.ndarray, width_deg: float) -> np.ndarray:
    """Area of the cell(s) between two latitudes over ``width_deg`` of longitude."""
    return EARTH_RADIUS_M ** 2 * math.radians(width_deg) * (
        np.sin(np.radians(north_deg)) - np.sin(np.radians(south_deg)))


def unit_vectors(lon_deg: np.ndarray, lat_deg: np.ndarray) -> np.ndarray:
    lon, lat = np.radians(lon_deg), np.radians(lat_deg)
    return np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], axis=-1)


def central_angle(a: np.ndarray, b: np.ndarray) -> float:
    """Angle between two unit vectors, stable for tiny and near-antipodal angles."""
    return float(math.atan2(np.linalg.norm(np.cross(a, b)), float(np.dot(a, b))))


def distance_m(lon1: float, lat1: float, lon2: float, lat2: float) -> float:
    a, b = unit_vectors(np.array([lon1, lon2]), np.array([lat1, lat2]))
    return central_angle(a, b) * EARTH_RADIUS_M


def along(a: np.ndarray, b: np.ndarray, fractions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Points at ``fractions`` (0..1) of the great circle arc from unit vector a to b
    (spherical linear interpolation), as (lon, lat) in degrees, lon in -180..180."""
    omega = central_angle(a, b)
    if omega == 0:
        pts = np.repeat(a[None, :], len(fractions), axis=0)
    else:
        s = math.sin(omega)
        pts = (np.sin((1 - fractions) * omega)[:, None] * a + np.sin(fractions * omega)[:, None] * b) / s
    lon = np.degrees(np.arctan2(pts[:, 1], pts[:, 0]))
    lat = np.degrees(np.arcsin(np.clip(pts[:, 2], -1, 1)))
    return lon, lat
