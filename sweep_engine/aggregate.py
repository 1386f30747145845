"""Aggregation across frames: observations of one thing merged by derived position and kind, into facts.

An object seen from several photos is one cluster when its derived positions
lie within a radius that grows with range (depth errors do), and never twice
from one photo.  A fact's value is the median of its observations (sizes cut
by the frame are left out: they are lower bounds), its position the median
position, and its ``spread`` how far apart the observations were (position,
and the range of each value).  Confidence:

- ``unknown`` (value null) when no contributing photo had a scale to trust, or
  no quantity survived the physical bounds;
- ``high`` when a photo with ``scaleTrust`` high saw it, at least two photos
  saw it, and they agree (position within the radius, sizes within 15 % or
  two pixels, whichever is larger);
- ``low`` otherwise.

Vehicles and people are transient and are not facts; they serve calibration.

Positions are placed in metres east and north of one origin (the job's
centre), each camera's longitude first put on the origin's continuous scale,
so that photos either side of the antimeridian (179.9995, -179.9996) are metres
apart; a fact's longitude is written back in [-180, 180].
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np

from . import schema
from .camera import Camera, lonlat_offset, offset_lonlat, unwrap_lon, wrap_lon
from .labels import DET_FACT_KIND
from .measure import ObjectEstimate, RoadWidthEstimate
from .structures import Structure

RADIUS_M = {"roadway": 15.0, "kerbs": 10.0, "fences": 8.0, "vegetation": 8.0, "wires": 10.0}
OBJECT_RADIUS_M = 1.5
OBJECT_RADIUS_PER_M = 0.06
MAX_SIZE_SPREAD = 0.15


@dataclass
class PhotoMeasurement:
    """What one photo gave, with the calibrated camera its positions were derived from."""

    photo_id: str
    captured_at: str
    camera: Camera
    scale_trust: str
    road: RoadWidthEstimate | None = None
    objects: list[ObjectEstimate] = field(default_factory=list)
    structures: list[Structure] = field(default_factory=list)
    scale_boxes: list = field(default_factory=list)   # frame boxes of the vehicles the calibration used


@dataclass
class _Obs:
    kind: str
    east: float
    north: float
    values: dict
    lower_bounds: set
    trust: str
    photo_id: str
    captured_at: str
    radius: float
    pixel_m: float = 0.0  # one pixel's size at the object's range: the floor on size agreement


@dataclass
class _Cluster:
    kind: str
    members: list[_Obs] = field(default_factory=list)

    def centre(self) -> np.ndarray:
        return np.median([[o.east, o.north] for o in self.members], axis=0)


def _observations(photos: list[PhotoMeasurement], lon0: float, lat0: float) -> list[_Obs]:
    out = []
    for p in photos:
        # The camera's longitude on the origin's continuous scale: a job across the antimeridian has photos at
        # 179.9995 and -179.9996, metres apart, not a turn of the globe.
        lon = float(unwrap_lon(p.camera.lon, lon0))
        ce, cn = (float(x) for x in lonlat_offset(lon0, lat0, lon, p.camera.lat))

        def add(kind, e, n, values, lower=(), radius=None, pixel_m=0.0):
            out.append(_Obs(kind, ce + e, cn + n, values, set(lower), p.scale_trust, p.photo_id, p.captured_at,
                            radius if radius is not None else RADIUS_M[kind], pixel_m))
        if p.road is not None and np.isfinite([p.road.east, p.road.north, p.road.width_m]).all():
            add("roadway", p.road.east, p.road.north, {"widthM": p.road.width_m})
        for o in p.objects:
            kind = DET_FACT_KIND.get(o.label)
            if kind is None or not np.isfinite([o.east, o.north, o.width_m, o.height_m, o.distance_m]).all():
                continue
            lower = (["heightM"] if o.height_is_lower_bound else []) + (["widthM"] if o.width_is_lower_bound else [])
            values = {"widthM": o.width_m} if kind == "drainage" else {"heightM": o.height_m, "widthM": o.width_m}
            add(kind, o.east, o.north, values, lower,
                radius=max(OBJECT_RADIUS_M, OBJECT_RADIUS_PER_M * o.distance_m),
                pixel_m=o.distance_m / p.camera.fx)
        for s in p.structures:
            if np.isfinite([s.east, s.north, *s.value.values()]).all():
                add(s.kind, s.east, s.north, dict(s.value))
    return out


def _cluster(observations: list[_Obs]) -> list[_Cluster]:
    clusters: list[_Cluster] = []
    for o in observations:
        best, best_d = None, np.inf
        for c in clusters:
            if c.kind != o.kind or any(m.photo_id == o.photo_id for m in c.members):
                continue
            d = float(np.hypot(*(c.centre() - [o.east, o.north])))
            if d <= max(o.radius, max(m.radius for m in c.members)) and d < best_d:
                best, best_d = c, d
        if best is None:
            clusters.append(_Cluster(o.kind, [o]))
        else:
            best.members.append(o)
    return clusters


def _utc(t: str) -> datetime:
    """A capture time in UTC; one without an offset is read as UTC, as the coordinator reads it
    (``validation``): the schema admits it, and a job mixing the two made ``max`` raise, so the
    engine failed on the job on every node until it was parked."""
    d = datetime.fromisoformat(t.replace("Z", "+00:00"))
    return d.replace(tzinfo=timezone.utc) if d.tzinfo is None else d.astimezone(timezone.utc)


def _latest(times: list[str]) -> str:
    """The latest capture time, written in UTC with Z whatever offset it came with."""
    return max(map(_utc, times)).isoformat().replace("+00:00", "Z")


def _fact(c: _Cluster, lon0: float, lat0: float) -> schema.Fact:
    centre = c.centre()
    lon, lat = offset_lonlat(lon0, lat0, centre[0], centre[1])
    lon = wrap_lon(lon)   # continuous with the origin's (past 180 east of it near 180): written in [-180, 180]
    bounds = schema.PHYSICAL_BOUNDS[c.kind]
    value, ranges, agree_sizes = {}, {}, True
    pixel = 2 * max(m.pixel_m for m in c.members)
    for key in bounds:
        vals = [m.values[key] for m in c.members if key in m.values and key not in m.lower_bounds]
        if not vals:
            continue
        med = float(np.median(vals))
        if bounds[key][0] <= med <= bounds[key][1]:  # an implausible figure is not reported
            value[key] = round(med, 3)
            ranges[key] = round(max(vals) - min(vals), 3)
            agree_sizes &= max(vals) - min(vals) <= max(MAX_SIZE_SPREAD * med, pixel)
    trusts = {m.trust for m in c.members}
    trust = "high" if "high" in trusts else "low" if "low" in trusts else "unknown"
    photos = sorted({m.photo_id for m in c.members})
    position_spread = max(float(np.hypot(m.east - centre[0], m.north - centre[1])) for m in c.members)
    spread = {"positionM": round(position_spread, 3)}
    if trust == "unknown" or not value:
        confidence, value_out, basis = "unknown", None, "assumed"
    else:
        agree = position_spread <= min(m.radius for m in c.members) and agree_sizes
        confidence = "high" if trust == "high" and len(photos) >= 2 and agree else "low"
        value_out, basis = value, "measured"
        spread.update(ranges)
    return schema.Fact(kind=c.kind, lon=float(lon), lat=float(lat), value=value_out, unit="m",
                       confidence=confidence, basis=basis, source=photos,
                       timestamp=_latest([m.captured_at for m in c.members]), spread=spread)


def aggregate(photos: list[PhotoMeasurement], origin: tuple[float, float] | None = None) -> list[schema.Fact]:
    """Facts of the ten kinds from every photo's measurements, merged across photos."""
    if not photos:
        return []
    lon0, lat0 = origin if origin is not None else (photos[0].camera.lon, photos[0].camera.lat)
    clusters = _cluster(_observations(photos, lon0, lat0))
    return [_fact(c, lon0, lat0) for c in clusters]
