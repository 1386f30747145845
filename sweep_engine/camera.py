"""Pinhole camera: intrinsics from photo metadata, pose (heading, pitch, height), georeferencing.

Conventions, used everywhere in the engine:

- Camera frame: x right, y down, z forward (OpenCV).  ``depth`` is z-depth.
- World frame: local ENU metres (east, north, up) with the origin on the
  ground directly below the camera; the camera sits at ``(0, 0, height_m)``.
- Heading is clockwise from north, pitch positive when looking up, no roll.
- Ground is the plane ``up = 0``.

When a photo carries no focal length, the prior ``FOCAL_PRIOR_FRACTION`` x the
image's larger side is used and recorded as ``assumed``, so calibration knows
it may overrule it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

EARTH_RADIUS_M = 6_378_137.0
FOCAL_PRIOR_FRACTION = 0.85
DEFAULT_CAMERA_HEIGHT_M = 1.65

# Sensor widths (mm) of cameras common on street-photo platforms.  Not complete:
# a camera missing here falls back to a 35 mm equivalent focal, then to the prior.
SENSOR_WIDTH_MM: dict[tuple[str, str], float] = {
    ("gopro", "hero4 black"): 6.17, ("gopro", "hero5 black"): 6.17, ("gopro", "hero7 black"): 6.17,
    ("gopro", "hero8 black"): 6.17, ("gopro", "hero9 black"): 6.17, ("gopro", "max"): 6.17,
    ("apple", "iphone 8"): 4.8, ("apple", "iphone x"): 4.8, ("apple", "iphone 11"): 5.6,
    ("apple", "iphone 12"): 5.6, ("apple", "iphone 13"): 5.7, ("samsung", "sm-g960f"): 5.6,
    ("canon", "eos 80d"): 22.3, ("sony", "ilce-6000"): 23.5, ("nikon", "d7500"): 23.5,
    ("garmin", "virb ultra 30"): 6.17, ("blackvue", "dr900s"): 5.6,
}


def sensor_width_mm(make: str | None, model: str | None) -> float | None:
    if not make or not model:
        return None
    return SENSOR_WIDTH_MM.get((make.strip().lower(), model.strip().lower()))


def focal_px_from_metadata(width: int, height: int, *, focal_px: float | None = None,
                           focal_mm: float | None = None, sensor_width_mm_: float | None = None,
                           focal_35mm: float | None = None, make: str | None = None,
                           model: str | None = None) -> tuple[float, str, str]:
    """Focal length in pixels, its basis (``measured``/``assumed``) and how it was found."""
    if focal_px:
        return float(focal_px), "measured", "given in pixels"
    sensor = sensor_width_mm_ or sensor_width_mm(make, model)
    if focal_mm and sensor:
        # Sensor width is the long side of the sensor; so is the image's larger side.
        return focal_mm * max(width, height) / sensor, "measured", "EXIF focal length x sensor width"
    if focal_35mm:
        return focal_35mm * max(width, height) / 36.0, "measured", "EXIF 35 mm equivalent focal length"
    return FOCAL_PRIOR_FRACTION * max(width, height), "assumed", \
        f"prior {FOCAL_PRIOR_FRACTION} x larger image side (no usable focal length in metadata)"


@dataclass(frozen=True)
class Camera:
    fx: float
    fy: float
    cx: float
    cy: float
    width: int
    height: int
    heading_deg: float = 0.0
    pitch_deg: float = 0.0
    height_m: float = DEFAULT_CAMERA_HEIGHT_M
    lon: float = 0.0
    lat: float = 0.0
    focal_basis: str = "measured"
    height_basis: str = "assumed"
    pitch_basis: str = "assumed"

    @classmethod
    def simple(cls, width: int, height: int, focal_px: float, **pose) -> Camera:
        """Square pixels, principal point at the image centre."""
        return cls(fx=focal_px, fy=focal_px, cx=width / 2.0, cy=height / 2.0, width=width, height=height, **pose)

    def with_(self, **changes) -> Camera:
        return replace(self, **changes)

    def with_focal(self, focal_px: float) -> Camera:
        k = focal_px / self.fx
        return replace(self, fx=focal_px, fy=self.fy * k)

    def resized(self, width: int, height: int) -> Camera:
        sx, sy = width / self.width, height / self.height
        return replace(self, fx=self.fx * sx, fy=self.fy * sy, cx=self.cx * sx, cy=self.cy * sy,
                       width=width, height=height)

    def rotation(self) -> np.ndarray:
        """Columns are the camera's x (right), y (down) and z (forward) axes in ENU (read-only: shared by
        every call on this camera)."""
        return self._rotation

    @cached_property
    def _rotation(self) -> np.ndarray:
        # Made once per camera: the geometry places pixels thousands of times a photo, and building this
        # each time (np.cross, np.stack) was a tenth of its time. The camera is frozen, so it cannot go stale.
        sp, cp = math.sin(math.radians(self.heading_deg)), math.cos(math.radians(self.heading_deg))
        st, ct = math.sin(math.radians(self.pitch_deg)), math.cos(math.radians(self.pitch_deg))
        # right = (cp, -sp, 0), forward = (sp.ct, cp.ct, st), down = forward x right = (st.sp, st.cp, -ct)
        r = np.array([[cp, st * sp, sp * ct], [-sp, st * cp, cp * ct], [0.0, -ct, st]])
        r.flags.writeable = False
        return r

    def rays_cam(self, u, v) -> np.ndarray:
        """Camera-frame rays with z = 1 through pixel positions (continuous coordinates)."""
        u, v = np.broadcast_arrays(np.asarray(u, float), np.asarray(v, float))
        return np.stack([(u - self.cx) / self.fx, (v - self.cy) / self.fy, np.ones_like(u)], axis=-1)

    def points(self, u, v, depth) -> np.ndarray:
        """ENU points (..., 3) of pixels at the given z-depth."""
        cam = self.rays_cam(u, v) * np.asarray(depth, float)[..., None]
        return cam @ self.rotation().T + np.array([0.0, 0.0, self.height_m])

    def ground_points(self, u, v) -> np.ndarray:
        """Where pixel rays meet the ground plane; NaN for rays at or above the horizon."""
        rays = self.rays_cam(u, v) @ self.rotation().T
        down = -rays[..., 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(down > 1e-9, self.height_m / down, np.nan)
        return rays * t[..., None] + np.array([0.0, 0.0, self.height_m])

    def ground_depth(self, u, v) -> np.ndarray:
        """z-depth of the ground plane at pixels (NaN above the horizon): Z = f.h / (v - v_horizon) at zero pitch."""
        rays = self.rays_cam(u, v) @ self.rotation().T
        down = -rays[..., 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(down > 1e-9, self.height_m / down, np.nan)

    def horizon_v(self) -> float:
        return self.cy + self.fy * math.tan(math.radians(self.pitch_deg))

    def project(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Pixel (u, v) and z-depth of ENU points."""
        cam = (np.asarray(points, float) - np.array([0.0, 0.0, self.height_m])) @ self.rotation()
        z = cam[..., 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.cx + self.fx * cam[..., 0] / z, self.cy + self.fy * cam[..., 1] / z, z

    def to_lonlat(self, east, north) -> tuple[np.ndarray, np.ndarray]:
        """A position seen from this camera, its longitude in [-180, 180] (``wrap_lon``): an object east of a
        camera at 179.9999 is at -179.99..., as every longitude on the wire is written."""
        lon, lat = offset_lonlat(self.lon, self.lat, east, north)
        return wrap_lon(lon), lat


def wrap_lon(lon):
    """Longitudes (a number or an array) brought to [-180, 180] by whole turns; one already in it, 180 and
    -180 included, is returned exactly as it is."""
    lon = np.asarray(lon, float)
    return np.where((lon >= -180.0) & (lon <= 180.0), lon, (lon + 180.0) % 360.0 - 180.0)


def unwrap_lon(lon, ref):
    """Longitudes moved by whole turns to lie within 180 degrees of ``ref``: on a scale continuous across
    the antimeridian around it (-179.9999 beside 179.9999 reads 180.0001), as a job's area is drawn."""
    lon = np.asarray(lon, float)
    return lon - 360.0 * np.round((lon - ref) / 360.0)


def offset_lonlat(lon0: float, lat0: float, east, north) -> tuple[np.ndarray, np.ndarray]:
    """Local tangent-plane offset to lon/lat; exact to millimetres over the few hundred metres of a job.
    The longitude is continuous with ``lon0``'s: past 180 east of a point near it (``Camera.to_lonlat``
    and the facts bring it back to [-180, 180])."""
    east, north = np.asarray(east, float), np.asarray(north, float)
    lat = lat0 + np.degrees(north / EARTH_RADIUS_M)
    lon = lon0 + np.degrees(east / (EARTH_RADIUS_M * math.cos(math.radians(lat0))))
    return lon, lat


def lonlat_offset(lon0: float, lat0: float, lon, lat) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of ``offset_lonlat``: east and north metres of a position from an origin. The longitude
    difference is taken the short way round, across the antimeridian where that is shorter: a camera at
    -179.9999 is 22 m east of an origin at 179.9999 on the equator, not 40,000 km west of it."""
    north = np.radians(np.asarray(lat, float) - lat0) * EARTH_RADIUS_M
    dlon = unwrap_lon(lon, lon0) - lon0
    east = np.radians(dlon) * EARTH_RADIUS_M * math.cos(math.radians(lat0))
    return east, north


def bearing_deg(east, north) -> np.ndarray:
    return np.degrees(np.arctan2(east, north)) % 360.0


def camera_for_photo(photo, width: int, height: int, *, focal_px: float | None = None,
                     camera_height_m: float | None = None, focal_35mm: float | None = None) -> Camera:
    """A camera for a ``schema.PhotoRef`` decoded at ``width`` x ``height`` pixels."""
    f, basis, _ = focal_px_from_metadata(photo.width, photo.height, focal_px=focal_px, focal_mm=photo.focal_mm,
                                         sensor_width_mm_=photo.sensor_width_mm, focal_35mm=focal_35mm,
                                         make=photo.camera_make, model=photo.camera_model)
    cam = Camera.simple(photo.width, photo.height, f, heading_deg=photo.heading or 0.0,
                        pitch_deg=photo.pitch or 0.0, lon=photo.lon, lat=photo.lat, focal_basis=basis,
                        height_m=camera_height_m or DEFAULT_CAMERA_HEIGHT_M,
                        height_basis="measured" if camera_height_m else "assumed",
                        pitch_basis="measured" if photo.pitch is not None else "assumed")
    return cam.resized(width, height) if (width, height) != (photo.width, photo.height) else cam
