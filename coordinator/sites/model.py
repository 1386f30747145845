"""The site-scoring model: what each feature reads, how it is turned into a signed signal,
its weight, and when the model declines to give a score. docs/scoring.md explains each
contribution and its rationale; the numbers below are the ones it cites.

A feature reads the ground (``ground.Ground``) around a site and gives a ``Reading``: its
value, a confidence, and a signal in [-1, 1] (None when unknown). A contribution is
``weight * signal``; the score is the weighted mean of the known signals mapped onto 0-100
(50 neutral), times the saturation factor when a category is asked for:

    score = 50 * (1 + sum(w_i * s_i) / sum(w_i over known features)) * saturation

The score is null (the model declines to invent a number) when the known features carry
less than ``EVIDENCE_THRESHOLD`` of the total weight, or fewer than ``MIN_FEATURES`` are
known, or a category was asked for and its saturation cannot be read. Every reading is
computed for many sites at once (a scan's cells) from arrays on the ground's plane.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from coordinator.core.honesty import Confidence
from coordinator.hazards.feed import box_geometry, holds
from .ground import Ground, road_class
from . import population

EVIDENCE_THRESHOLD = 0.5       # share of the total weight that must be known for a score
MIN_FEATURES = 2               # and at least this many features known
ROAD_FAR_M = 500.0             # nearest road at or beyond this: signal -1; at 0 m: +1
ACTIVITY_FULL_PER_KM2 = 1000.0     # places per km2 at which the activity signal saturates at +1
POPULATION_FULL_PER_KM2 = 20000.0  # people per km2 at which the population signal saturates at +1
THIN_PLACES = 20               # fewer places than this in the circle: activity is low confidence
HALF_SATURATION = 5            # same-category places at which the saturation factor is 1/2
CLASS_SIGNAL = {"arterial": 1.0, "collector": 0.5, "local": 0.0, "neighbourhood": -0.5, None: -1.0}
LEVEL_SIGNAL = {"green": -0.25, "yellow": -0.5, "orange": -0.75, "red": -1.0, None: -0.5}
EVIDENCE_POINTS = 100          # at most this many points in an evidence geometry


@dataclass
class Reading:
    value: Any
    confidence: Confidence
    signal: float | None
    unit: str | None = None
    evidence: dict | None = None
    source: str = ""
    note: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Feature:
    name: str
    weight: float
    unit: str | None
    source: str
    read: Callable[..., list[Reading]]


@dataclass
class Sites:
    """The sites being read: centres on the ground's plane and in degrees."""

    lats: np.ndarray
    lons: np.ndarray
    x: np.ndarray
    y: np.ndarray
    radius_m: float
    evidence: bool                 # build evidence geometries (one site answered in full)

    @classmethod
    def at(cls, ground: Ground, lats: list[float], lons: list[float], radius_m: float, evidence: bool) -> "Sites":
        x, y = ground.plane.xy(lons, lats)
        return cls(np.asarray(lats, float), np.asarray(lons, float), x, y, radius_m, evidence)

    def __len__(self) -> int:
        return len(self.lats)


def _unknown(n: int, source: str, note: str, unit: str | None = None) -> list[Reading]:
    return [Reading(None, Confidence.UNKNOWN, None, unit, source=source, note=note) for _ in range(n)]


def _src(ground: Ground, name: str) -> tuple[bool, str]:
    r = ground.source(name)
    return (r is not None and r.ok), (r.error if r is not None and r.error else "")


def read_road_access(ground: Ground, sites: Sites) -> list[Reading]:
    src = "dataset:osm"
    if ground.roads is None:
        return _unknown(len(sites), src, _src(ground, src)[1], "m")
    idx, dist = ground.roads.nearest(sites.x, sites.y)
    out = []
    for i, d in zip(idx.tolist(), dist.tolist()):
        if i < 0 or d > sites.radius_m:
            out.append(Reading(None, Confidence.UNKNOWN, None, "m", source=src,
                               note="no road mapped within the radius: none mapped, not none there"))
            continue
        signal = 1 - 2 * min(d, ROAD_FAR_M) / ROAD_FAR_M
        row = ground.roads.rows[i]
        out.append(Reading(round(d, 1), Confidence.HIGH, signal, "m", source=src,
                           evidence=row["geom"] if sites.evidence else None,
                           detail={"road": {"id": row["fid"], "highway": row["props"].get("highway"),
                                            "name": row["name"]}}))
    return out


