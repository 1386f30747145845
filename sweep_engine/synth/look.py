"""How a generated street is painted: surfaces with texture, road markings, sky, sun, shadows and haze.

The flat palette (one colour a class, ``render(scene)``) taught the first
networks that a class *is* a colour: blue was a vehicle, grey was road, and
on a street painted otherwise they labelled sky as vehicle and grass and
pavements as road. A ``Look``, drawn per scene by ``draw_look``, paints every
surface from its material (``scene.MATERIAL_CLASS``) with colours drawn from
wide ranges and textures laid in world coordinates (so that they shrink with
distance as real ones do), and never changes the truth: depth, classes and
instances are the renderer's.

Textures are value noise on a tiled lattice, each octave faded out where a
pixel covers more than half its cell: the anti-aliasing that a camera's
optics do, without rendering at a higher resolution.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..labels import SEG
from .scene import MATERIALS, Scene

# Base colours (RGB) a material's colour is drawn around, and the spread of that draw.
_MATERIAL_COLOURS: dict[str, tuple[tuple[float, float, float], ...]] = {
    "asphalt": ((60, 60, 64), (95, 95, 98), (125, 122, 118), (45, 46, 52), (150, 150, 148), (170, 168, 160)),
    "kerb": ((175, 175, 170), (140, 140, 138), (200, 195, 185)),
    "paving": ((165, 160, 150), (150, 95, 80), (125, 125, 130), (190, 180, 160)),
    "asphalt_path": ((85, 82, 80), (110, 100, 95), (70, 70, 75)),
    "grass": ((70, 115, 45), (105, 130, 60), (50, 85, 35), (130, 135, 75), (60, 170, 40), (95, 190, 60)),
    "gravel": ((150, 140, 125), (120, 115, 110), (170, 160, 140)),
    "soil": ((120, 95, 70), (140, 115, 85), (95, 75, 55)),
}
# Per material: (fine, middle, coarse) texture amplitude and the cell sizes in metres they vary over.
_MATERIAL_TEXTURE: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    "asphalt": ((0.10, 0.06, 0.10), (0.04, 0.4, 3.0)),
    "kerb": ((0.05, 0.05, 0.05), (0.05, 0.5, 2.0)),
    "paving": ((0.06, 0.05, 0.08), (0.04, 0.5, 2.5)),
    "asphalt_path": ((0.10, 0.06, 0.10), (0.04, 0.4, 3.0)),
    "grass": ((0.22, 0.15, 0.20), (0.05, 0.35, 2.5)),
    "gravel": ((0.30, 0.08, 0.08), (0.03, 0.3, 2.0)),
    "soil": ((0.12, 0.15, 0.22), (0.06, 0.5, 3.0)),
}
_PAINTS = ((235, 235, 235), (25, 25, 28), (140, 142, 148), (190, 192, 196), (150, 25, 30), (30, 55, 120),
           (40, 70, 45), (200, 170, 60), (90, 60, 40), (60, 110, 160))
_CLASS_COLOURS: dict[str, tuple[tuple[float, float, float], ...]] = {
    "building": ((220, 215, 200), (180, 120, 90), (150, 150, 150), (200, 185, 150), (110, 80, 70), (90, 95, 100)),
    "vegetation": ((50, 100, 35), (35, 75, 30), (80, 110, 45), (60, 90, 55)),
    "pole": ((110, 110, 115), (60, 70, 60), (120, 90, 60), (170, 170, 170)),
    "sign": ((200, 30, 30), (30, 70, 170), (230, 230, 230), (230, 190, 40)),
    "fence": ((120, 95, 65), (100, 100, 100), (40, 60, 40), (170, 170, 165)),
    "person": ((40, 40, 60), (170, 60, 50), (200, 200, 190), (70, 90, 60)),
    "gate": ((80, 55, 30), (60, 60, 60), (40, 50, 80)),
    "entrance": ((60, 40, 30), (90, 60, 40), (30, 30, 35)),
    "wires": ((25, 25, 25),),
    "drainage": ((45, 45, 45), (70, 65, 60)),
}


@dataclass(frozen=True)
class Look:
    """Everything ``paint`` draws from, fixed per scene (so a drive along one street keeps its look)."""

    seed: int
    materials: tuple[tuple[float, float, float], ...]   # one colour per ``scene.MATERIALS`` entry
    texture_gain: float
    classes: dict                                        # class -> colour, for the standing objects
    paints: tuple[tuple[float, float, float], ...]       # vehicles, by instance
    edge_line_m: float | None                            # edge lines this far inside the road's edge, or none
    centre_line: str                                     # none, dashed, solid, double
    line_colour: tuple[float, float, float]
    line_width_m: float
    line_wear: float
    sky_zenith: tuple[float, float, float]
    sky_horizon: tuple[float, float, float]
    clouds: float
    sun_dir: tuple[float, float, float]                  # road frame (a, s, z), towards the sun
    sun: float                                           # direct light's share (0: overcast)
    tree_shadows: float                                  # share of the ground in dappled shade
    shadow_cell_m: float                                 # how large the dapples are
    side_shadow: tuple[int, float] | None                # (side, width m) of a building's shade on the road
    patches: tuple[float, float, float] | None           # asphalt repairs and stains: (share, size m, tone)
    haze_m: float
    windows: tuple[float, float, float] | None          # facade: (spacing m, width m, floor height m)
    glass: tuple[float, float, float]


def _pick(rng: np.random.Generator, options, spread: float = 0.12) -> tuple[float, float, float]:
    base = np.asarray(options[int(rng.integers(0, len(options)))], np.float32)
    return tuple(float(c) for c in np.clip(base * rng.uniform(1 - spread, 1 + spread, 3), 0, 255))


def _patches(seed: int) -> tuple[float, float, float] | None:
    """Asphalt repairs, wet or oily stains: sharp-edged blotches darker or paler than the road around them,
    which a network that knows only even asphalt labels pavement or verge, cutting the road's mask short.
    Drawn from the look's own seed, so that adding them left every other draw of a scene as it was."""
    rng = np.random.default_rng(seed + 1)
    if rng.random() >= 0.45:
        return None
    tone = rng.uniform(0.5, 0.85) if rng.random() < 0.6 else rng.uniform(1.15, 1.5)
    return float(rng.uniform(0.05, 0.4)), float(rng.uniform(1.5, 8.0)), float(tone)


