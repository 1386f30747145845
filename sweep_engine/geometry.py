"""The per-photo geometry chain — calibrate, measure, place — from depth, classes and boxes.

Pure numpy: the pipeline feeds it the models' outputs, the tests feed it a
synthetic frame's exact ones, and both get the same ``PhotoMeasurement``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import road_edges, schema
from .aggregate import PhotoMeasurement
from .calibrate import EXACT_GROUND_SIGMA, NETWORK_GROUND_SIGMA, SCALE_DOUBT, calibrate
from .camera import Camera
from .labels import SEG, SIZE_PRIORS
from .measure import ROAD_EDGE_NEIGHBOURS, carriageway, combined_road, measure_objects, road_width
from .structures import seg_structures

# The depth network's error, log units, that calibration weighs the depth cues by (chosen on validation
# scenes, generator seed 2000: docs/weights.md).
MODEL_DEPTH_SIGMA = 0.2

# Road width is the error-weighed mean of the road's edges placed on the calibrated ground plane and
# placed by the depth model (``measure.combined_road``): the plane's scale is the calibration's camera
# height (``calibrate.NETWORK_GROUND_SIGMA``), the depth's is the model's scale in the photo (1.6 % median
# on validation scenes). On validation scenes (seeds 2000 and 3000, docs/weights.md) the mean read
# 2.1-2.2 % median against 3.1-3.8 % for the plane alone.
ROAD_DEPTH_SCALE_SIGMA = 0.03
ROAD_EXACT_DEPTH_SIGMA = 0.002
# One object's depth as read by the depth model, log units, for weighing it with the object's ground
# contact (``measure._with_contact``). The calibration weighs its depth cues by ``MODEL_DEPTH_SIGMA``,
# which is larger because the model's errors are shared across a photo's rows and vehicles. For one object
# 0.08 read distances best with the first weights (validation AbsRel 0.071-0.078 against 0.080 at 0.2),
# 0.05 with the fine-tuned dense network (0.0503 against 0.0509 at 0.08, seeds 2000 and 3000 together).
OBJECT_DEPTH_SIGMA = 0.05
# Where the ground (read by the depth model) and the vehicles' contacts put the camera more than this apart
# (log units), the depth model's depths are rescaled to the vehicles' (``_scale_error``). Only then:
# on validation scenes (seeds 2000 and 3000) every photo whose cues disagreed by more than SCALE_DOUBT had a
# depth scale within 6 % of the truth (the disagreement came from the cues, not the model), and rescaling
# at 0.10 took distance AbsRel from 0.050 to 0.057; at 0.20, 0.051. The end-to-end test's street, read
# 21-39 % too far, disagrees by 0.14-0.23, and its signs, gates and entrances need it.
SCALE_CORRECT = 0.20


def _scale_error(evidence: dict) -> float:
    """How far (log units) the ground, read by the depth model, puts the camera from a camera height given
    as measured, or else from where the vehicles' contacts put it (which no depth enters): a measure of
    the depth model's scale error in this photo, positive where it reads too far (0 when either is missing). Its size is the doubt; where it is beyond
    ``SCALE_CORRECT``, ``exp(-error)`` rescales the model's depths: an object read by depth alone (a sign,
    a gate, an entrance) is otherwise as far off as the model's scale (on the end-to-end test's street,
    read 21-39 % too far, they were 1.29-1.42 x too far)."""
    h = evidence.get("cameraHeightM", {})
    # A camera height given as measured is kept by the calibration and is the better reference: the
    # ground's disagreement with it is then the depth model's scale error, vehicles or none.
    ref = h.get("prior") if h.get("priorBasis") == "measured" else h.get("fromVehicles")
    if "fromGround" in h and ref and h["fromGround"] > 0 and ref > 0:
        return math.log(h["fromGround"] / ref)
    return 0.0


def _depth_scale_sigma(doubt: float, usual: float) -> float:
    """The depth model's error in this photo: its usual one, or, where the ground and the vehicles
    disagree beyond ``calibrate.SCALE_DOUBT``, that disagreement."""
    return doubt if doubt > SCALE_DOUBT else usual


# Where the photo's own lines can check the road mask's edges (``road_edges``), the road may also end at
# a class the segmentation gives a verge it does not know (grass read as building or vegetation): the check,
# not the neighbouring class, then says whether the edge is a road edge.
CHECKED_EDGE_NEIGHBOURS = ROAD_EDGE_NEIGHBOURS | frozenset(SEG[c] for c in ("building", "vegetation", "fence"))


def _road(c: Camera, depth: np.ndarray, seg: np.ndarray, depth_sigma: float | None, doubt: float,
          image: np.ndarray | None = None):
    """The road width, and the edge check's evidence (None without an image): a width neither of whose
    mask edges the photo's lines support, or past either of whose edges the road goes on, is withheld;
    one unsupported edge is flagged in the evidence."""
    grey = road_edges.to_grey(image) if image is not None else None
    neighbours = ROAD_EDGE_NEIGHBOURS if grey is None else CHECKED_EDGE_NEIGHBOURS
    carriage = carriageway(seg)
    on_plane = road_width(c, depth, seg, plane=True, neighbours=neighbours, road=carriage)
    by_depth = road_width(c, depth, seg, plane=False, neighbours=neighbours, road=carriage)
    if depth_sigma:
        road = combined_road(on_plane, by_depth, NETWORK_GROUND_SIGMA,
                             _depth_scale_sigma(doubt, ROAD_DEPTH_SCALE_SIGMA))
    else:
        road = combined_road(on_plane, by_depth, EXACT_GROUND_SIGMA, ROAD_EXACT_DEPTH_SIGMA)
    if road is None or grey is None:
        return road, None
    chk = road_edges.check(c, grey, road.left, road.right, image, road.rows_px)
    return (None if chk.rejects else road), chk.evidence()


@dataclass
class PhotoGeometry:
    """Everything one photo's geometry reads, in plain arrays and numbers: what ``Engine.measure`` prepares
    from the networks' output and the photo's metadata, so that the measuring itself can run anywhere,
    in the job's thread or in another process (``geometry_pool``), and give the same figures."""

    photo_id: str
    captured_at: str
    camera: Camera
    depth: np.ndarray
    seg: np.ndarray | None
    detections: list
    min_score: float
    depth_sigma: float | None
    image: np.ndarray | None = None          # the photo on the depth map's grid, for the road edge check
    focal_guess_px: float | None = None
    focal_from_network: bool = False
    evidence: dict = field(default_factory=dict)   # added to the calibration's evidence

    def measure(self) -> tuple[PhotoMeasurement, dict]:
        pm, evidence = measure_photo(self.photo_id, self.captured_at, self.camera, self.depth, self.seg,
                                     self.detections, min_score=self.min_score, depth_sigma=self.depth_sigma,
                                     image=self.image, focal_guess_px=self.focal_guess_px,
                                     focal_from_network=self.focal_from_network)
        return pm, {**evidence, **self.evidence}


