"""The limits contract of SPEC.md as data: the one place enforcement reads.

``GET /earth/limits`` serves exactly this; enforcement (rate limits, quotas,
caps) reads the same objects, so what is published and what is enforced
cannot drift.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Plan:
    name: str
    per_minute: int
    per_day: int | None
    per_month: int | None
    embed_loads_per_day: int | None
    max_embed_keys: int | None
    price_usd_month: int | None


@dataclass(frozen=True)
class Caps:
    bbox_deg: float
    radius_m: int
    points_per_layer: int
    twin_points: int
    rows: int


PLANS: dict[str, Plan] = {
    "anon": Plan("anon", 120, None, None, None, None, None),
    "Free": Plan("Free", 240, 5000, 50000, 1000, 2, 0),
    "Basic": Plan("Basic", 300, 25000, 300000, 5000, 3, 9),
    "Pro": Plan("Pro", 600, 200000, 3000000, 50000, 10, 19),
    "Enterprise": Plan("Enterprise", 1200, 2000000, 40000000, 500000, 50, 199),
}

CAPS: dict[str, Caps] = {
    "anon": Caps(0.25, 800, 800, 3000, 2000),
    "Free": Caps(0.6, 1500, 1500, 8000, 5000),
    "Basic": Caps(0.6, 1500, 2500, 15000, 10000),
    "Pro": Caps(1, 1500, 4000, 40000, 25000),
    "Enterprise": Caps(2, 1500, 8000, 100000, 60000),
}

# Per-endpoint bbox ceilings (degrees) that bind every plan.
ENDPOINT_BBOX_DEG: dict[str, float] = {"places": 0.6, "infrastructure": 2, "traffic-tiles": 0.6}

GENERAL_RADIUS_M = {"min": 100, "max": 1500, "default": 450}

DIRECT_ANON_PER_MINUTE = 120
DIRECT_KEYED_PER_MINUTE = 600

ANON_SCOPES: tuple[str, ...] = (
    "earth.twin", "earth.places", "earth.infrastructure", "earth.events", "earth.event-changes",
    "earth.traffic-tiles", "earth.seen-areas", "earth.hazard-index", "earth.air-quality", "earth.marine",
    "earth.plates", "earth.fires", "earth.coral", "earth.bathymetry", "earth.brand-exposure",
    "earth.volcano-alerts", "earth.limits",
)


def plan_json(p: Plan) -> dict:
    return {"plan": p.name, "perMinute": p.per_minute, "perDay": p.per_day, "perMonth": p.per_month,
            "embedLoadsPerDay": p.embed_loads_per_day, "maxEmbedKeys": p.max_embed_keys,
            "priceUsdPerMonth": p.price_usd_month}


def caps_json(c: Caps) -> dict:
    d = asdict(c)
    return {"bboxDeg": d["bbox_deg"], "radiusM": d["radius_m"], "pointsPerLayer": d["points_per_layer"],
            "twinPoints": d["twin_points"], "rows": d["rows"]}