def draw_look(rng: np.random.Generator) -> Look:
    """A random look, deterministic in ``rng``."""
    overcast = rng.random() < 0.35
    elevation = rng.uniform(0.15, 1.2)
    azimuth = rng.uniform(0, 2 * np.pi)
    yellow = rng.random() < 0.3
    if overcast:
        grey = rng.uniform(150, 225)
        zenith = horizon = (grey, grey, grey * rng.uniform(1.0, 1.06))
    else:
        zenith = _pick(rng, ((70, 120, 200), (100, 150, 220), (60, 110, 180)), 0.15)
        horizon = _pick(rng, ((180, 205, 230), (210, 215, 220), (200, 190, 170)), 0.08)
    seed = int(rng.integers(0, 2**31 - 1))
    return Look(
        seed=seed,
        materials=tuple(_pick(rng, _MATERIAL_COLOURS[m]) for m in MATERIALS),
        texture_gain=float(rng.uniform(0.5, 1.6)),
        classes={c: _pick(rng, opts) for c, opts in _CLASS_COLOURS.items()},
        paints=tuple(_pick(rng, _PAINTS, 0.08) for _ in range(8)),
        edge_line_m=float(rng.uniform(0.1, 0.6)) if rng.random() < 0.55 else None,
        centre_line=("none", "dashed", "solid", "double")[int(rng.choice(4, p=(0.35, 0.35, 0.2, 0.1)))],
        line_colour=(225.0, 185.0, 50.0) if yellow else (235.0, 235.0, 228.0),
        line_width_m=float(rng.uniform(0.1, 0.25)),
        line_wear=float(rng.uniform(0.0, 0.6)),
        sky_zenith=zenith, sky_horizon=horizon,
        clouds=0.0 if overcast else float(rng.uniform(0, 0.8)),
        sun_dir=(float(np.cos(elevation) * np.sin(azimuth)), float(np.cos(elevation) * np.cos(azimuth)),
                 float(np.sin(elevation))),
        sun=float(rng.uniform(0.0, 0.15)) if overcast else float(rng.uniform(0.35, 0.7)),
        tree_shadows=float(rng.uniform(0.1, 0.45)) if rng.random() < 0.3 else 0.0,
        shadow_cell_m=float(rng.uniform(0.8, 5.0)),
        side_shadow=(int(rng.integers(0, 2)), float(rng.uniform(1.0, 8.0))) if rng.random() < 0.25 else None,
        patches=_patches(seed),
        haze_m=float(np.exp(rng.uniform(np.log(150), np.log(3000)))),
        windows=(float(rng.uniform(2.2, 4.0)), float(rng.uniform(0.8, 1.6)), float(rng.uniform(2.8, 3.6)))
        if rng.random() < 0.75 else None,
        glass=_pick(rng, ((50, 60, 75), (90, 110, 130), (30, 35, 40)), 0.15),
    )


