"""Plain road scenes, ray-cast in numpy with their own look: for held-out evaluation, never for training.

A scene is a flat, straight road seen from a camera on it, with no vehicle
and nothing hiding the road: asphalt of some shade and wear, optional edge
lines and a centre line (solid or dashed, white or yellow), and on each side
a verge made of bands (kerb, sidewalk of pavers, gravel shoulder, grass,
dirt), then a backdrop (a facade with windows, a hedge or tree line, or open
land to the horizon); a clear or overcast sky; sun strength, colour,
tree shadows across the road, haze; lens blur, sensor noise and JPEG.

Frame (metres): ``x`` across the road (right of the centreline, facing along
it), ``y`` along it, ``z`` up; the road is ``|x| <= road_width_m / 2``. The
camera stands at ``(camera_x_m, 0, camera_height_m)``, turned ``yaw_deg``
clockwise from the road's direction and pitched ``pitch_deg`` (up positive),
with no roll, as the engine's geometry assumes. Truth is exact: the road's
width, the camera's focal length (pixels), height and pitch, per-pixel
z-depth and classes (the engine's ``labels.SEG`` indices).

Nothing here is shared with ``sweep_engine.synth``: the description, the
ray casting and every texture are written apart, so that a model trained on
the generator is measured here on a look it was never drawn from.
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageFilter

from ..labels import SEG

VERGE_KINDS = ("kerb", "sidewalk", "gravel", "grass", "dirt")
_VERGE_CLASS = {"kerb": "kerb", "sidewalk": "sidewalk", "gravel": "terrain", "grass": "terrain",
                "dirt": "terrain"}
BACKDROPS = ("facade", "hedge", "open")


@dataclass(frozen=True)
class PlainRoad:
    """One plain road scene and its camera; everything the renderer draws is decided here."""

    seed: int
    width: int = 512
    height: int = 384
    focal_px: float = 420.0
    camera_height_m: float = 1.6
    pitch_deg: float = 0.0
    yaw_deg: float = 0.0
    camera_x_m: float = -1.5
    road_width_m: float = 7.0
    verges: tuple[tuple[tuple[str, float], ...], tuple[tuple[str, float], ...]] = (
        (("kerb", 0.2), ("sidewalk", 2.5)), (("grass", 3.0),))   # (left, right), inner band first
    backdrops: tuple[str, str] = ("facade", "hedge")
    backdrop_height_m: tuple[float, float] = (10.0, 3.0)
    edge_lines: bool = True
    centre_line: str = "dashed"      # none, dashed, solid
    line_colour: tuple[float, float, float] = (235.0, 235.0, 225.0)
    asphalt: tuple[float, float, float] = (90.0, 90.0, 95.0)
    wear: float = 0.3
    sky: str = "clear"               # clear, overcast
    sun: float = 1.0
    tint: tuple[float, float, float] = (1.0, 1.0, 1.0)
    shadows: float = 0.0             # share of the ground under tree shadows
    haze_m: float = 800.0
    blur_px: float = 0.6
    noise: float = 3.0
    jpeg_quality: int = 88

    def verge_edges(self, side: int) -> list[tuple[str, float, float]]:
        """``(kind, inner |x|, outer |x|)`` of one side's bands (side 0 left, 1 right)."""
        out, x = [], self.road_width_m / 2
        for kind, w in self.verges[side]:
            out.append((kind, x, x + w))
            x += w
        return out

    def backdrop_x(self, side: int) -> float:
        """|x| of one side's backdrop plane: a metre or two beyond its verge."""
        return self.verge_edges(side)[-1][2] + 1.0 + 1.5 * ((self.seed >> (3 + side)) & 1)


@dataclass
class PlainFrame:
    scene: PlainRoad
    rgb: np.ndarray      # (H, W, 3) uint8, as decoded from the JPEG
    depth: np.ndarray    # (H, W) float32 z-depth, inf for sky
    seg: np.ndarray      # (H, W) uint8 labels.SEG indices

    @property
    def road_width_m(self) -> float:
        return self.scene.road_width_m


