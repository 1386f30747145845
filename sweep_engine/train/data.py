"""Training and held-out samples: varied synthetic streets, rendered with exact truth, then augmented.

``sample(seed, index)`` is a pure function of its arguments: the scene's
parameters and every augmentation are drawn from ``numpy.random.default_rng``
seeded with ``(seed, index)``.  Variety drawn here (on top of what
``synth.street_scene`` lays out: kerbs, sidewalks, poles, signs, gates,
entrances, drains, fences, trees, wires, facades):

- road width 3-20 m; camera height 1.0-3.2 m (1.2-2.8 before
  ``sis-synth-train/4``: a phone held low to a van's roof rig); focal length
  0.5-1.2 x the larger image side (0.55-1.1 before: action cameras to a
  phone's 2x lens); pitch -6..+4 deg; yaw +-8 deg; roll +-3 deg (augment);
- 0-6 vehicles (car, truck, bus from ``labels.SIZE_PRIORS``), sizes x N(1, 0.03)
  and widths +-0.15 m, as fleets vary;
- lighting, per-class textures, blur, sensor noise, rain, JPEG (``augment``);
- in ``Variety.look`` of the scenes (80 %), a wider street painted in a drawn
  look (``synth.look``): each side's verge drawn apart (kerb and pavement,
  kerb and grass, grass, gravel then grass, bare soil, a flush pavement),
  buildings, a hedge or open land behind it, the camera anywhere across the
  road, textured asphalt (dark to concrete-pale) with repairs and
  stains (since ``sis-synth-train/3``, in 45 % of looks), markings (edge lines, centre
  lines dashed, solid or double, white or yellow, worn), clear or overcast
  sky with clouds, sun and shade, haze. The rest keep the first generator's
  layout and flat palette, so what the networks learnt there stays covered;
- since ``sis-synth-train/4``, where things stand (``Variety.spread``,
  ``synth.street_scene(spread=True)``): vehicles at drawn distances, each
  piece of furniture present or not and at a drawn distance and size,
  buildings 4-25 m high. Before, every street put its poles at 14 and 26 m,
  its sign at 18 m, its vehicles at 10, 18 and 26 m, its buildings at 12 m:
  the dense network's focal head learnt those objects' image rows (on
  validation scenes with the furniture left out it read the focal length 25 %
  short, on the independent renderer's plain roads 47 %, about 0.55 x the
  larger side whatever the truth), and the depth its scale from them.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..labels import DET_CLASSES
from ..synth import render, street_scene
from ..synth.look import draw_look
from . import augment

GENERATOR_VERSION = "sis-synth-train/4"


def generator_id() -> str:
    """``GENERATOR_VERSION`` and sha256 of the generator's sources (synth/ and this package's data code)."""
    here = Path(__file__).resolve().parent
    files = sorted((here.parent / "synth").glob("*.py")) + [here / "data.py", here / "augment.py"]
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return f"{GENERATOR_VERSION}+{h.hexdigest()[:16]}"


@dataclass
class Variety:
    """Ranges the scenes are drawn from; ``augment`` scales the photometric chain (0: clean renders)."""

    road_width_m: tuple[float, float] = (3.0, 20.0)
    camera_height_m: tuple[float, float] = (1.0, 3.2)
    focal_factor: tuple[float, float] = (0.5, 1.2)
    pitch_deg: tuple[float, float] = (-6.0, 4.0)
    yaw_deg: float = 8.0
    roll_deg: float = 3.0
    max_vehicles: int = 6
    augment: float = 1.0
    look: float = 0.8   # share of scenes with a drawn layout and look (the rest: flat palette, kerbs both sides)
    spread: bool = True  # things at drawn places (``street_scene(spread=True)``); False: generator 3's fixed ones


@dataclass
class Sample:
    rgb: np.ndarray            # (H, W, 3) uint8, as a decoded JPEG
    depth: np.ndarray          # (H, W) float32 z-depth metres; inf sky, NaN unknown
    seg: np.ndarray            # (H, W) uint8 class index, augment.IGNORE unknown
    boxes: np.ndarray          # (N, 4) float32 x0, y0, x1, y1 of visible pixels
    labels: list[str]          # detector labels of the boxes
    frame: object = None       # the synth.Frame (truth before roll and photometric changes)
    roll_deg: float = 0.0
    info: dict = field(default_factory=dict)


def scene_params(rng: np.random.Generator, v: Variety, width: int, height: int) -> dict:
    return dict(road_width_m=float(rng.uniform(*v.road_width_m)),
                camera_height_m=float(rng.uniform(*v.camera_height_m)),
                focal_px=float(rng.uniform(*v.focal_factor)) * max(width, height),
                pitch_deg=float(rng.uniform(*v.pitch_deg)), yaw_deg=float(rng.uniform(-v.yaw_deg, v.yaw_deg)),
                n_vehicles=int(rng.integers(0, v.max_vehicles + 1)),
                vehicle_scale=float(np.clip(rng.normal(1.0, 0.03), 0.93, 1.07)),
                width_jitter=float(rng.uniform(-0.15, 0.15)))


# Verge styles, each (material, width range m) from the road's edge outwards.
VERGE_STYLES: tuple[tuple[tuple[str, tuple[float, float]], ...], ...] = (
    (("kerb", (0.1, 0.3)), ("paving", (1.2, 4.5))),
    (("kerb", (0.1, 0.3)), ("asphalt_path", (1.2, 3.5))),
    (("kerb", (0.1, 0.3)), ("paving", (1.5, 3.0)), ("grass", (0.5, 3.0))),
    (("kerb", (0.1, 0.3)), ("grass", (0.5, 4.0))),
    (("grass", (0.5, 6.0)),),
    (("gravel", (0.3, 2.0)), ("grass", (0.5, 5.0))),
    (("soil", (0.5, 4.0)),),
    (("paving", (1.0, 4.0)),),
)
BEYOND = ("grass", "grass", "soil", "gravel", "paving")


def layout_params(rng: np.random.Generator, road_width_m: float) -> dict:
    """A drawn street layout (``synth.street_scene``'s verges, beyond, backdrops, setback, camera)."""
    verges = []
    for _ in range(2):
        style = VERGE_STYLES[int(rng.integers(0, len(VERGE_STYLES)))]
        verges.append(tuple((m, float(rng.uniform(*span))) for m, span in style))
    return dict(verges=tuple(verges), beyond=tuple(BEYOND[int(rng.integers(0, len(BEYOND)))] for _ in range(2)),
                backdrops=tuple(("building", "building", "hedge", "open")[int(rng.integers(0, 4))] for _ in range(2)),
                setback_m=float(rng.uniform(0.2, 4.0)), hedge_height_m=float(rng.uniform(1.2, 4.5)),
                camera_a=float(rng.uniform(-1, 1)) * max(0.0, road_width_m / 2 - 0.8))


def boxes_from_instances(inst: np.ndarray, frame, min_pixels: int = 12, min_side: int = 3):
    """Tight boxes of each labelled object's visible pixels; tiny slivers are left out."""
    boxes, labels = [], []
    for o in frame.objects:
        if not o.label:
            continue
        ys, xs = np.nonzero(inst == o.instance)
        if len(xs) < min_pixels:
            continue
        x0, y0, x1, y1 = xs.min(), ys.min(), xs.max() + 1, ys.max() + 1
        if x1 - x0 < min_side or y1 - y0 < min_side:
            continue
        boxes.append((x0, y0, x1, y1))
        labels.append(o.label)
    return np.array(boxes, np.float32).reshape(-1, 4), labels


def sample(seed: int, index: int, *, width: int = 256, height: int = 192, variety: Variety | None = None) -> Sample:
    v = variety or Variety()
    rng = np.random.default_rng([seed, index])
    params = scene_params(rng, v, width, height)
    scene_seed = int(rng.integers(0, 2**31 - 1))
    look, layout = None, {}
    if rng.random() < v.look:
        layout = layout_params(rng, params["road_width_m"])
        look = draw_look(rng)
    frame = render(street_scene(scene_seed, width=width, height=height, spread=v.spread, **params, **layout), look)
    r = float(rng.uniform(-v.roll_deg, v.roll_deg)) if rng.random() < 0.5 else 0.0
    rgb, depth, seg, inst = augment.roll(frame.rgb, frame.depth, frame.seg, frame.instance, r)
    rgb = augment.photometric(rgb, np.where(seg == augment.IGNORE, 0, seg), rng, strength=v.augment)
    boxes, labels = boxes_from_instances(inst, frame)
    return Sample(rgb=rgb, depth=depth, seg=seg, boxes=boxes, labels=labels, frame=frame, roll_deg=r,
                  info={**params, **layout, "look": look is not None})


def det_label_index(label: str) -> int:
    return DET_CLASSES.index(label) + 1
