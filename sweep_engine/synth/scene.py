"""Procedural street scenes: a straight road with kerbs, sidewalks, facades and street furniture.

Everything is laid out in a *road frame* — ``a`` across the road (metres, right
of the centreline when facing ``road_azimuth_deg``), ``s`` along it, ``z`` up —
as axis-aligned boxes, so the ground truth is exact and the renderer a slab
test.  A scene is deterministic in its seed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from ..camera import Camera, offset_lonlat
from ..labels import SIZE_PRIORS

# What the ground beside the road is made of, and the class each is labelled: a material decides how a
# band is painted (``synth.look``), its class what the networks learn to call it.
MATERIAL_CLASS: dict[str, str] = {
    "asphalt": "road", "kerb": "kerb", "paving": "sidewalk", "asphalt_path": "sidewalk",
    "grass": "terrain", "gravel": "terrain", "soil": "terrain",
}
MATERIALS: tuple[str, ...] = tuple(MATERIAL_CLASS)


@dataclass(frozen=True)
class Box:
    """An object: a road-frame axis-aligned box with its segmentation class and detector label."""

    seg: str
    det: str | None
    a0: float
    a1: float
    s0: float
    s1: float
    z0: float
    z1: float
    name: str = ""

    @property
    def centre(self) -> tuple[float, float]:
        return (self.a0 + self.a1) / 2, (self.s0 + self.s1) / 2


@dataclass(frozen=True)
class Street:
    road_width_m: float = 7.0
    kerb_width_m: float = 0.2
    sidewalk_width_m: float = 2.5
    setback_m: float = 1.0
    road_azimuth_deg: float = 0.0
    lon: float = 13.4
    lat: float = 52.5
    drains: tuple[tuple[float, float, float, float], ...] = ()  # (a0, a1, s0, s1) grates on the ground
    # Each side's bands from the road's edge outwards, (material, width); None: a kerb and a paved sidewalk
    # on both sides. ``beyond`` is what lies past the last band, to the backdrop or the horizon.
    verges: tuple[tuple[tuple[str, float], ...], tuple[tuple[str, float], ...]] | None = None
    beyond: tuple[str, str] = ("grass", "grass")

    @property
    def kerb_outer(self) -> float:
        return self.road_width_m / 2 + self.kerb_width_m

    @property
    def facade(self) -> float:
        return self.kerb_outer + self.sidewalk_width_m + self.setback_m

    def bands(self, side: int) -> list[tuple[str, float, float]]:
        """``(material, inner |a|, outer |a|)`` of one side's verge (0: left, a < 0; 1: right)."""
        layout = self.verges[side] if self.verges else (("kerb", self.kerb_width_m), ("paving", self.sidewalk_width_m))
        out, a = [], self.road_width_m / 2
        for material, width in layout:
            out.append((material, a, a + width))
            a += width
        return out

    def verge_outer(self, side: int) -> float:
        """|a| where one side's verge ends."""
        bands = self.bands(side)
        return bands[-1][2] if bands else self.road_width_m / 2

    def along(self) -> np.ndarray:
        az = math.radians(self.road_azimuth_deg)
        return np.array([math.sin(az), math.cos(az), 0.0])

    def across(self) -> np.ndarray:
        az = math.radians(self.road_azimuth_deg)
        return np.array([math.cos(az), -math.sin(az), 0.0])

    def to_enu(self, a, s) -> tuple[np.ndarray, np.ndarray]:
        """Road-frame (a, s) to ENU (east, north) about the street's origin."""
        a, s = np.asarray(a, float), np.asarray(s, float)
        e = a * self.across()[0] + s * self.along()[0]
        n = a * self.across()[1] + s * self.along()[1]
        return e, n

    def to_lonlat(self, a, s):
        return offset_lonlat(self.lon, self.lat, *self.to_enu(a, s))


@dataclass(frozen=True)
class Scene:
    """A street, its objects, and one camera pose on it (``camera_a``, ``camera_s`` in the road frame)."""

    street: Street
    boxes: tuple[Box, ...]
    width: int = 256
    height: int = 192
    focal_px: float = 220.0
    camera_height_m: float = 1.65
    camera_a: float = -1.75
    camera_s: float = 0.0
    yaw_deg: float = 0.0  # camera heading relative to the road direction
    pitch_deg: float = 0.0
    seed: int = 0

    def camera(self) -> Camera:
        e, n = self.street.to_enu(self.camera_a, self.camera_s)
        lon, lat = self.street.to_lonlat(self.camera_a, self.camera_s)
        return Camera.simple(self.width, self.height, self.focal_px,
                             heading_deg=(self.street.road_azimuth_deg + self.yaw_deg) % 360.0,
                             pitch_deg=self.pitch_deg, height_m=self.camera_height_m,
                             lon=float(lon), lat=float(lat), focal_basis="measured",
                             height_basis="measured", pitch_basis="measured")

    def moved(self, **changes) -> Scene:
        return replace(self, **changes)