def read_arterial_reach(ground: Ground, sites: Sites) -> list[Reading]:
    src = "dataset:osm"
    if ground.roads is None:
        return _unknown(len(sites), src, _src(ground, src)[1])
    out = []
    for near in ground.roads.within(sites.x, sites.y, sites.radius_m):
        if not near:
            out.append(Reading(None, Confidence.UNKNOWN, None, source=src,
                               note="no road mapped within the radius: none mapped, not none there"))
            continue
        best = max(near, key=lambda i: CLASS_SIGNAL[road_class(ground.roads.rows[i])])
        row = ground.roads.rows[best]
        cls = road_class(row)
        out.append(Reading(cls or "outside the class model", Confidence.HIGH, CLASS_SIGNAL[cls], source=src,
                           evidence=row["geom"] if sites.evidence else None,
                           detail={"road": {"id": row["fid"], "highway": row["props"].get("highway"),
                                            "name": row["name"]}}))
    return out


def _log_signal(per_km2: float, full: float) -> float:
    return 2 * min(1.0, math.log10(1 + per_km2) / math.log10(1 + full)) - 1


def _multipoint(points, mask_row: np.ndarray, sites: Sites, k: int) -> dict | None:  # noqa: ANN001
    idx = np.flatnonzero(mask_row)
    if not sites.evidence or idx.size == 0:
        return None
    d = (points.x[idx] - sites.x[k]) ** 2 + (points.y[idx] - sites.y[k]) ** 2
    keep = idx[np.argsort(d)[:EVIDENCE_POINTS]]
    return {"type": "MultiPoint", "coordinates": [[round(points.rows[i]["lon"], 7), round(points.rows[i]["lat"], 7)]
                                                  for i in keep.tolist()]}


def read_activity(ground: Ground, sites: Sites) -> list[Reading]:
    src = "dataset:places"
    if ground.places is None:
        return _unknown(len(sites), src, _src(ground, src)[1], "places/km2")
    inside = ground.places.within(sites.x, sites.y, sites.radius_m)
    area_km2 = math.pi * sites.radius_m ** 2 / 1e6
    out = []
    for k, count in enumerate(inside.sum(axis=1).tolist()):
        per = count / area_km2
        conf = Confidence.HIGH if count >= THIN_PLACES else Confidence.LOW
        note = None if count >= THIN_PLACES else f"thin data: {count} places mapped in the circle"
        out.append(Reading(round(per, 1), conf, _log_signal(per, ACTIVITY_FULL_PER_KM2), "places/km2", source=src,
                           evidence=_multipoint(ground.places, inside[k], sites, k), note=note,
                           detail={"places": int(count)}))
    return out


def circle(lat: float, lon: float, radius_m: float, n: int = 64) -> dict:
    """A GeoJSON polygon of a circle (n vertices), for evidence."""
    dlat = math.degrees(radius_m / population.EARTH_R)
    dlon = dlat / max(math.cos(math.radians(lat)), 1e-6)
    ring = [[round(lon + dlon * math.cos(2 * math.pi * i / n), 7), round(lat + dlat * math.sin(2 * math.pi * i / n), 7)]
            for i in range(n)]
    return {"type": "Polygon", "coordinates": [ring + [ring[0]]]}


