"""Ray-cast a synthetic street scene into RGB, z-depth, class and instance maps, with exact truth per object."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..camera import Camera, bearing_deg
from ..labels import SEG, SEG_CLASSES
from .look import Look, paint
from .scene import MATERIAL_CLASS, MATERIALS, Box, Scene

_PALETTE = {
    "void": (0, 0, 0), "sky": (150, 190, 235), "road": (80, 80, 85), "sidewalk": (170, 165, 155),
    "kerb": (200, 200, 195), "terrain": (110, 140, 70), "building": (180, 120, 90),
    "vegetation": (50, 120, 40), "fence": (120, 100, 70), "wires": (20, 20, 20), "pole": (110, 110, 120),
    "sign": (220, 30, 30), "vehicle": (40, 70, 160), "person": (200, 150, 120), "gate": (90, 60, 30),
    "entrance": (60, 40, 30), "drainage": (35, 35, 35),
}
PALETTE = np.array([_PALETTE[c] for c in SEG_CLASSES], dtype=np.float32)


@dataclass
class ObjectTruth:
    """Exact truth for one object in one frame.

    ``east``/``north`` (metres from the camera's ground point), ``distance_m``,
    ``bearing_deg``, ``lon``/``lat`` are those of the point where the ray
    through the centre of the object's box meets the object (exact, by ray
    casting against the object alone; the footprint centre for flat objects);
    ``width_m`` is the width of the object's side facing the camera.  ``bbox`` is the tight box of the visible pixels, in pixel
    edge coordinates ``(x0, y0, x1, y1)``, or None when nothing is visible.
    """

    instance: int
    box: Box
    label: str | None
    bbox: tuple[int, int, int, int] | None
    visible_fraction: float
    cut_vertical: bool
    cut_horizontal: bool
    east: float
    north: float
    distance_m: float
    bearing_deg: float
    lon: float
    lat: float
    width_m: float
    height_m: float

    @property
    def clean(self) -> bool:
        """Wholly in frame and unoccluded: the objects whose geometry a test may hold to 1 %."""
        return (self.bbox is not None and self.visible_fraction > 0.97
                and not self.cut_vertical and not self.cut_horizontal)


@dataclass
class Frame:
    scene: Scene
    camera: Camera
    rgb: np.ndarray       # (H, W, 3) uint8
    depth: np.ndarray     # (H, W) float32 z-depth, inf for sky
    seg: np.ndarray       # (H, W) uint8 indices into SEG_CLASSES
    instance: np.ndarray  # (H, W) int32, -1 where no object
    objects: list[ObjectTruth]

    def detections(self) -> list[tuple[str, tuple[float, float, float, float], float]]:
        """Ground-truth detections ``(label, box, score)`` of the visible labelled objects."""
        return [(o.label, tuple(float(c) for c in o.bbox), 1.0) for o in self.objects
                if o.label and o.bbox is not None]


def _slab(origin: np.ndarray, d: np.ndarray, box: Box) -> np.ndarray:
    """Entry distance of rays into an axis-aligned box; inf where missed."""
    lo = np.array([box.a0, box.s0, box.z0])
    hi = np.array([box.a1, box.s1, box.z1])
    with np.errstate(divide="ignore", invalid="ignore"):
        t1 = (lo - origin) / d
        t2 = (hi - origin) / d
    # fmax/fmin skip the NaN of a ray parallel to a face that starts on it, as nanmax/nanmin would, faster.
    tmin = np.fmax.reduce(np.minimum(t1, t2), axis=-1)
    tmax = np.fmin.reduce(np.maximum(t1, t2), axis=-1)
    return np.where((tmax >= tmin) & (tmin > 1e-6), tmin, np.inf)


def _corners_px(box: Box, scene: Scene, cam: Camera) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pixel (u, v) and z-depth of a box's eight corners."""
    corners_a, corners_s = np.meshgrid([box.a0, box.a1], [box.s0, box.s1])
    ce, cn = scene.street.to_enu(corners_a.ravel() - scene.camera_a, corners_s.ravel() - scene.camera_s)
    pts = np.concatenate([np.stack([ce, cn, np.full(4, z)], axis=1) for z in (box.z0, box.z1)])
    return cam.project(pts)