def plain_road(seed: int, *, width: int = 512, height: int = 384) -> PlainRoad:
    """A random but deterministic plain road scene (its own ranges, not the training generator's)."""
    rng = np.random.default_rng([seed, 29])
    road_w = float(rng.uniform(3.0, 14.0))
    lane = max(0.0, road_w / 2 - 1.0)
    verges = []
    for _ in range(2):
        style = int(rng.integers(0, 5))
        if style == 0:      # urban: kerb, pavement, then grass or nothing
            bands = [("kerb", float(rng.uniform(0.12, 0.3))), ("sidewalk", float(rng.uniform(1.2, 4.5)))]
        elif style == 1:    # rural: grass right up to the asphalt
            bands = [("grass", float(rng.uniform(1.0, 6.0)))]
        elif style == 2:    # gravel shoulder, then grass
            bands = [("gravel", float(rng.uniform(0.4, 2.0))), ("grass", float(rng.uniform(1.0, 5.0)))]
        elif style == 3:    # dirt track edge
            bands = [("dirt", float(rng.uniform(0.8, 4.0)))]
        else:               # kerb straight into grass
            bands = [("kerb", float(rng.uniform(0.12, 0.3))), ("grass", float(rng.uniform(1.0, 4.0)))]
        verges.append(tuple(bands))
    backdrops = tuple(BACKDROPS[int(rng.integers(0, 3))] for _ in range(2))
    grey = float(rng.uniform(45, 135))
    warm = float(rng.uniform(-8, 8))
    yellow = rng.random() < 0.3
    return PlainRoad(
        seed=seed, width=width, height=height,
        focal_px=float(rng.uniform(0.5, 1.2)) * width,
        camera_height_m=float(rng.uniform(1.1, 3.2)),
        pitch_deg=float(rng.uniform(-7.0, 4.0)), yaw_deg=float(rng.uniform(-10.0, 10.0)),
        camera_x_m=float(rng.uniform(-lane, lane)) * 0.8,
        road_width_m=road_w, verges=(verges[0], verges[1]), backdrops=backdrops,  # type: ignore[arg-type]
        backdrop_height_m=(float(rng.uniform(2.0, 18.0)), float(rng.uniform(2.0, 18.0))),
        edge_lines=bool(rng.random() < 0.6),
        centre_line=("none", "dashed", "solid")[int(rng.choice(3, p=[0.35, 0.45, 0.2]))],
        line_colour=(230.0, 190.0, 60.0) if yellow else (235.0, 235.0, 225.0),
        asphalt=(grey + warm, grey, grey - warm * 0.5 + float(rng.uniform(0, 8))),
        wear=float(rng.uniform(0.0, 0.8)),
        sky="overcast" if rng.random() < 0.4 else "clear",
        sun=float(rng.uniform(0.55, 1.35)),
        tint=tuple(float(t) for t in rng.uniform(0.88, 1.12, 3)),  # type: ignore[arg-type]
        shadows=float(rng.uniform(0.2, 0.5)) if rng.random() < 0.35 else 0.0,
        haze_m=float(rng.uniform(250, 3000)), blur_px=float(rng.uniform(0.0, 1.2)),
        noise=float(rng.uniform(0.5, 7.0)), jpeg_quality=int(rng.integers(65, 96)))


def _lattice(ix: np.ndarray, iy: np.ndarray, salt: int) -> np.ndarray:
    """A repeatable pseudo-random value in [0, 1) per integer lattice point (an integer hash)."""
    h = (ix.astype(np.int64) * 73856093) ^ (iy.astype(np.int64) * 19349663) ^ (salt * 83492791)
    h = (h ^ (h >> 13)) * 1274126177
    h = h ^ (h >> 16)
    return (h & 0xFFFF).astype(np.float32) / 65536.0


def _value_noise(x: np.ndarray, y: np.ndarray, cell: float, salt: int, octaves: int = 3) -> np.ndarray:
    """Smooth value noise in [-1, 1] over world coordinates, ``octaves`` halvings of ``cell`` metres."""
    out = np.zeros(np.shape(x), np.float32)
    amp, total = 1.0, 0.0
    for o in range(octaves):
        gx, gy = x / cell, y / cell
        ix, iy = np.floor(gx), np.floor(gy)
        fx, fy = gx - ix, gy - iy
        fx, fy = fx * fx * (3 - 2 * fx), fy * fy * (3 - 2 * fy)
        s = salt * 31 + o
        v = ((_lattice(ix, iy, s) * (1 - fx) + _lattice(ix + 1, iy, s) * fx) * (1 - fy)
             + (_lattice(ix, iy + 1, s) * (1 - fx) + _lattice(ix + 1, iy + 1, s) * fx) * fy)
        out += amp * (2 * v - 1)
        total += amp
        amp *= 0.5
        cell /= 2
    return out / total


