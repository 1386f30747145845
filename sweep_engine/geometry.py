"""The per-photo geometry chain — calibrate, measure, place — from depth, classes and boxes.

Pure numpy: the pipeline feeds it the models' outputs, the tests feed it a
synthetic frame's exact ones, and both get the same ``PhotoMeasurement``.
"""
from __future__ import annotations

import numpy as np

from . import schema
from .aggregate import PhotoMeasurement
from .calibrate import calibrate
from .camera import Camera
from .measure import measure_objects, road_width
from .structures import seg_structures

# Road width from the calibrated ground plane rather than per-row depth (chosen on validation scenes: docs/weights.md).
ROAD_ON_PLANE = True
# The depth network's error, log units, that calibration weighs the depth cues by (chosen on validation
# scenes, generator seed 2000: docs/weights.md).
MODEL_DEPTH_SIGMA = 0.2


def measure_photo(photo_id: str, captured_at: str, cam: Camera, depth: np.ndarray, seg: np.ndarray | None,
                  detections, *, min_score: float = 0.5,
                  depth_sigma: float | None = None) -> tuple[PhotoMeasurement, dict]:
    """One photo's measurements with its calibrated camera, and the calibration evidence.

    ``depth_sigma``: the depth model's error (log units) when depth comes from a network
    (``MODEL_DEPTH_SIGMA``), which the calibration weighs its depth cues by; None for exact depth.
    """
    dets = [(label, box, score) for label, box, score in detections if score >= min_score]
    cal = calibrate(cam, depth, seg, dets, min_score=min_score, depth_sigma=depth_sigma)
    c = cal.camera
    road = road_width(c, depth, seg, plane=ROAD_ON_PLANE) if seg is not None else None
    pm = PhotoMeasurement(photo_id=photo_id, captured_at=captured_at, camera=c, scale_trust=cal.scale_trust,
                          road=road, objects=measure_objects(c, depth, dets, seg, depth_sigma),
                          structures=seg_structures(c, depth, seg) if seg is not None else [])
    return pm, cal.evidence


def to_schema(pm: PhotoMeasurement, evidence: dict) -> schema.Measurement:
    c = pm.camera
    road = None
    if pm.road is not None and np.isfinite(pm.road.width_m) and np.isfinite(pm.road.spread_m):
        road = schema.RoadWidth(width_m=round(pm.road.width_m, 3), method=pm.road.method,
                                spread_m=round(pm.road.spread_m, 3), samples=pm.road.samples)
    objects = [schema.ObjectMeasurement(label=o.label, distance_m=round(o.distance_m, 3),
                                        width_m=round(o.width_m, 3), height_m=round(o.height_m, 3),
                                        bearing_deg=round(o.bearing_deg, 2) % 360.0, lon=o.lon, lat=o.lat,
                                        height_is_lower_bound=o.height_is_lower_bound,
                                        width_is_lower_bound=o.width_is_lower_bound,
                                        score=round(min(max(o.score, 0.0), 1.0), 4))
               for o in pm.objects if _finite(o)]
    return schema.Measurement(photo_id=pm.photo_id, road_width=road, objects=objects,
                              calibration=schema.Calibration(scale_trust=pm.scale_trust, focal_px=round(c.fx, 3),
                                                             focal_basis=c.focal_basis,
                                                             camera_height_m=round(c.height_m, 4),
                                                             pitch_deg=round(c.pitch_deg, 4),
                                                             evidence=_jsonable(evidence)))


def _finite(o) -> bool:
    """An object whose numbers are all finite: a degenerate box (junk detections) is dropped, not sent."""
    return all(np.isfinite(v) for v in (o.distance_m, o.width_m, o.height_m, o.bearing_deg, o.lon, o.lat))


def _jsonable(x):
    """Evidence as plain JSON: numpy scalars to floats, rounded, non-finite to null."""
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return round(float(x), 5) if np.isfinite(x) else None
    return x