def measure_photo(photo_id: str, captured_at: str, cam: Camera, depth: np.ndarray, seg: np.ndarray | None,
                  detections, *, min_score: float = 0.5, depth_sigma: float | None = None,
                  image: np.ndarray | None = None, focal_guess_px: float | None = None,
                  focal_from_network: bool = False) -> tuple[PhotoMeasurement, dict]:
    """One photo's measurements with its calibrated camera, and the calibration evidence.

    ``depth_sigma``: the depth model's error (log units) when depth comes from a network
    (``MODEL_DEPTH_SIGMA``), which the calibration weighs its depth cues by; None for exact depth.
    ``image``: the photo at the depth map's size (RGB or grey), for the road edges' check against its
    own lines (``road_edges``); without it the road mask is taken as it is.
    ``focal_guess_px``: the focal length (frame pixels) the dense network reads in the photo, where it has a
    focal head, for the verdict to hold a measured focal length against (``calibrate``);
    ``focal_from_network``: the camera's (assumed) focal length is that reading.
    """
    dets = [(label, box, score) for label, box, score in detections if score >= min_score]
    cal = calibrate(cam, depth, seg, dets, min_score=min_score, depth_sigma=depth_sigma,
                    focal_guess_px=focal_guess_px, focal_from_network=focal_from_network)
    c = cal.camera
    error = _scale_error(cal.evidence)
    doubt = abs(error)
    if depth_sigma and doubt > SCALE_CORRECT:
        depth = depth * math.exp(-error)
    road, edges = _road(c, depth, seg, depth_sigma, doubt, image) if seg is not None else (None, None)
    if edges is not None:
        cal.evidence["roadEdges"] = edges
    object_sigma = _depth_scale_sigma(doubt, OBJECT_DEPTH_SIGMA) if depth_sigma else None
    pm = PhotoMeasurement(photo_id=photo_id, captured_at=captured_at, camera=c, scale_trust=cal.scale_trust,
                          road=road,
                          objects=measure_objects(c, depth, dets, seg, object_sigma),
                          structures=seg_structures(c, depth, seg) if seg is not None else [],
                          scale_boxes=list(cal.vehicle_boxes))
    return pm, cal.evidence