def _camera_axes(scene: PlainRoad) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    psi, th = math.radians(scene.yaw_deg), math.radians(scene.pitch_deg)
    fwd = np.array([math.sin(psi) * math.cos(th), math.cos(psi) * math.cos(th), math.sin(th)])
    right = np.array([math.cos(psi), -math.sin(psi), 0.0])
    return right, np.cross(fwd, right), fwd


def _ground_colour(scene: PlainRoad, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Albedo (N, 3) and class of ground points."""
    s = scene.seed
    ax = np.abs(x)
    half = scene.road_width_m / 2
    rgb = np.zeros(x.shape + (3,), np.float32)
    cls = np.full(x.shape, SEG["terrain"], np.uint8)
    # asphalt: a base shade, coarse patches (repairs, wear), fine grain
    n1 = _value_noise(x, y, 4.0, s + 1, 2)
    n2 = _value_noise(x, y, 0.4, s + 2, 2)
    asphalt = np.array(scene.asphalt, np.float32) * (1 + 0.18 * scene.wear * n1 + 0.08 * n2)[..., None]
    road = ax <= half
    rgb[road] = asphalt[road]
    cls[road] = SEG["road"]
    paint = np.zeros(x.shape, bool)
    if scene.edge_lines:
        paint |= road & (ax >= half - 0.35) & (ax <= half - 0.2)
    if scene.centre_line == "solid":
        paint |= np.abs(x) <= 0.06
    elif scene.centre_line == "dashed":
        paint |= (np.abs(x) <= 0.06) & (np.mod(y + 3.0 * (s % 3), 9.0) < 3.0)
    worn = 0.75 + 0.25 * _value_noise(x, y, 0.7, s + 3, 2)
    line = np.array(scene.line_colour, np.float32)
    rgb[paint] = (line * worn[paint, None] + asphalt[paint] * (1 - worn[paint, None]))
    for side, sign in ((0, -1.0), (1, 1.0)):
        on_side = (x * sign) > half
        for kind, inner, outer in scene.verge_edges(side):
            band = on_side & (ax > inner) & (ax <= outer)
            if not band.any():
                continue
            cls[band] = SEG[_VERGE_CLASS[kind]]
            bx, by = x[band], y[band]
            if kind == "kerb":
                c = np.array([175.0, 172.0, 165.0]) * (1 + 0.06 * _value_noise(bx, by, 0.5, s + 4, 2))[:, None]
            elif kind == "sidewalk":
                base = np.array([[150.0, 148.0, 142.0], [160.0, 110.0, 95.0], [185.0, 170.0, 140.0]])[(s >> 1) % 3]
                p = 0.3 + 0.3 * ((s >> 2) % 2)
                joint = (np.mod(bx, p) < 0.02) | (np.mod(by, p) < 0.02)
                c = base * (1 + 0.08 * _value_noise(bx, by, 1.0, s + 5, 2))[:, None]
                c = np.where(joint[:, None], c * 0.7, c)
            elif kind == "grass":
                c = np.array([70.0, 115.0, 45.0]) * (1 + 0.3 * _value_noise(bx, by, 1.5, s + 6, 3))[:, None]
                c[:, 0] *= 1 + 0.3 * ((s >> 3) % 3) / 2   # from lush to dry
            elif kind == "gravel":
                c = np.array([140.0, 130.0, 115.0]) * (1 + 0.25 * _value_noise(bx, by, 0.15, s + 7, 2))[:, None]
            else:
                c = np.array([125.0, 95.0, 65.0]) * (1 + 0.2 * _value_noise(bx, by, 0.8, s + 8, 3))[:, None]
            rgb[band] = c
        beyond = on_side & (ax > scene.verge_edges(side)[-1][2])
        rgb[beyond] = np.array([85.0, 110.0, 55.0]) * (1 + 0.3 * _value_noise(x[beyond], y[beyond], 2.0, s + 9,
                                                                                 3))[:, None]
        cls[beyond] = SEG["terrain"]
    if scene.shadows > 0:
        shade = _value_noise(x, y, 3.0, s + 10, 2) > (1 - 2 * scene.shadows) * 0.6
        rgb[shade] *= 0.55
    return rgb, cls


def _backdrop_colour(scene: PlainRoad, side: int, y: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = scene.seed + 100 * side
    kind = scene.backdrops[side]
    if kind == "facade":
        base = np.array([[200.0, 190.0, 170.0], [150.0, 80.0, 60.0], [120.0, 125.0, 130.0],
                         [220.0, 215.0, 205.0]])[s % 4]
        c = base * (1 + 0.05 * _value_noise(y, z, 1.0, s + 11, 2))[..., None]
        window = (np.mod(y, 3.5) > 1.2) & (np.mod(y, 3.5) < 2.6) & (np.mod(z, 3.0) > 1.0) & (np.mod(z, 3.0) < 2.4) \
            & (z > 0.8)
        c = np.where(window[..., None], np.array([45.0, 55.0, 65.0]), c)
        return c, np.full(y.shape, SEG["building"], np.uint8)
    c = np.array([40.0, 70.0, 35.0]) * (1 + 0.35 * _value_noise(y, z, 0.8, s + 12, 3))[..., None]
    return c, np.full(y.shape, SEG["vegetation"], np.uint8)


def _sky(scene: PlainRoad, d: np.ndarray) -> np.ndarray:
    up = np.clip(d[..., 2] / np.linalg.norm(d, axis=-1), 0, 1)[..., None]
    if scene.sky == "overcast":
        c = np.array([195.0, 198.0, 202.0]) * (1 - 0.15 * up)
        clouds = _value_noise(d[..., 0] / np.maximum(d[..., 2], 0.05), d[..., 1] / np.maximum(d[..., 2], 0.05),
                              0.8, scene.seed + 13, 3)
        return c * (1 + 0.08 * clouds[..., None])
    horizon, zenith = np.array([200.0, 215.0, 230.0]), np.array([70.0, 120.0, 200.0])
    return horizon * (1 - up ** 0.6) + zenith * up ** 0.6


def render_plain(scene: PlainRoad) -> PlainFrame:
    """Ray-cast the scene: RGB (through lens blur, noise and JPEG), z-depth and classes."""
    h, w = scene.height, scene.width
    u, v = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
    right, down, fwd = _camera_axes(scene)
    cx, cy, f = w / 2.0, h / 2.0, scene.focal_px
    d = ((u - cx) / f)[..., None] * right + ((v - cy) / f)[..., None] * down + fwd   # camera z = 1: t is z-depth
    ox, oz = scene.camera_x_m, scene.camera_height_m
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(d[..., 2] < -1e-9, oz / -d[..., 2], np.inf)
    rgb = _sky(scene, d)
    seg = np.full((h, w), SEG["sky"], np.uint8)
    ground = np.isfinite(t)
    gx, gy = ox + t * d[..., 0], t * d[..., 1]
    g_rgb, g_cls = _ground_colour(scene, gx[ground], gy[ground])
    rgb[ground], seg[ground] = g_rgb, g_cls
    for side, sign in ((0, -1.0), (1, 1.0)):
        if scene.backdrops[side] == "open":
            continue
        xb = sign * scene.backdrop_x(side)
        with np.errstate(divide="ignore", invalid="ignore"):
            tb = np.where(d[..., 0] * sign > 1e-9, (xb - ox) / d[..., 0], np.inf)
        zb = oz + tb * d[..., 2]
        hit = np.isfinite(tb) & (tb < t) & (zb >= 0) & (zb <= scene.backdrop_height_m[side])
        if hit.any():
            b_rgb, b_cls = _backdrop_colour(scene, side, tb[hit] * d[..., 1][hit], zb[hit])
            rgb[hit], seg[hit] = b_rgb, b_cls
            t = np.where(hit, tb, t)
    # light: sun strength and colour on everything but the sky, haze towards the horizon's colour
    lit = seg != SEG["sky"]
    rgb[lit] *= scene.sun * np.array(scene.tint, np.float32)
    haze = np.exp(-np.where(np.isfinite(t), t, 1e9) / scene.haze_m)[..., None]
    rgb = rgb * haze + np.array([205.0, 212.0, 222.0]) * (1 - haze)
    img = Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8))
    if scene.blur_px > 0.05:
        img = img.filter(ImageFilter.GaussianBlur(scene.blur_px))
    noisy = np.asarray(img, np.float32) + np.random.default_rng([scene.seed, 7]).normal(0, scene.noise, (h, w, 3))
    buf = io.BytesIO()
    Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=scene.jpeg_quality)
    out = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
    return PlainFrame(scene=scene, rgb=out, depth=t.astype(np.float32), seg=seg)