def vehicle(kind: str, a: float, s: float, scale: float = 1.0, width_jitter: float = 0.0) -> Box:
    length, width, height = SIZE_PRIORS[kind]
    length, width, height = length * scale, (width + width_jitter) * scale, height * scale
    return Box("vehicle", kind, a - width / 2, a + width / 2, s - length / 2, s + length / 2, 0.0, height,
               name=f"{kind}@{a:.1f},{s:.1f}")


def person(a: float, s: float) -> Box:
    return Box("person", "person", a - 0.25, a + 0.25, s - 0.15, s + 0.15, 0.0, SIZE_PRIORS["person"][2],
               name=f"person@{a:.1f},{s:.1f}")


def pole(a: float, s: float, height: float = 8.0, width: float = 0.2) -> Box:
    return Box("pole", "pole", a - width / 2, a + width / 2, s - width / 2, s + width / 2, 0.0, height,
               name=f"pole@{a:.1f},{s:.1f}")


def sign(a: float, s: float, z0: float = 2.0, size: float = 0.6) -> Box:
    """A plate facing along the road (readable by traffic), ``size`` wide and high."""
    return Box("sign", "sign", a - size / 2, a + size / 2, s - 0.03, s + 0.03, z0, z0 + size,
               name=f"sign@{a:.1f},{s:.1f}")


