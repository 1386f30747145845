"""The fingerprint held against what else the service knows of the same ground: the
street-class width prior of the nearest mapped road (``ruasWidthM``, coordinator.features)
and, where the ground was swept, the seen layer's measured facts (coordinator.seen).

Each pair is a comparison with both values, their bases and a tolerance; one outside its
tolerance is a disagreement, listed as such. Nothing is averaged and neither side is
preferred: the prior is a model of the road class, the seen layer a measurement from other
photos, the fingerprint a model's reading of these photos; a reader decides which to trust.

Tolerances (documented in docs/fingerprint.md):

- passable width vs the prior's carriageway (``ruasWidthM`` times the road's directions):
  the larger of 1.5 m and 30 % of the prior (the prior is a regulation minimum by class);
- passable width vs the seen layer's measured road width: the larger of 1 m, twice its
  spread and 20 % of it;
- overhead clearance vs the lowest measured wire clearance: the larger of 0.75 m and 20 %;
  "nothing overhead" where the seen layer measured a wire disagrees;
- signage: the seen layer measured signs here and the model saw none. (Signs the model saw
  where the seen layer has none is not a disagreement: absence of a fact is not absence.)
"""
from __future__ import annotations

from typing import Any

import orjson

from coordinator.core.honesty import License
from coordinator.features import grid as map_grid
from coordinator.features import store as map_store
from coordinator.seen import query as seen_query
from coordinator.seen.reader import reader_of
from .reading import NOTHING_OVERHEAD

PRIOR_RADIUS_M = 30.0        # the road the photos show: the nearest mapped one within this
SEEN_RADIUS_M = 100.0        # the seen layer's smallest circle (SPEC.md, seen_layer radius)
MEASURE_RADIUS_M = 50.0      # street_measure's smallest maxM, the photo search's radius
SEEN_MAX_FACTS = 500
TWO_WAY = 2                  # SPEC.md: a two-way road is typically about 2 ruas


async def width_prior(db: Any, lat: float, lon: float) -> dict[str, Any]:
    """The nearest mapped road's width prior, or why there is none."""
    roads = await map_store.roads_near(db, lat, lon, PRIOR_RADIUS_M)
    if not roads:
        covered = await map_store.covering(db, map_store.OSM_KIND, map_grid.circle_box(lat, lon, PRIOR_RADIUS_M))
        return {"available": False,
                "reason": (f"no mapped road within {PRIOR_RADIUS_M:g} m of the point in the loaded extract"
                           if covered else "no loaded map extract covers this point (sis ingest osm)")}
    road = roads[0]
    base = {"road": {"id": road["id"], "highway": road["highway"], "name": road.get("name"),
                     "distanceM": road["distanceM"]}, "license": road.get("license") or License.ODBL.value}
    ruas = road.get("ruasWidthM")
    if ruas is None:
        return {"available": False, **base,
                "reason": f"the nearest road's class (highway={road['highway']}) is outside the width model"}
    directions = road.get("directions")
    assumed = directions is None
    directions = TWO_WAY if assumed else directions
    return {"available": True, **base, "ruasWidthM": ruas, "directions": directions,
            "directionsAssumed": assumed, "carriagewayM": round(ruas * directions, 2), "basis": "modelled"}


async def seen_measures(services: Any, lat: float, lon: float) -> dict[str, Any]:
    """What the seen layer measured near the point: its road width (street_measure's median
    of the nearest photos), the lowest wire clearance and the signage facts."""
    reader = reader_of(services)
    cov, fragments, _ = await seen_query.seen_facts(reader, lat, lon, SEEN_RADIUS_M, SEEN_MAX_FACTS)
    facts = orjson.loads(orjson.dumps(fragments)) if fragments else []
    measured = await seen_query.street_measure(reader, lat, lon, MEASURE_RADIUS_M)
    wires = [f for f in facts if f["kind"] == "wires" and isinstance(f.get("value"), dict)
             and isinstance(f["value"].get("clearanceM"), (int, float))]
    lowest = min(wires, key=lambda f: f["value"]["clearanceM"], default=None)
    return {"covered": cov.complete, "coverage": cov.as_json(), "radiusM": SEEN_RADIUS_M,
            "roadWidth": measured["roadWidth"],
            "lowestWire": None if lowest is None else {
                "clearanceM": lowest["value"]["clearanceM"], "confidence": lowest["confidence"],
                "basis": lowest["basis"], "source": lowest["source"], "photos": lowest["photos"],
                "distanceM": lowest["distanceM"]},
            "signageFacts": sum(1 for f in facts if f["kind"] == "signage"),
            "swept": cov.covered > 0}