class _Noise:
    """Value noise on tiled 64 x 64 lattices, bilinear between lattice points."""

    def __init__(self, seed: int, layers: int = 6):
        self.grids = np.random.default_rng(seed).random((layers, 64, 64)).astype(np.float32) * 2 - 1

    def __call__(self, layer: int, x: np.ndarray, y: np.ndarray, cell: float) -> np.ndarray:
        g = self.grids[layer % len(self.grids)]
        gx, gy = x / cell, y / cell
        x0, y0 = np.floor(gx), np.floor(gy)
        fx, fy = (gx - x0).astype(np.float32), (gy - y0).astype(np.float32)
        i0, j0 = x0.astype(np.int64) % 64, y0.astype(np.int64) % 64
        i1, j1 = (i0 + 1) % 64, (j0 + 1) % 64
        return ((g[i0, j0] * (1 - fx) + g[i1, j0] * fx) * (1 - fy) + (g[i0, j1] * (1 - fx) + g[i1, j1] * fx) * fy)

    def fractal(self, layer: int, x, y, amps, cells, footprint) -> np.ndarray:
        """Sum of octaves, each faded where a pixel's footprint reaches half its cell (no aliasing)."""
        out = np.zeros(np.shape(x), np.float32)
        for k, (amp, cell) in enumerate(zip(amps, cells)):
            fade = np.clip(cell / np.maximum(footprint, 1e-6) / 2 - 1, 0, 1)
            if np.any(fade > 0):
                out += amp * fade * self(layer + k, x, y, cell)
        return out


def _markings(look: Look, road_w: float, a: np.ndarray, s: np.ndarray, footprint: np.ndarray) -> np.ndarray:
    """Coverage 0..1 of painted lines at road-frame (a, s), blurred by the pixel's footprint."""
    half = look.line_width_m / 2

    def line(centre: float, dashed: bool = False) -> np.ndarray:
        soft = np.maximum(footprint, 0.02)
        cover = np.clip((half + soft / 2 - np.abs(a - centre)) / soft, 0, 1)
        if dashed:
            phase = np.mod(s, 9.0)
            cover = cover * np.clip((3.0 - phase) / np.maximum(footprint, 0.05) + 0.5, 0, 1) * (phase < 3.5)
        return cover

    cover = np.zeros_like(a, dtype=np.float32)
    if look.edge_line_m is not None:
        for sign in (-1, 1):
            cover = np.maximum(cover, line(sign * (road_w / 2 - look.edge_line_m)))
    if look.centre_line == "dashed":
        cover = np.maximum(cover, line(0.0, dashed=True))
    elif look.centre_line == "solid":
        cover = np.maximum(cover, line(0.0))
    elif look.centre_line == "double":
        cover = np.maximum(np.maximum(cover, line(-1.5 * look.line_width_m)), line(1.5 * look.line_width_m))
    if road_w > 12 and look.centre_line != "none":
        for sign in (-1, 1):
            cover = np.maximum(cover, line(sign * road_w / 4, dashed=True))
    return cover