def street_scene(seed: int = 0, *, width: int = 256, height: int = 192, focal_px: float | None = None,
                 road_width_m: float | None = None, n_vehicles: int = 3, vehicle_scale: float = 1.0,
                 width_jitter: float = 0.0, pitch_deg: float = 0.0, yaw_deg: float = 0.0,
                 camera_height_m: float = 1.65, road_azimuth_deg: float | None = None,
                 extra_boxes: tuple[Box, ...] = (), furniture: bool = True, verges=None,
                 beyond: tuple[str, str] = ("grass", "grass"), backdrops: tuple[str, str] = ("building", "building"),
                 camera_a: float | None = None, setback_m: float = 1.0, hedge_height_m: float = 2.2,
                 spread: bool = False) -> Scene:
    """A random but deterministic street: vehicles ahead in the lanes, furniture on the sidewalks.

    ``vehicle_scale`` draws vehicles larger or smaller than the priors, to make
    the calibration cues disagree on purpose; ``width_jitter`` shifts vehicle
    widths as fleets do. ``verges`` (each side's bands, ``Street.verges``),
    ``beyond`` and ``backdrops`` (per side: ``building``, a ``hedge`` or
    ``open`` land) widen the street's layout; left out, every street has a
    kerb, a sidewalk and a row of buildings on each side; ``setback_m`` is
    the gap from the verge to the backdrop. ``camera_a`` places
    the camera across the road (default: a fifth of a lane left of the centre).

    ``spread`` draws where things stand instead of the fixed places below
    (vehicles 10, 18 and 26 m ahead, poles at 14 and 26 m, a sign at 18 m,
    buildings 12 m high...): at fixed distances an object's image row *is*
    the focal length over the camera height, and a network trained on them
    learnt that row, not the photo (``_spread_places``).
    """
    rng = np.random.default_rng(seed)
    places = _spread_places(seed) if spread else None
    road_w = road_width_m if road_width_m is not None else float(rng.uniform(5.5, 11.0))
    street = Street(road_width_m=road_w, sidewalk_width_m=float(rng.uniform(2.0, 3.5)),
                    road_azimuth_deg=road_azimuth_deg if road_azimuth_deg is not None
                    else float(rng.uniform(0, 360)),
                    lon=float(rng.uniform(-10, 30)), lat=float(rng.uniform(35, 60)),
                    setback_m=setback_m, verges=verges, beyond=beyond)
    lane = road_w / 4
    boxes: list[Box] = []
    kinds = ("car", "car", "truck", "car", "bus")
    slots = rng.permutation(6)[:n_vehicles]
    for i, slot in enumerate(slots):
        a = lane * (1 if slot % 2 else -1) + float(rng.uniform(-0.3, 0.3))
        s = 10.0 + 8.0 * (slot // 2) + float(rng.uniform(-1, 1))
        if places:
            s = places["vehicle_s"][slot % 2][slot // 2]
        boxes.append(vehicle(kinds[i % len(kinds)], a, s, vehicle_scale, width_jitter))
    # Per side (0 left, 1 right): where street furniture stands (past a kerb, else a little off the asphalt),
    # where the verge ends and where the backdrop stands.  Without ``verges`` these are the kerb's outer
    # edge, the sidewalk's and the facade on both sides, as they always were.
    bands = [street.bands(k) for k in (0, 1)]
    edge = [b[0][2] if b and b[0][0] == "kerb" else road_w / 2 + 0.3 for b in bands]
    fo = [street.verge_outer(k) for k in (0, 1)]
    facade = [fo[k] + street.setback_m for k in (0, 1)]
    if furniture and places:
        boxes.extend(_spread_furniture(places, edge, fo, facade, backdrops, road_w))
        street = replace(street, drains=((road_w / 2 - 0.6, road_w / 2 - 0.1, places["drain_s"],
                                          places["drain_s"] + 0.8),))
    elif furniture:
        for j, s in enumerate((14.0, 26.0)):
            a = edge[1] + 0.4 if j % 2 == 0 else -(edge[0] + 0.4)
            h = float(rng.uniform(6.0, 9.0))
            boxes.append(pole(a, s + float(rng.uniform(-1, 1)), height=h))
        boxes.append(sign(-(edge[0] + 0.9), 18.0 + float(rng.uniform(-1, 1))))
        boxes.append(person(edge[1] + 1.4, 21.0 + float(rng.uniform(-1, 1))))
        if backdrops[1] == "building":
            boxes.append(Box("gate", "gate", facade[1] - 0.12, facade[1], 30.0, 33.0, 0.0, 1.8, name="gate"))
        if backdrops[0] == "building":
            boxes.append(Box("entrance", "entrance", -facade[0], -facade[0] + 0.12, 24.0, 25.2, 0.0, 2.2,
                             name="entrance"))
        boxes.append(Box("fence", None, fo[1], fo[1] + 0.05, 34.0, 44.0, 0.0, 1.2, name="fence"))
        boxes.append(Box("vegetation", None, -fo[0] - 1.5, -fo[0] + 0.5, 36.0, 38.0, 2.5, 5.5, name="tree crown"))
        boxes.append(Box("pole", None, -fo[0] - 0.65, -fo[0] - 0.35, 36.85, 37.15, 0.0, 2.5, name="tree trunk"))
        boxes.append(Box("wires", None, -road_w, road_w, 29.95, 30.05, 6.9, 7.0, name="wire"))
        street = replace(street, drains=((road_w / 2 - 0.6, road_w / 2 - 0.1, 16.0, 16.8),))
    boxes.extend(extra_boxes)
    # Along both sides, far enough not to hide the sidewalk furniture: buildings, a hedge, or open land.
    for sgn in (1, -1):
        k = 1 if sgn > 0 else 0
        a0 = facade[k] if sgn > 0 else -facade[k] - 10.0
        if backdrops[k] == "building":
            top = places["building_m"][k] if places else 12.0
            boxes.append(Box("building", None, a0, a0 + 10.0, -20.0, 200.0, 0.0, top, name="building"))
        elif backdrops[k] == "hedge":
            a0 = facade[k] if sgn > 0 else -facade[k] - 1.2
            boxes.append(Box("vegetation", None, a0, a0 + 1.2, -20.0, 200.0, 0.0, hedge_height_m, name="hedge"))
    return Scene(street=street, boxes=tuple(boxes), width=width, height=height,
                 focal_px=focal_px if focal_px is not None else 0.8 * max(width, height),
                 camera_height_m=camera_height_m, camera_a=-lane * 0.2 if camera_a is None else camera_a,
                 pitch_deg=pitch_deg,
                 yaw_deg=yaw_deg, seed=seed)


def _spread_places(seed: int) -> dict:
    """Where a ``spread`` street's things stand, drawn from their own generator (``(seed, 4)``), so that
    the scene's other draws are those of the same seed without it.

    Vehicles: each lane's first 8-18 m ahead, the next 10-22 m on; furniture 8-50 m ahead, each piece
    present with the street's own density (a bare road to a full one), its size drawn too; buildings 4-25 m
    high."""
    r = np.random.default_rng([seed, 4])
    firsts, gaps = r.uniform(8.0, 18.0, 2), r.uniform(10.0, 22.0, (2, 2))
    density = float(r.uniform(0.0, 1.0))
    return {
        "vehicle_s": [[float(firsts[k] + gaps[k, :j].sum()) for j in range(3)] for k in (0, 1)],
        "present": (r.random(9) < density).tolist(),
        "pole_s": r.uniform(8.0, 45.0, 2).tolist(), "pole_h": r.uniform(5.0, 10.0, 2).tolist(),
        "pole_side": (r.random(2) < 0.5).tolist(),
        "sign_s": float(r.uniform(8.0, 40.0)), "sign_z": float(r.uniform(1.6, 2.8)),
        "sign_size": float(r.uniform(0.45, 0.9)),
        "person_s": float(r.uniform(8.0, 40.0)), "person_off": float(r.uniform(0.4, 2.5)),
        "gate_s": float(r.uniform(12.0, 45.0)), "gate_w": float(r.uniform(2.0, 4.5)),
        "gate_h": float(r.uniform(1.2, 2.2)),
        "entrance_s": float(r.uniform(12.0, 45.0)), "entrance_w": float(r.uniform(0.9, 1.6)),
        "entrance_h": float(r.uniform(2.0, 2.7)),
        "fence_s": float(r.uniform(15.0, 45.0)), "fence_len": float(r.uniform(5.0, 15.0)),
        "fence_h": float(r.uniform(0.9, 1.6)),
        "tree_s": float(r.uniform(15.0, 50.0)), "trunk_h": float(r.uniform(1.8, 3.5)),
        "crown_h": float(r.uniform(2.0, 4.5)),
        "wire_s": float(r.uniform(15.0, 50.0)), "wire_z": float(r.uniform(5.5, 8.5)),
        "drain_s": float(r.uniform(8.0, 30.0)),
        "building_m": r.uniform(4.0, 25.0, 2).tolist(),
    }


def _spread_furniture(p: dict, edge, fo, facade, backdrops, road_w: float) -> list[Box]:
    """A ``spread`` street's furniture, at the places ``_spread_places`` drew: the same kinds of thing as a
    fixed street's, on the same sides of the road."""
    out: list[Box] = []
    have = iter(p["present"])
    for s, h, right in zip(p["pole_s"], p["pole_h"], p["pole_side"]):
        if next(have):
            out.append(pole(edge[1] + 0.4 if right else -(edge[0] + 0.4), s, height=h))
    if next(have):
        out.append(sign(-(edge[0] + 0.9), p["sign_s"], z0=p["sign_z"], size=p["sign_size"]))
    if next(have):
        out.append(person(edge[1] + p["person_off"], p["person_s"]))
    if next(have) and backdrops[1] == "building":
        s = p["gate_s"]
        out.append(Box("gate", "gate", facade[1] - 0.12, facade[1], s, s + p["gate_w"], 0.0, p["gate_h"],
                       name="gate"))
    if next(have) and backdrops[0] == "building":
        s = p["entrance_s"]
        out.append(Box("entrance", "entrance", -facade[0], -facade[0] + 0.12, s, s + p["entrance_w"], 0.0,
                       p["entrance_h"], name="entrance"))
    if next(have):
        s = p["fence_s"]
        out.append(Box("fence", None, fo[1], fo[1] + 0.05, s, s + p["fence_len"], 0.0, p["fence_h"], name="fence"))
    if next(have):
        s, trunk = p["tree_s"], p["trunk_h"]
        out.append(Box("vegetation", None, -fo[0] - 1.5, -fo[0] + 0.5, s - 1.0, s + 1.0, trunk,
                       trunk + p["crown_h"], name="tree crown"))
        out.append(Box("pole", None, -fo[0] - 0.65, -fo[0] - 0.35, s - 0.15, s + 0.15, 0.0, trunk,
                       name="tree trunk"))
    if next(have):
        s, z = p["wire_s"], p["wire_z"]
        out.append(Box("wires", None, -road_w, road_w, s - 0.05, s + 0.05, z - 0.1, z, name="wire"))
    return out


def drive(scene: Scene, n_frames: int, spacing_m: float = 4.0) -> list[Scene]:
    """The same street seen from a camera moving along the road."""
    return [scene.moved(camera_s=scene.camera_s + i * spacing_m) for i in range(n_frames)]