def _box_window(box: Box, scene: Scene, cam: Camera) -> tuple[slice, slice] | None:
    """The pixel rows and columns a box can cover (its corners' projection, a pixel wider), or None for all.

    Slab-testing only these is what keeps rendering fast: most boxes cover a small part of the frame.
    """
    pu, pv, pz = _corners_px(box, scene, cam)
    if np.any(pz <= 1e-3):
        return None  # a corner behind the camera: its projection says nothing
    u0, u1 = max(0, int(np.floor(pu.min())) - 1), min(scene.width, int(np.ceil(pu.max())) + 1)
    v0, v1 = max(0, int(np.floor(pv.min())) - 1), min(scene.height, int(np.ceil(pv.max())) + 1)
    if u0 >= u1 or v0 >= v1:
        return slice(0, 0), slice(0, 0)
    return slice(v0, v1), slice(u0, u1)


def _hit(origin: np.ndarray, d: np.ndarray, box: Box, scene: Scene, cam: Camera) -> np.ndarray:
    """``_slab`` over the whole frame, computed only inside the box's window."""
    window = _box_window(box, scene, cam)
    if window is None:
        return _slab(origin, d, box)
    t = np.full(d.shape[:2], np.inf)
    t[window] = _slab(origin, d[window], box)
    return t


def ground_materials(street, a: np.ndarray) -> np.ndarray:
    """Index into ``MATERIALS`` of the ground at road-frame offsets ``a``: asphalt, each side's bands, beyond.

    A band's outer edge belongs to it (``|a| <= outer``), the road's edge to the road.
    """
    mat = np.where(a < 0, MATERIALS.index(street.beyond[0]), MATERIALS.index(street.beyond[1]))
    for side, sign in ((0, -1.0), (1, 1.0)):
        across = sign * a
        for material, inner, outer in reversed(street.bands(side)):
            mat = np.where((across > inner) & (across <= outer), MATERIALS.index(material), mat)
    return np.where(np.abs(a) <= street.road_width_m / 2, MATERIALS.index("asphalt"), mat)


_MATERIAL_SEG = np.array([SEG[MATERIAL_CLASS[m]] for m in MATERIALS], np.uint8)


def render(scene: Scene, look: Look | None = None) -> Frame:
    """Ray-cast ``scene``; ``look`` paints it (``synth.look``), None in the flat palette of one colour a class."""
    cam = scene.camera()
    st = scene.street
    h, w = scene.height, scene.width
    u, v = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
    rays = cam.rays_cam(u, v) @ cam.rotation().T           # ENU directions with camera z = 1
    d = np.stack([rays @ st.across(), rays @ st.along(), rays[..., 2]], axis=-1)
    origin = np.array([scene.camera_a, scene.camera_s, scene.camera_height_m])

    with np.errstate(divide="ignore"):
        t_ground = np.where(d[..., 2] < -1e-9, -scene.camera_height_m / d[..., 2], np.inf)
    depth = t_ground.copy()
    inst = np.full((h, w), -1, np.int32)
    hits = []
    for i, box in enumerate(scene.boxes):
        t = _hit(origin, d, box, scene, cam)
        hits.append(int(np.isfinite(t).sum()))
        nearer = t < depth
        depth[nearer] = t[nearer]
        inst[nearer] = i

    seg = np.full((h, w), SEG["sky"], np.uint8)
    ground = np.isfinite(depth) & (inst < 0)
    gp = origin + d * np.where(np.isfinite(depth), depth, 0.0)[..., None]
    gmat = ground_materials(st, gp[..., 0])
    gclass = _MATERIAL_SEG[gmat]
    seg[ground] = gclass[ground]
    drain_boxes = [Box("drainage", "drainage", a0, a1, s0, s1, 0.0, 0.0, name="drain")
                   for a0, a1, s0, s1 in st.drains]
    for k, db in enumerate(drain_boxes):
        on = ground & (gp[..., 0] >= db.a0) & (gp[..., 0] <= db.a1) & (gp[..., 1] >= db.s0) & (gp[..., 1] <= db.s1)
        seg[on] = SEG["drainage"]
        inst[on] = len(scene.boxes) + k
        hits.append(int(on.sum()))
    for i, box in enumerate(scene.boxes):
        seg[inst == i] = SEG[box.seg]

    rng = np.random.default_rng(scene.seed * 7919 + int(scene.camera_s * 1000) % 7919)
    if look is None:
        rgb = PALETTE[seg] * (0.85 + 0.3 * ((inst[..., None] * 37) % 11) / 11.0)
        fog = np.exp(-np.where(np.isfinite(depth), depth, 0.0) / 400.0)[..., None]
        rgb = rgb * fog + PALETTE[SEG["sky"]] * (1 - fog) + rng.normal(0, 4.0, rgb.shape)
    else:
        rgb = paint(look, scene, d, depth, seg, inst, gp, np.where(ground, gmat, -1), rng)
    rgb = np.clip(rgb, 0, 255).astype(np.uint8)

    objects = [_truth(i, b, scene, cam, inst, hits[i]) for i, b in enumerate(list(scene.boxes) + drain_boxes)]
    return Frame(scene=scene, camera=cam, rgb=rgb, depth=depth.astype(np.float32), seg=seg, instance=inst,
                 objects=objects)