def read_population(ground: Ground, sites: Sites) -> list[Reading]:
    src = "dataset:population"
    if ground.grid is None:
        return _unknown(len(sites), src, _src(ground, src)[1], "people")
    out = []
    for lat, lon in zip(sites.lats.tolist(), sites.lons.tolist()):
        dlat = math.degrees(sites.radius_m / population.EARTH_R)
        dlon = dlat / max(math.cos(math.radians(lat)), 1e-6)
        win = ground.grid.window((lon - dlon, lat - dlat, lon + dlon, lat + dlat))
        total = population.sum_circle(win, lat, lon, sites.radius_m)
        if total.area_km2 == 0 or total.no_value_share > 0.999:
            out.append(Reading(None, Confidence.UNKNOWN, None, "people", source=src,
                               note="the grid has no value under this circle"))
            continue
        per = total.people / (total.area_km2 - total.no_value_km2)
        coarse = total.cell_km2 > total.area_km2 / 20
        conf = Confidence.LOW if coarse or total.no_value_share > 0.05 else Confidence.HIGH
        notes = []
        if coarse:
            notes.append("the grid's cells are coarse for this circle: its count is spread evenly over each cell")
        if total.no_value_share > 0:
            notes.append(f"{total.no_value_share:.0%} of the circle lies over cells without a value (not counted)")
        out.append(Reading(round(total.people), conf, _log_signal(per, POPULATION_FULL_PER_KM2), "people",
                           source=src, evidence=circle(lat, lon, sites.radius_m) if sites.evidence else None,
                           note="; ".join(notes) or None,
                           detail={"perKm2": round(per, 1), "cellKm2": round(total.cell_km2, 4)}))
    return out


def read_utilities(ground: Ground, sites: Sites) -> list[Reading]:
    src = "dataset:osm"
    if ground.structures is None or ground.structure_lines is None:
        return _unknown(len(sites), src, _src(ground, src)[1], "structures")
    pts = ground.structures.within(sites.x, sites.y, sites.radius_m)
    lines = ground.structure_lines.within(sites.x, sites.y, sites.radius_m)
    out = []
    for k in range(len(sites)):
        idx = np.flatnonzero(pts[k]).tolist()
        n = len(idx) + len(lines[k])
        if n == 0:
            out.append(Reading(None, Confidence.UNKNOWN, None, "structures", source=src,
                               note="no power or communication structure mapped within the radius: none mapped, "
                                    "not none there (coverage is very incomplete)"))
            continue
        classes: dict[str, int] = {}
        for r in [ground.structures.rows[i] for i in idx] + [ground.structure_lines.rows[i] for i in lines[k]]:
            classes[r["cls"]] = classes.get(r["cls"], 0) + 1
        evidence = None
        if sites.evidence:
            geoms = [{"type": "Point", "coordinates": [round(ground.structures.rows[i]["lon"], 7),
                                                       round(ground.structures.rows[i]["lat"], 7)]}
                     for i in idx[:EVIDENCE_POINTS]]
            geoms += [ground.structure_lines.rows[i]["geom"] for i in lines[k][:EVIDENCE_POINTS]]
            evidence = {"type": "GeometryCollection", "geometries": geoms}
        out.append(Reading(n, Confidence.LOW, 1.0, "structures", source=src, evidence=evidence,
                           note="mapped structures only: coverage is very incomplete", detail={"byClass": classes}))
    return out


def read_hazard(ground: Ground, sites: Sites) -> list[Reading]:
    src = "event-history"
    hz = ground.hazards
    if hz is None or not hz.report.ok:
        return _unknown(len(sites), src, hz.report.error if hz else "not read", "events")
    conf = Confidence.HIGH if hz.complete else Confidence.LOW
    note = None if hz.complete else "the last poll of the hazard feeds was partial or is over a day old"
    out = []
    for lat, lon in zip(sites.lats.tolist(), sites.lons.tolist()):
        over = [e for e in hz.events if holds(e["square"], lon, lat)]
        if not over:
            out.append(Reading(0, conf, 0.0, "events", source=src, note=note))
            continue
        worst = min(over, key=lambda e: LEVEL_SIGNAL.get(e["alertLevel"], LEVEL_SIGNAL[None]))
        out.append(Reading(len(over), conf, LEVEL_SIGNAL.get(worst["alertLevel"], LEVEL_SIGNAL[None]), "events",
                           source=src, note=note,
                           evidence=box_geometry(worst["square"]) if sites.evidence else None,
                           detail={"events": [{"id": x["id"], "alertLevel": x["alertLevel"]} for x in over]}))
    return out


