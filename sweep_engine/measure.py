"""Measurement from a metric depth map, class masks and boxes: road width and objects.

Pure numpy; fed either by the models or, in tests, by a synthetic frame's exact
depth, masks and boxes.  Metric depth times angular extent, nothing else.

Definitions (what the numbers mean):

- Road width: the carriageway (``road`` class) between its two edges, read on
  image rows at several distances, each edge point placed in 3D from the row's
  road depth (or, with ``plane``, where its ray meets the calibrated ground
  plane), and measured perpendicular to the road direction fitted to the edge
  points. The engine takes both placements and weighs them by their errors
  (``combined_road``).  The reported value is the median over rows; the spread is the
  robust standard deviation (1.4826 x MAD) of the per-row widths.
- Object distance: horizontal range from the camera to the point where the ray
  through the box's centre meets the object (its depth: the median of the
  object's pixels in the box's central third of columns); bearing and
  coordinates are that point's.  For flat objects on the ground (drains), the
  footprint centre.  For thin objects (poles, signs, people: ``THIN_LABELS``)
  the depth is the near end of the box's depths (``THIN_PERCENTILE``, the 30th
  percentile of its own pixels'): a depth network does not resolve an object a
  few pixels wide, and what it reads at its pixels is blended with the
  background behind it, which is always farther (with the first weights the
  median of the object's cluster read poles 34 % and signs 30 % too far on
  validation scenes; the fine-tuned dense network blends less, and the 30th
  percentile read them without bias).  With exact depth the near end is within
  about 1 % of the centre ray's point.
  When depth comes from a network, a standing object (``CONTACT_LABELS``)
  whose foot is seen is placed at the error-weighed mean (in log depth) of the
  network's depth and of where its box's bottom edge meets the calibrated
  ground plane (``_with_contact``); a vehicle's bottom edge is its nearest
  corner, so its contact is weighed less (``CONTACT_EXTENT_SIGMA``).
- Object size: apparent width and height, from the box's angular extent on the
  vertical plane facing the camera at the depth of the object's nearest part
  (which is where the box's outline comes from).
- Cut: a box touching the top or bottom frame edge makes the height a lower
  bound, and so does a foot hidden by something nearer (see
  ``_foot_hidden``); a box touching the left or right edge, the width.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .camera import Camera, bearing_deg
from .labels import GROUND_CLASSES, SEG

FLAT_LABELS = frozenset({"drainage"})
GROUNDED_LABELS = frozenset({"car", "truck", "bus", "person", "pole", "gate", "entrance"})
# Objects whose box's bottom edge is where they stand, and whose contact reads their depth (entrances and
# gates are not: their bottom edge is a threshold or a gap, and on validation scenes it read them worse).
CONTACT_LABELS = frozenset({"car", "truck", "bus", "person", "pole"})
CONTACT_EDGE_PX = 1.3
CONTACT_SCALE_SIGMA = 0.05
# A vehicle's box ends at its nearest corner, where it meets the ground; seen obliquely, that corner is
# nearer than where the ray through the box's centre meets its side, by up to half its length. So its
# contact carries that extent as an error of its own (log units): on validation scenes (seeds 2000 and 3000)
# the contact read cars 4 % and buses 7 % too near, and weighing it at 0.2 took distance AbsRel from 0.077
# to 0.070 and 0.085 to 0.078. It still rules where the photo's depth scale is in doubt (``geometry``).
CONTACT_EXTENT_SIGMA = {"car": 0.2, "truck": 0.2, "bus": 0.2}
THIN_LABELS = frozenset({"pole", "sign", "person"})
THIN_PERCENTILE = 30
ROAD_EDGE_NEIGHBOURS = frozenset({SEG["kerb"], SEG["sidewalk"], SEG["terrain"]})


@dataclass
class RoadWidthEstimate:
    width_m: float
    spread_m: float
    samples: int
    nearest_m: float
    farthest_m: float
    east: float   # centre of the measured stretch, metres from the camera's ground point
    north: float
    method: str = "road-mask edges x metric depth, perpendicular to the fitted road direction"
    left: np.ndarray | None = None    # (n, 2) ENU edge points the width was read from, for ``road_edges.check``
    right: np.ndarray | None = None
    rows_px: np.ndarray | None = None  # (n, 3) the rows read (either edge or both): v, u where the road starts, ends

METHOD_DEPTH = "road-mask edges x metric depth, perpendicular to the fitted road direction"
METHOD_GROUND = ("road-mask edges on the calibrated ground plane (camera height and pitch from depth and vehicles), "
                 "perpendicular to the fitted road direction")


@dataclass
class ObjectEstimate:
    label: str
    score: float
    box: tuple[float, float, float, float]
    east: float
    north: float
    distance_m: float
    bearing_deg: float
    width_m: float
    height_m: float
    height_is_lower_bound: bool
    width_is_lower_bound: bool
    face_depth: float
    lon: float = 0.0
    lat: float = 0.0


def row_medians(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Each row's median of its ``values`` where ``mask`` holds (NaN for a row with none), all rows at once:
    ``np.median`` row by row, in a Python loop, was a fifth of a photo's geometry. The same figures as that
    loop: the two middle values' mean, in the values' own precision."""
    d = np.sort(np.where(mask, values, np.nan), axis=1)      # NaN sorts last, so a row with none gives NaN
    n = mask.sum(1)
    r = np.arange(len(d))
    return ((d[r, np.maximum(n - 1, 0) // 2] + d[r, n // 2]) / 2).astype(float)


def robust_spread(values: np.ndarray) -> float:
    values = np.asarray(values, float)
    return float(1.4826 * np.median(np.abs(values - np.median(values)))) if len(values) else 0.0


# Classes that may stand on the road between two stretches of it in one image row: the road continues
# behind them (``carriageway``).
OCCLUDERS = frozenset(SEG[c] for c in ("vehicle", "person", "pole", "sign", "void"))


def carriageway(seg: np.ndarray) -> np.ndarray:
    """The road the camera stands on: the road pixels connected, row by row from the image's bottom, to
    the widest stretch of road in the lowest row that has one.

    Each row keeps the stretch overlapping the one kept below it most, joined with its neighbours where
    only occluders (vehicles, people, poles) stand between them; the first row with none ends it. Road
    labelled elsewhere (a verge's patch, a facade, the sky, as the shipped network does on streets unlike
    its training) is not the carriageway: on the independent renderer's scenes (seed 2000) it took the
    mask's road width error from 44 % to 15 % median.

    Every row's stretches, and whether only occluders lie between two, are read in array operations
    first; the walk up the rows is then plain Python over a few numbers a row."""
    road = seg == SEG["road"]
    h, w = road.shape
    step = np.diff(np.pad(road, ((0, 0), (1, 1))).astype(np.int8), axis=1)
    rows, starts = np.nonzero(step == 1)
    ends = np.nonzero(step == -1)[1]
    bounds = np.searchsorted(rows, np.arange(h + 1)).tolist()
    starts, ends = starts.tolist(), ends.tolist()
    # Pixels that are not occluders, counted along each row: none between a and b iff the counts agree.
    open_count = np.pad(np.cumsum(~np.isin(seg, list(OCCLUDERS)), axis=1), ((0, 0), (1, 0))).tolist()
    out = np.zeros_like(road)
    prev = None
    for y in range(h - 1, -1, -1):
        lo, hi = bounds[y], bounds[y + 1]
        if lo == hi:
            if prev is not None:
                break
            continue
        # join stretches separated only by occluders
        count = open_count[y]
        joined = [[starts[lo], ends[lo]]]
        for a, b in zip(starts[lo + 1:hi], ends[lo + 1:hi]):
            if count[a] == count[joined[-1][1]]:
                joined[-1][1] = b
            else:
                joined.append([a, b])
        if prev is None:
            best = max(joined, key=lambda r: r[1] - r[0])
        else:
            overlap = [(min(r[1], prev[1]) - max(r[0], prev[0]), r) for r in joined]
            overlap = [o for o in overlap if o[0] > 0]
            if not overlap:
                break
            best = max(overlap)[1]
        out[y, best[0]:best[1]] = road[y, best[0]:best[1]]
        prev = best
    return out


def road_width(cam: Camera, depth: np.ndarray, seg: np.ndarray, *, near_m: float = 3.0, far_m: float = 40.0,
               min_rows: int = 5, plane: bool = False, neighbours: frozenset = ROAD_EDGE_NEIGHBOURS,
               road: np.ndarray | None = None) -> RoadWidthEstimate | None:
    """Road width from the road mask; None where fewer than ``min_rows`` rows show either edge.

    Each edge is read on every row where it shows, apart from the other: a road that runs out of the
    frame on one side near the camera still shows that side's edge further up, and the near rows, where a
    metre is many pixels, read the other. (Reading only rows showing both edges left the far rows, a few
    pixels a metre: on the independent renderer's scenes, seed 2000, 78 % of photos gave a width, now 88 %.)
    The two edges' lines are parallel, fitted together; the width is the distance between their median
    offsets. Each row's edge points are placed at the row's road depth, or with ``plane`` where their rays
    meet the camera's ground plane (the calibration's camera height and pitch: one scale for the whole
    photo, fitted to the depth of every ground row and the vehicles, instead of one depth model reading per
    row). ``road``: the mask's ``carriageway``, where the caller already has it.

    Every row is read at once, in array operations: a loop over rows, placing each row's two points apart,
    was about a third of a photo's geometry.
    """
    h, w = seg.shape
    road = carriageway(seg) if road is None else road
    start = max(0, int(np.ceil(cam.horizon_v())))
    on = road[start:]
    ys = np.arange(start, h)
    x0 = on.argmax(1)
    x1 = w - 1 - on[:, ::-1].argmax(1)
    nb = np.isin(seg[start:], list(neighbours))
    # An edge counts only where the road ends at a kerb or sidewalk, not at a vehicle or the frame.
    left_edge = (x0 > 0) & nb[np.arange(len(ys)), np.maximum(x0 - 1, 0)]
    right_edge = (x1 < w - 1) & nb[np.arange(len(ys)), np.minimum(x1 + 1, w - 1)]
    # Each row's road depth: the median of its road pixels' finite depths.
    finite = on & np.isfinite(depth[start:])
    i = np.flatnonzero((on.sum(1) >= 4) & (left_edge | right_edge) & (finite.sum(1) >= 4))
    z = row_medians(depth[start:][i], finite[i])
    inside = (z >= near_m) & (z <= far_m)
    i, z = i[inside], z[inside]
    u0, u1, v = x0[i].astype(float), x1[i] + 1.0, ys[i] + 0.5
    if plane:
        pts = cam.ground_points(np.stack([u0, u1], 1), np.stack([v, v], 1))
        z = cam.ground_depth((u0 + u1) / 2, v)
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(pts).all(axis=(1, 2)) & (z >= near_m) & (z <= far_m)
    else:
        pts = cam.points(np.stack([u0, u1], 1), np.stack([v, v], 1), np.stack([z, z], 1))
        ok = np.ones(len(i), bool)
    i, z, pts = i[ok], z[ok], pts[ok]
    left, right = pts[left_edge[i], 0, :2], pts[right_edge[i], 1, :2]
    if min(len(left), len(right)) < min_rows:
        return None
    centred = np.concatenate([left - left.mean(0), right - right.mean(0)])
    direction = np.linalg.svd(centred, full_matrices=False)[2][0]
    normal = np.array([-direction[1], direction[0]])
    off_l, off_r = left @ normal, right @ normal
    mid = (np.median(left, 0) + np.median(right, 0)) / 2
    return RoadWidthEstimate(width_m=abs(float(np.median(off_r) - np.median(off_l))),
                             spread_m=float(np.hypot(robust_spread(off_l), robust_spread(off_r))),
                             samples=len(i), nearest_m=float(z.min()), farthest_m=float(z.max()),
                             east=float(mid[0]), north=float(mid[1]), method=METHOD_GROUND if plane else METHOD_DEPTH,
                             left=left, right=right,
                             rows_px=np.stack([ys[i] + 0.5, x0[i].astype(float), x1[i] + 1.0], 1))


METHOD_BOTH = ("road-mask edges on the calibrated ground plane and by metric depth, weighed by their errors, "
               "perpendicular to the fitted road direction")


def combined_road(on_plane: RoadWidthEstimate | None, by_depth: RoadWidthEstimate | None,
                  plane_sigma: float, depth_sigma: float) -> RoadWidthEstimate | None:
    """One road width from the two placements of the same edges, weighed (in log units) by their errors.

    The plane's error is the calibration's camera height and pitch (``plane_sigma``), the depth's the
    depth model's scale in this photo (``depth_sigma``): different sources, so their mean is better than
    either. The spread is the larger of their own spreads and half their difference, so that the two
    disagreeing is not hidden."""
    if on_plane is None or by_depth is None:
        return on_plane or by_depth
    wp, wd = 1.0 / plane_sigma ** 2, 1.0 / depth_sigma ** 2
    width = math.exp((wp * math.log(on_plane.width_m) + wd * math.log(by_depth.width_m)) / (wp + wd))
    spread = max(on_plane.spread_m, by_depth.spread_m, abs(on_plane.width_m - by_depth.width_m) / 2)
    return RoadWidthEstimate(width_m=width, spread_m=spread, samples=on_plane.samples,
                             nearest_m=on_plane.nearest_m, farthest_m=on_plane.farthest_m,
                             east=on_plane.east, north=on_plane.north, method=METHOD_BOTH,
                             left=on_plane.left, right=on_plane.right, rows_px=on_plane.rows_px)


def _pixels(box, w: int, h: int) -> tuple[int, int, int, int]:
    x0, y0, x1, y1 = box
    return (max(0, int(np.floor(x0))), max(0, int(np.floor(y0))),
            min(w, int(np.ceil(x1))), min(h, int(np.ceil(y1))))


def _clusters(values: np.ndarray, gap: float = 1.08) -> list[np.ndarray]:
    """Sorted depths split where one is more than ``gap`` times the one before."""
    values = np.sort(values)
    return np.split(values, np.flatnonzero(values[1:] > values[:-1] * gap) + 1)


def _near_part_depth(box_depths: np.ndarray, zf: float) -> float:
    """Depth of the object's nearest part: the low end of the box's depth cluster holding ``zf``.

    An oblique side is one continuous cluster reaching its near corner; an
    occluder in front and the background behind are other clusters.
    """
    def gap(c: np.ndarray) -> float:
        return 0.0 if c[0] <= zf <= c[-1] else min(abs(c[0] - zf), abs(c[-1] - zf))
    return float(np.percentile(min(_clusters(box_depths), key=gap), 5))


def _thin_depth(d: np.ndarray, ok: np.ndarray, own: np.ndarray | None) -> float | None:
    """A thin object's depth: the near end of its own pixels' depths (of the box's, where the class mask
    shows too few of them); an occluder in front is another class, so it is not taken for the object."""
    if own is not None and (ok & own).sum() >= 3:
        ok = ok & own
    return float(np.percentile(d[ok], THIN_PERCENTILE)) if ok.any() else None


def face_depth(depth: np.ndarray, box) -> float | None:
    """Depth of an object at its box's centre, read from the box's central third of columns.

    The strip's depths are split into clusters at gaps of more than 8 %; the
    object is the most populous cluster (nearer wins a tie): background beside
    a thin object and an occluder in front of part of it are both minorities.
    An oblique side has continuous depths, so it stays one cluster, and its
    median is the depth at the centre.
    """
    h, w = depth.shape
    ix0, iy0, ix1, iy1 = _pixels(box, w, h)
    if ix1 <= ix0 or iy1 <= iy0:
        return None
    third = (ix1 - ix0) / 3.0
    cx0 = int(np.floor(ix0 + third))
    cx1 = max(cx0 + 1, int(np.ceil(ix1 - third)))
    strip = depth[iy0:iy1, cx0:cx1]
    strip = strip[np.isfinite(strip) & (strip > 0)]
    if not len(strip):
        return None
    return float(np.median(max(_clusters(strip), key=len)))


def _foot_hidden(cam: Camera, depth: np.ndarray, seg: np.ndarray | None, box, zf: float) -> bool:
    """Whether something nearer hides the foot of an object that stands on the ground.

    Its foot should be where the ground is at the object's range; a box ending
    clearly above that row, over pixels nearer than the object that are not
    ground, was cut by an occluder (a car hiding a pole's foot) as surely as by
    the frame.
    """
    h, w = depth.shape
    x0, y0, x1, y1 = box
    uc = (x0 + x1) / 2
    e, n, _ = cam.points(uc, (y0 + y1) / 2, zf)
    _, v_foot, z_foot = cam.project(np.array([[float(e), float(n), 0.0]]))
    if not (z_foot[0] > 0 and y1 < v_foot[0] - max(2.0, 0.03 * (y1 - y0))) or y1 >= h:
        return False
    ix0, _, ix1, iy1 = _pixels(box, w, h)
    third = max(1, (ix1 - ix0) // 3)
    cols = slice(ix0 + (ix1 - ix0 - third) // 2, ix0 + (ix1 - ix0 - third) // 2 + third)
    below = depth[iy1:iy1 + 2, cols]
    near = np.isfinite(below) & (below < 0.95 * zf)
    if seg is not None:
        near &= ~np.isin(seg[iy1:iy1 + 2, cols], [SEG[c] for c in GROUND_CLASSES])
    return bool(near.size and near.mean() > 0.5)


def _with_contact(cam: Camera, box, zf: float, depth_sigma: float, label: str) -> float:
    """A standing object's depth from the network (``zf``, good to ``depth_sigma`` in log units) and
    from where its box's bottom edge meets the calibrated ground plane, weighed by their errors.

    The contact's error is its bottom edge, read to about ``CONTACT_EDGE_PX`` pixels, over that edge's
    distance below the horizon (a far object's contact is a few pixels from it), the calibrated
    camera height and pitch (``CONTACT_SCALE_SIGMA``), and for a vehicle its length
    (``CONTACT_EXTENT_SIGMA``)."""
    x0, _, x1, y1 = box
    below = y1 - cam.horizon_v()
    if below <= 2.0 or y1 >= cam.height - 0.5:
        return zf
    zc = float(cam.ground_depth((x0 + x1) / 2, y1))
    if not (np.isfinite(zc) and zc > 0):
        return zf
    w_c = 1.0 / (math.hypot(CONTACT_EDGE_PX / below, CONTACT_SCALE_SIGMA, CONTACT_EXTENT_SIGMA.get(label, 0.0)) ** 2)
    w_n = 1.0 / depth_sigma ** 2
    return float(math.exp((w_c * math.log(zc) + w_n * math.log(zf)) / (w_c + w_n)))


def measure_object(cam: Camera, depth: np.ndarray, label: str, box, score: float = 1.0,
                   seg: np.ndarray | None = None, depth_sigma: float | None = None) -> ObjectEstimate | None:
    h, w = depth.shape
    ix0, iy0, ix1, iy1 = _pixels(box, w, h)
    x0, y0, x1, y1 = (float(c) for c in box)
    if ix1 <= ix0 or iy1 <= iy0:
        return None
    vv, uu = np.mgrid[iy0:iy1, ix0:ix1]
    d = depth[iy0:iy1, ix0:ix1]
    ok = np.isfinite(d) & (d > 0)
    if label in FLAT_LABELS:
        if not ok.any():
            return None
        pts = cam.points(uu[ok] + 0.5, vv[ok] + 0.5, d[ok])
        # Midpoint of the extent: near rows hold more pixels per metre, so a median would lean near.
        e = float(pts[:, 0].min() + pts[:, 0].max()) / 2
        n = float(pts[:, 1].min() + pts[:, 1].max()) / 2
        r = np.hypot(e, n)
        perp = np.array([n, -e]) / r
        lateral = pts[:, :2] @ perp
        width, height, zf = float(lateral.max() - lateral.min()), 0.0, float(np.median(d[ok]))
    else:
        if label in THIN_LABELS:
            zf = _thin_depth(d, ok, None if seg is None else seg[iy0:iy1, ix0:ix1] == SEG[label])
        else:
            zf = face_depth(depth, box)
        if zf is None:
            return None
        near = _near_part_depth(d[ok], zf)
        hidden = label in GROUNDED_LABELS and _foot_hidden(cam, depth, seg, (x0, y0, x1, y1), zf)
        if depth_sigma and label in CONTACT_LABELS and not hidden:
            zf = _with_contact(cam, (x0, y0, x1, y1), zf, depth_sigma, label)
        e, n, _ = cam.points((x0 + x1) / 2, (y0 + y1) / 2, zf)
        e, n = float(e), float(n)
        # The box's outline comes from the object's nearest part (the near corner when it is seen
        # obliquely), so its angular extent is read at that part's depth.
        width, height = apparent_size(cam, (x0, y0, x1, y1), near)
    if label in FLAT_LABELS:
        hidden = False
    return ObjectEstimate(label=label, score=float(score), box=(x0, y0, x1, y1), east=e, north=n,
                          distance_m=float(np.hypot(e, n)), bearing_deg=float(bearing_deg(e, n)),
                          width_m=width, height_m=height,
                          height_is_lower_bound=bool(y0 <= 0.5 or y1 >= h - 0.5 or hidden),
                          width_is_lower_bound=bool(x0 <= 0.5 or x1 >= w - 0.5), face_depth=zf)


def apparent_size(cam: Camera, box, zf: float, anchor: str = "centre") -> tuple[float, float]:
    """Width and height of a box's angular extent on a vertical plane facing the camera.

    The plane passes through the point at z-depth ``zf`` on the ray through the
    box's centre (``anchor="centre"``) or its bottom-centre (``"bottom"``, for a
    ground contact point).
    """
    x0, y0, x1, y1 = box
    uc, vc = (x0 + x1) / 2, (y0 + y1) / 2
    u = np.array([uc, x0, x1, uc, uc])
    v = np.array([vc if anchor == "centre" else y1, vc, vc, y0, y1])
    rays = cam.rays_cam(u, v) @ cam.rotation().T
    centre_h = rays[0, :2] * zf                      # horizontal offset of the plane's anchor point
    rng = np.linalg.norm(centre_h)
    c_hat = centre_h / rng
    perp = np.array([c_hat[1], -c_hat[0]])
    t = rng / (rays[:, :2] @ c_hat)                  # scale putting each ray on that vertical plane
    lateral = t * (rays[:, :2] @ perp)
    up = t * rays[:, 2]
    return float(abs(lateral[2] - lateral[1])), float(abs(up[3] - up[4]))


def measure_objects(cam: Camera, depth: np.ndarray, detections, seg: np.ndarray | None = None,
                    depth_sigma: float | None = None) -> list[ObjectEstimate]:
    """Every detection ``(label, box, score)`` measured and georeferenced from ``cam``'s position.

    ``depth_sigma``: the depth model's error (log units) when depth comes from a network: standing objects'
    depths are then weighed with their ground contact (``_with_contact``); None for exact depth."""
    out = []
    for label, box, score in detections:
        est = measure_object(cam, depth, label, box, score, seg, depth_sigma)
        if est is not None:
            lon, lat = cam.to_lonlat(est.east, est.north)
            est.lon, est.lat = float(lon), float(lat)
            out.append(est)
    return out