def _truth(i: int, box: Box, scene: Scene, cam: Camera, inst: np.ndarray, hit_count: int) -> ObjectTruth:
    st = scene.street
    ys, xs = np.nonzero(inst == i)
    bbox = (int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1) if len(xs) else None
    visible = len(xs) / hit_count if hit_count else 0.0

    ca, cs = scene.camera_a, scene.camera_s
    ac, sc = box.centre
    if box.z1 <= box.z0:  # flat, on the ground: its footprint centre
        ref, face_w = (ac, sc), box.a1 - box.a0
    else:
        faces = [((box.a1, sc), (1, 0), box.s1 - box.s0), ((box.a0, sc), (-1, 0), box.s1 - box.s0),
                 ((ac, box.s1), (0, 1), box.a1 - box.a0), ((ac, box.s0), (0, -1), box.a1 - box.a0)]

        def facing(face):
            (fa, fs), (na, ns), _ = face
            va, vs = ca - fa, cs - fs
            return (na * va + ns * vs) / math.hypot(va, vs)
        (ref, _, face_w) = max(faces, key=facing)
    e, n = st.to_enu(ref[0] - ca, ref[1] - cs)
    if bbox is not None and box.z1 > box.z0:
        uc, vc = (bbox[0] + bbox[2]) / 2, (bbox[1] + bbox[3]) / 2
        ray = cam.rays_cam(uc, vc) @ cam.rotation().T
        d = np.array([ray @ st.across(), ray @ st.along(), ray[2]])
        t = float(_slab(np.array([ca, cs, scene.camera_height_m]), d, box))
        if np.isfinite(t):
            e, n = float(ray[0] * t), float(ray[1] * t)
            ref = (ca + float(d[0] * t), cs + float(d[1] * t))
    lon, lat = st.to_lonlat(*ref)

    pu, pv, pz = _corners_px(box, scene, cam)
    if np.any(pz <= 0.05):
        cut_v = cut_h = True
    else:
        # Cut: the object reaches past the outermost pixel centres, so the frame cannot show where it ends.
        cut_v = bool(pv.min() < 0.5 or pv.max() > cam.height - 0.5)
        cut_h = bool(pu.min() < 0.5 or pu.max() > cam.width - 0.5)
    return ObjectTruth(instance=i, box=box, label=box.det, bbox=bbox, visible_fraction=visible,
                       cut_vertical=cut_v, cut_horizontal=cut_h, east=float(e), north=float(n),
                       distance_m=float(math.hypot(e, n)), bearing_deg=float(bearing_deg(e, n)),
                       lon=float(lon), lat=float(lat), width_m=float(face_w), height_m=box.z1 - box.z0)