def _known(fig: dict[str, Any]) -> bool:
    return fig["confidence"] != "unknown"


def _number(fig: dict[str, Any]) -> float | None:
    v = fig["value"]
    return float(v) if _known(fig) and isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _compare(key: str, fig: dict[str, Any], against: dict[str, Any], other: float, tol: float) -> dict[str, Any]:
    mine = _number(fig)
    assert mine is not None
    diff = round(mine - other, 2)
    return {"figure": key, "fingerprint": {"value": mine, "unit": "m", "confidence": fig["confidence"],
                                           "source": fig["source"]},
            "against": {**against, "value": other, "unit": "m"}, "differenceM": diff,
            "toleranceM": round(tol, 2), "agree": abs(diff) <= tol}


def comparisons(figures: dict[str, Any], prior: dict[str, Any], seen: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    width, overhead, signage = figures["passableWidth"], figures["overheadClearance"], figures["signage"]
    if _number(width) is not None and prior.get("available"):
        p = prior["carriagewayM"]
        out.append(_compare("passableWidth", width, {
            "name": "street-class width prior", "basis": "modelled", "license": prior["license"],
            "detail": (f"ruasWidthM {prior['ruasWidthM']:g} m x {prior['directions']} direction(s)"
                       + (" (assumed two-way)" if prior["directionsAssumed"] else "")
                       + f" of highway={prior['road']['highway']} ({prior['road']['id']}), "
                       f"{prior['road']['distanceM']:g} m away; a model of the road class, not a measurement")},
            p, max(1.5, 0.3 * p)))
    rw = seen.get("roadWidth")
    if _number(width) is not None and rw and rw.get("value") is not None:
        m = float(rw["value"])
        out.append(_compare("passableWidth", width, {
            "name": "seen layer: measured road width", "basis": rw.get("basis", "measured"),
            "confidence": rw["confidence"], "detail": f"median of {rw['photos']} swept photo(s) within "
                                                      f"{MEASURE_RADIUS_M:g} m, spread {rw['spreadM']:g} m"},
            m, max(1.0, 2 * float(rw["spreadM"]), 0.2 * m)))
    wire = seen.get("lowestWire")
    if _number(overhead) is not None and wire:
        m = float(wire["clearanceM"])
        out.append(_compare("overheadClearance", overhead, {
            "name": "seen layer: lowest wire clearance", "basis": wire["basis"], "confidence": wire["confidence"],
            "detail": f"a wires fact {wire['distanceM']:g} m from the point, from photos {', '.join(wire['photos'])}"},
            m, max(0.75, 0.2 * m)))
    if wire and _known(overhead) and overhead["value"] == NOTHING_OVERHEAD:
        out.append({"figure": "overheadClearance", "fingerprint": {"value": NOTHING_OVERHEAD,
                                                                   "confidence": overhead["confidence"],
                                                                   "source": overhead["source"]},
                    "against": {"name": "seen layer: lowest wire clearance", "basis": wire["basis"],
                                "confidence": wire["confidence"], "value": wire["clearanceM"], "unit": "m",
                                "detail": f"a wires fact {wire['distanceM']:g} m from the point"},
                    "agree": False})
    if _known(signage) and signage["value"] == [] and seen.get("signageFacts"):
        out.append({"figure": "signage", "fingerprint": {"value": [], "confidence": signage["confidence"],
                                                         "source": signage["source"]},
                    "against": {"name": "seen layer: signage facts", "basis": "measured",
                                "value": seen["signageFacts"],
                                "detail": f"{seen['signageFacts']} signage fact(s) within {SEEN_RADIUS_M:g} m"},
                    "agree": False})
    return out