def paint(look: Look, scene: Scene, d: np.ndarray, depth: np.ndarray, seg: np.ndarray, inst: np.ndarray,
          points: np.ndarray, ground_material: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """RGB (float, 0-255) of a rendered frame: ``d`` road-frame ray directions, ``points`` the hit points
    (a, s, z), ``ground_material`` the ``MATERIALS`` index of ground pixels (-1 elsewhere)."""
    h, w = seg.shape
    noise = _Noise(look.seed)
    finite = np.isfinite(depth)
    z = np.where(finite, depth, 1e6)
    footprint = (z / scene.focal_px).astype(np.float32)   # metres a pixel spans on a facing surface
    a, s, up = points[..., 0], points[..., 1], points[..., 2]
    rgb = np.zeros((h, w, 3), np.float32)
    sun = np.asarray(look.sun_dir, np.float32)
    ambient = 1.0 - look.sun

    ground = ground_material >= 0
    if ground.any():
        ga, gs = a[ground], s[ground]
        # On the ground a pixel spans more along the view than across it: depth over the camera's height.
        fp = footprint[ground] * np.maximum(1.0, z[ground] / max(scene.camera_height_m, 0.5))
        mats = ground_material[ground]
        colours = np.asarray(look.materials, np.float32)[mats]
        shade = np.ones(len(mats), np.float32)
        for m, material in enumerate(MATERIALS):
            on = mats == m
            if not on.any():
                continue
            amps, cells = _MATERIAL_TEXTURE[material]
            amps = tuple(x * look.texture_gain for x in amps)
            shade[on] += noise.fractal(m, ga[on], gs[on], amps, cells, fp[on])
            if material == "paving":   # joints between slabs
                size = 0.3 + 0.5 * (look.seed % 3)
                joint = (np.minimum(np.mod(ga[on], size), np.mod(gs[on], size)) < 0.02) & (fp[on] < size / 4)
                shade[on] -= 0.2 * joint
        colours = colours * shade[:, None]
        road = mats == MATERIALS.index("asphalt")
        if road.any() and look.patches is not None:
            share, size, tone = look.patches
            field = noise(0, ga[road] + 17.0, gs[road], size) + 0.4 * noise(1, ga[road], gs[road] + 29.0, size / 3)
            soft = np.maximum(fp[road] / size, 0.02)   # the blotch's edge, blurred by the pixel's footprint
            blot = np.clip((field - (1 - 2 * share)) / soft, 0, 1)
            colours[road] = colours[road] * (1 + (tone - 1) * blot)[:, None]
        if road.any():
            cover = _markings(look, scene.street.road_width_m, ga[road], gs[road], fp[road])
            wear = 1 - look.line_wear * np.clip(noise(5, ga[road], gs[road], 0.3) + 0.5, 0, 1)
            cover = (cover * wear)[:, None]
            colours[road] = colours[road] * (1 - cover) + np.asarray(look.line_colour, np.float32) * cover
        light = ambient + look.sun * max(sun[2], 0.0) * 1.4
        dark = np.zeros(len(mats), np.float32)
        if look.tree_shadows:
            dapple = noise(4, ga, gs, look.shadow_cell_m) + 0.5 * noise(3, ga, gs, look.shadow_cell_m / 3)
            dark = np.maximum(dark, np.clip((dapple - (1 - 2 * look.tree_shadows)) * 4, 0, 1))
        if look.side_shadow is not None:
            side, width = look.side_shadow
            edge = scene.street.road_width_m / 2 - width
            dark = np.maximum(dark, np.clip(((ga if side else -ga) - edge) * 4, 0, 1))
        light = light * (1 - 0.75 * look.sun / 0.7 * dark)
        rgb[ground] = colours * light[:, None]

    standing = finite & ~ground
    if standing.any():
        ids = inst[standing]
        cls = seg[standing]
        colours = np.zeros((len(ids), 3), np.float32)
        for name, colour in look.classes.items():
            colours[cls == SEG[name]] = colour
        vehicles = cls == SEG["vehicle"]
        if vehicles.any():
            paints = np.asarray(look.paints, np.float32)
            colours[vehicles] = paints[ids[vehicles] % len(paints)]
        pa, ps, pz = a[standing], s[standing], up[standing]
        fp = footprint[standing]
        shade = 1 + 0.08 * look.texture_gain * noise.fractal(2, pa + ps, pz, (1.0, 0.6), (0.05, 0.6), fp)
        boxes = scene.boxes
        normals = np.zeros((len(ids), 3), np.float32)
        for i in np.unique(ids):
            if i < 0 or i >= len(boxes):
                continue
            b, on = boxes[i], ids == i
            dist = np.stack([np.abs(pa[on] - b.a0), np.abs(pa[on] - b.a1), np.abs(ps[on] - b.s0),
                             np.abs(ps[on] - b.s1), np.abs(pz[on] - b.z1)], axis=1)
            face = np.argmin(dist, axis=1)
            normals[on] = np.array([(-1, 0, 0), (1, 0, 0), (0, -1, 0), (0, 1, 0), (0, 0, 1)], np.float32)[face]
            height = max(b.z1 - b.z0, 1e-3)
            rel = (pz[on] - b.z0) / height
            if b.seg == "vehicle":   # glass above the waist, tyres and shadow at the bottom
                glass = (rel > 0.55) & (rel < 0.92) & (face < 4)
                colours[np.flatnonzero(on)[glass]] = look.glass
                shade[np.flatnonzero(on)[rel < 0.18]] *= 0.35
            elif b.seg == "building" and look.windows is not None:
                spacing, width, floor = look.windows
                along = np.where(face < 2, ps[on], pa[on])
                win = ((np.mod(along, spacing) < width) & (np.mod(pz[on], floor) > 0.9) &
                       (np.mod(pz[on], floor) < floor - 0.5) & (fp[on] < width / 2) & (face < 4))
                colours[np.flatnonzero(on)[win]] = look.glass
        lambert = np.clip(normals @ sun, 0, None)
        light = ambient + look.sun * lambert * 1.4
        rgb[standing] = colours * (shade * light)[:, None]

    sky = ~finite
    if sky.any():
        rays = d[sky]
        elevation = np.arctan2(rays[:, 2], np.hypot(rays[:, 0], rays[:, 1]))
        t = np.clip(elevation / 0.6, 0, 1)[:, None]
        colours = np.asarray(look.sky_horizon, np.float32) * (1 - t) + np.asarray(look.sky_zenith, np.float32) * t
        if look.clouds:
            # Clouds on a plane above: its coordinates where each ray meets it.
            k = 1.0 / np.maximum(rays[:, 2], 0.02)
            cloud = noise.fractal(1, rays[:, 0] * k, rays[:, 1] * k, (1.0, 0.5, 0.25), (0.8, 0.3, 0.1),
                                  np.full(len(k), 1e-3, np.float32))
            cover = np.clip((cloud + look.clouds - 0.6) * 2, 0, 1)[:, None] * (1 - 0.5 * (1 - t))
            colours = colours * (1 - cover) + 235.0 * cover
        rgb[sky] = colours

    haze = np.exp(-np.where(finite, depth, 0.0) / look.haze_m)[..., None]   # the sky is its own colour
    rgb = rgb * haze + np.asarray(look.sky_horizon, np.float32) * (1 - haze)
    return rgb + rng.normal(0, 2.0, rgb.shape)