# Most image rows a road width carries to the reviewer (evenly spaced from the nearest to the farthest): enough
# to draw both edges and the rows read, a few kilobytes a photo (the width itself is over all ``samples``).
ROAD_ROWS_SENT = 32


class _ToPhoto:
    """Frame pixels (the grid the geometry reads) to the photo's own pixels as the provider lists them, the
    grid a reviewer's browser draws the evidence on: the frame is the whole photo resized, so it scales."""

    def __init__(self, cam: Camera, size: tuple[int, int]):
        self.w, self.h = size
        self.sx, self.sy = self.w / cam.width, self.h / cam.height

    def u(self, u: float) -> float:
        return round(min(max(float(u) * self.sx, 0.0), self.w), 1)

    def v(self, v: float) -> float:
        return round(min(max(float(v) * self.sy, 0.0), self.h), 1)

    def box(self, box) -> list[float] | None:
        if not all(np.isfinite(box)):
            return None
        x0, y0, x1, y1 = box
        return [self.u(x0), self.v(y0), self.u(x1), self.v(y1)]

    def rows(self, rows_px: np.ndarray | None) -> list[schema.RoadRow] | None:
        if rows_px is None or not len(rows_px):
            return None
        pick = np.unique(np.linspace(0, len(rows_px) - 1, min(len(rows_px), ROAD_ROWS_SENT)).round().astype(int))
        return [schema.RoadRow(v=self.v(v), u_left=self.u(ul), u_right=self.u(ur)) for v, ul, ur in rows_px[pick]]


def to_schema(pm: PhotoMeasurement, evidence: dict, image_size: tuple[int, int] | None = None) -> schema.Measurement:
    """The wire form of a photo's measurement. With ``image_size`` (the photo's width and height as the
    provider lists them) it carries its image-space evidence too: each object's box, and the rows the road
    width was read on, in that photo's pixels, so a reviewer can see on the photo what was measured."""
    c = pm.camera
    to_photo = _ToPhoto(c, image_size) if image_size else None
    road = None
    if pm.road is not None and np.isfinite(pm.road.width_m) and np.isfinite(pm.road.spread_m):
        road = schema.RoadWidth(width_m=round(pm.road.width_m, 3), method=pm.road.method,
                                spread_m=round(pm.road.spread_m, 3), samples=pm.road.samples,
                                rows=to_photo.rows(pm.road.rows_px) if to_photo else None)
    scale = {tuple(b) for b in pm.scale_boxes}
    objects = [schema.ObjectMeasurement(label=o.label, distance_m=round(o.distance_m, 3),
                                        width_m=round(o.width_m, 3), height_m=round(o.height_m, 3),
                                        bearing_deg=round(o.bearing_deg, 2) % 360.0, lon=o.lon, lat=o.lat,
                                        height_is_lower_bound=o.height_is_lower_bound,
                                        width_is_lower_bound=o.width_is_lower_bound,
                                        score=round(min(max(o.score, 0.0), 1.0), 4),
                                        box=to_photo.box(o.box) if to_photo else None,
                                        used_for_scale=(tuple(o.box) in scale) if o.label in SIZE_PRIORS else None)
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