FEATURES: tuple[Feature, ...] = (
    Feature("road_access", 0.25, "m", "dataset:osm", read_road_access),
    Feature("arterial_reach", 0.10, None, "dataset:osm", read_arterial_reach),
    Feature("activity", 0.25, "places/km2", "dataset:places", read_activity),
    Feature("population", 0.25, "people", "dataset:population", read_population),
    Feature("utilities", 0.05, "structures", "dataset:osm", read_utilities),
    Feature("hazard", 0.10, "events", "event-history", read_hazard),
)
TOTAL_WEIGHT = sum(f.weight for f in FEATURES)


@dataclass
class Saturation:
    factor: float | None
    same_category: int | None
    confidence: Confidence
    evidence: dict | None = None

    def as_json(self, category: str) -> dict[str, Any]:
        return {"category": category, "value": None if self.factor is None else round(self.factor, 4),
                "confidence": self.confidence.value, "sameCategoryNearby": self.same_category,
                "halfSaturation": HALF_SATURATION, "source": "dataset:places", "evidence": self.evidence}


def read_saturation(ground: Ground, sites: Sites, category: str) -> list[Saturation]:
    """factor = 1 / (1 + n / HALF_SATURATION), n the places of the same category in the circle."""
    if ground.places is None:
        return [Saturation(None, None, Confidence.UNKNOWN) for _ in range(len(sites))]
    same = np.array([r["props"].get("category") == category for r in ground.places.rows], dtype=bool)
    inside = ground.places.within(sites.x, sites.y, sites.radius_m) & same[None, :]
    out = []
    for k, n in enumerate(inside.sum(axis=1).tolist()):
        out.append(Saturation(1 / (1 + n / HALF_SATURATION), int(n), Confidence.LOW if n == 0 else Confidence.HIGH,
                              _multipoint(ground.places, inside[k], sites, k)))
    return out


@dataclass
class Score:
    value: float | None
    confidence: Confidence
    known_weight: float
    readings: list[tuple[Feature, Reading]]
    saturation: Saturation | None
    declined: str | None = None


def score(readings: list[tuple[Feature, Reading]], saturation: Saturation | None) -> Score:
    known = [(f, r) for f, r in readings if r.signal is not None]
    weight = sum(f.weight for f, _ in known)
    share = weight / TOTAL_WEIGHT
    declined = None
    if share < EVIDENCE_THRESHOLD or len(known) < MIN_FEATURES:
        declined = (f"too little is known: the known features carry {share:.0%} of the weight "
                    f"({len(known)} of {len(readings)} features); a score needs {EVIDENCE_THRESHOLD:.0%} "
                    f"and at least {MIN_FEATURES} features")
    elif saturation is not None and saturation.factor is None:
        declined = "a category was asked for, but its saturation cannot be read (no places dataset covers the site)"
    if declined:
        return Score(None, Confidence.UNKNOWN, weight, readings, saturation, declined)
    raw = sum(f.weight * r.signal for f, r in known) / weight
    value = 50 * (1 + raw) * (saturation.factor if saturation is not None else 1.0)
    high = share >= 0.8 and all(r.confidence is Confidence.HIGH for _, r in known)
    return Score(round(value, 1), Confidence.HIGH if high else Confidence.LOW, weight, readings, saturation)


def evaluate(ground: Ground, sites: Sites, category: str | None) -> list[Score]:
    """The score of every site."""
    per_feature = [(f, f.read(ground, sites)) for f in FEATURES]
    sats = read_saturation(ground, sites, category) if category else [None] * len(sites)
    return [score([(f, rs[k]) for f, rs in per_feature], sats[k]) for k in range(len(sites))]


def contribution(f: Feature, r: Reading) -> dict[str, Any]:
    out = {"feature": f.name, "weight": f.weight, "value": r.value, "unit": r.unit,
           "confidence": r.confidence.value, "signal": None if r.signal is None else round(r.signal, 4),
           "contribution": None if r.signal is None else round(f.weight * r.signal, 4),
           "evidence": r.evidence, "source": r.source}
    if r.note:
        out["note"] = r.note
    out.update(r.detail)
    return out
