"""Reading the seen layer: facts around a point, street measurements, covered areas."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import h3
import numpy as np
import orjson
from shapely.affinity import translate
from shapely.geometry import Polygon
from shapely.geometry import box as shapely_box
from shapely.geometry.polygon import orient
from sqlalchemy import bindparam, func, select

from coordinator.core.db.models import CoverageCell, SeenMeasurement
from ..sweeps import coverage
from ..sweeps import transitions as tr
from . import tiles
from .spatial import EARTH_R, Disc, bearing_deg, distance_m, distances_m, in_cells

M_PER_DEG = EARTH_R * math.pi / 180     # the haversine's sphere, so planar and exact distances agree

@dataclass
class Coverage:
    """A circle's swept cells. ``covered`` counts swept ground, as the sweep queue does: cells
    with approved results, and cells a covered request found without imagery (``bare``);
    ``imagery`` says how many of them had photos, so unphotographed ground is not mistaken
    for ground seen to be empty."""

    cells: int
    covered: int
    bare: int = 0

    @property
    def fraction(self) -> float:
        return self.covered / self.cells if self.cells else 0.0

    @property
    def complete(self) -> bool:
        return self.cells > 0 and self.covered == self.cells

    def as_json(self) -> dict[str, Any]:
        return {"h3Resolution": coverage.RESOLUTION, "cells": self.cells, "coveredCells": self.covered,
                "fraction": round(self.fraction, 4), "withImageryCells": self.covered - self.bare,
                "noImageryCells": self.bare,
                "imageryShare": round((self.covered - self.bare) / self.covered, 4) if self.covered else None}


_COVERED = {pg: (select(CoverageCell.state, func.count()).select_from(CoverageCell)
                 .where(in_cells(CoverageCell.cell, pg), CoverageCell.state.in_(tr.SWEPT))
                 .group_by(CoverageCell.state))
            for pg in (False, True)}


def _is_pg(conn) -> bool:
    return conn.dialect.name == "postgresql"


def circle_coverage(conn, disc: Disc) -> Coverage:
    """How many of the circle's cells (as ``sweep_request`` counts them) are covered: swept
    and approved, or swept with no imagery. One statement (at most about 520 cells)."""
    counts = dict(conn.execute(_COVERED[_is_pg(conn)], {"cells": disc.ground}).all())
    bare = counts.get(tr.CELL_NO_IMAGERY, 0)
    return Coverage(len(disc.ground), counts.get(tr.CELL_COVERED, 0) + bare, bare)


@dataclass
class Found:
    rows: list[tuple[float, Any]] = field(default_factory=list)   # (distance, row), nearest first
    truncated: bool = False


_STATEMENTS: dict[tuple, Any] = {}

# A large circle over dense ground is read in two annuli, nearest first: the inner disc
# (INNER_SHARE of the radius, about half the area) is read first, and when it holds more
# rows than may be served the outer ring is never read (``_nearest``).
STAGED_FROM_M = 900
INNER_SHARE = 0.7


def _statement(table, columns, postgres: bool):
    """Rows of ``table`` in the given cells, inside a lat/lon box and a planar distance
    band ``inner2 < d2 <= reach2``, nearest first: built once per (table, columns), every
    value a bound parameter, so it is compiled once and its cache entry reused.

    Two steps in one statement: the inner select picks and orders ids by distance inside
    the (cell, lat, lon) index alone (migration 0005), and only the rows it keeps are
    then fetched from the table by primary key, instead of every candidate row. The band
    is one ``BETWEEN`` (its lower end the float just past ``inner2``, see ``_nearest``):
    SQLite computes the distance once for it, and twice for two comparisons, a tenth of
    a large circle's statement."""
    key = (table.name, tuple(str(c) for c in columns), postgres)
    q = _STATEMENTS.get(key)
    if q is None:
        dy = (table.c.lat - bindparam("lat0")) * M_PER_DEG
        dx = (table.c.lon - bindparam("lon0")) * bindparam("kx")
        d2 = dx * dx + dy * dy
        pick = (select(table.c.id.label("pick_id"), d2.label("d2"))
                .where(in_cells(table.c.cell, postgres),
                       table.c.lat.between(bindparam("s"), bindparam("n")),
                       table.c.lon.between(bindparam("w"), bindparam("e")),
                       d2.between(bindparam("inner2"), bindparam("reach2")))
                .order_by(d2).limit(bindparam("lim")).subquery("pick"))
        q = _STATEMENTS[key] = (select(*columns, pick.c.d2).join_from(table, pick, table.c.id == pick.c.pick_id)
                                .order_by(pick.c.d2))
    return q


def _stages(radius_m: float) -> list[float]:
    """The radii of the annuli read one after another, nearest first (the last is the circle)."""
    return [radius_m * INNER_SHARE, radius_m] if radius_m >= STAGED_FROM_M else [radius_m]


# Past this the local plane is not trusted to pick a circle's rows (``_planar_slack``).
PLANAR_MAX_ERROR = 0.01
NO_LIMIT = 2 ** 31 - 1
FAR2 = 1e30                               # a squared distance past any on the earth


def _planar_slack(lat: float, radius_m: float) -> float | None:
    """How much the local plane (``kx`` the centre's scale) may overstate a distance inside
    the circle, as a share: about tan(latitude) times the radius's angle, since a point
    poleward of the centre is on narrower meridians than the centre's. None when that is
    past ``PLANAR_MAX_ERROR`` or the circle reaches within a degree of a pole: there the
    plane is no guide at all (at 89.9985 degrees a measurement 166.8 m away read 183.3 m,
    and one across the pole a turn of the meridians away)."""
    rho = radius_m / EARTH_R
    edge = abs(math.radians(lat)) + rho
    if edge >= math.radians(89.0):
        return None
    err = 2 * math.tan(edge) * rho
    return max(0.001, err) if err <= PLANAR_MAX_ERROR else None


def _nearest(conn, table, columns, disc: Disc, lat: float, lon: float, radius_m: float, cap: int) -> Found:
    """Rows within ``radius_m`` of the point, nearest first, at most ``cap``.

    The indexed cell column narrows the read to the circle's cells; a bounding box and a
    local planar distance (plain arithmetic, the same SQL on SQLite and PostgreSQL) pick
    and order the rows in the database, so only ``cap + 1`` rows ever come back; every
    row's distance is then the exact great-circle one, which decides.

    The box is the circle's on the sphere (``coverage.box``): across the antimeridian one
    statement reads each side of it, with the centre's longitude turned by 360 for the
    far side so that the planar distance there is the short one, and the nearest of both
    are kept. Near a pole (``_planar_slack``) the plane picks nothing: the box spans every
    longitude when the circle holds the pole, and every row of the circle's cells and box
    is read and measured exactly.

    Large circles are read by annuli, nearest first (``_stages``): each statement reads
    the rows of its band of planar distance, nearest first, up to what is still wanted,
    and once ``cap + 1`` rows are in hand no farther band can change the answer (its rows
    all lie farther than those read), so the outer, larger band is not read at all. The
    rows, their order and ``truncated`` are the same as from one read of the whole circle."""
    slack = _planar_slack(lat, radius_m)
    lon = coverage.wrap_lon(lon)
    kx = M_PER_DEG * math.cos(math.radians(lat))
    stmt = _statement(table, columns, _is_pg(conn))
    rows: list = []
    inner = 0.0          # planar radius read so far (exclusive lower bound of the next band)
    for outer in ([radius_m] if slack is None else _stages(radius_m)):
        last = outer >= radius_m
        reach = outer * (1.0 + (slack or 0.001)) + 1.0 if last else outer
        cells = disc.reach if inner == 0 and last else disc.reach_between(inner, reach)
        bounds = {"inner2": -1.0 if inner == 0 else math.nextafter(inner * inner, math.inf),    # d2 > inner²
                  "reach2": reach * reach, "lim": cap + 1 - len(rows)}
        if slack is None:
            bounds.update(reach2=FAR2, lim=NO_LIMIT)
        box = coverage.box(lat, lon, reach)
        got: list = []
        for (w, s, e, n), shift in zip(box.parts, box.shift):
            got += conn.execute(stmt, {"cells": cells, "lat0": lat, "lon0": lon - shift, "kx": kx,
                                       "s": s, "n": n, "w": w, "e": e, **bounds}).all()
        if len(box.parts) > 1:
            got.sort(key=_last)
            del got[bounds["lim"]:]
        rows += got
        if len(rows) > cap:
            break
        inner = reach
    out = Found()
    if rows:
        d = distances_m(lat, lon, np.array([r.lat for r in rows], dtype=float),
                        np.array([r.lon for r in rows], dtype=float))
        out.rows = sorted(((float(x), r) for x, r in zip(d.tolist(), rows) if x <= radius_m), key=_first)
    if len(out.rows) > cap:
        out.truncated = True
        del out.rows[cap:]
    return out


def _last(x):
    return x[-1]


def _first(x):
    return x[0]


@dataclass
class Band:
    """Facts of one band of a circle, nearest first: indexes into ``packed`` and their distances."""

    index: np.ndarray
    dist: np.ndarray
    packed: tiles.Packed


@dataclass
class FoundFacts:
    bands: list[Band] = field(default_factory=list)     # the bands read, nearest first
    truncated: bool = False


def _nearest_facts(conn, disc: Disc, lat: float, lon: float, radius_m: float, cap: int) -> FoundFacts:
    """Facts within ``radius_m`` of the point, nearest first, at most ``cap``, read from their
    cells' tiles (``tiles``). A large circle is read by annuli as ``_nearest`` reads rows:
    the inner disc's tiles first, and the outer ring's only when the disc holds no more
    than ``cap`` facts. Every distance is the exact (haversine) one, computed for all of a
    band's facts at once; ties in distance go to the older fact (the smaller id), so the
    answer is the same however the circle was read."""
    kept: list[Band] = []
    inner, total = -1.0, 0         # the exclusive lower bound of the next band (the centre included)
    for outer in _stages(radius_m):
        packed = tiles.read(conn, disc.reach if inner < 0 and outer >= radius_m
                            else disc.reach_between(max(inner, 0.0), outer))
        d = distances_m(lat, lon, packed.lats, packed.lons)
        band = np.nonzero((d > inner) & (d <= outer))[0]
        band = band[np.lexsort((packed.ids[band], d[band]))]
        kept.append(Band(band, d[band], packed))
        total += len(band)
        if total > cap:
            break
        inner = outer
    out = FoundFacts(truncated=total > cap)
    left = cap
    for b in kept:
        take = min(left, len(b.index))
        out.bands.append(Band(b.index[:take], b.dist[:take], b.packed))
        left -= take
    return out


def served_facts(found: FoundFacts) -> list[orjson.Fragment]:
    """The facts as served, already encoded: each tile's stored ``doc`` between the fact's
    ``id`` and its ``distanceM`` (``round(d, 1)`` written as orjson writes it). Joining
    bytes is about ten times cheaper per fact than decoding the stored JSON into objects
    and encoding them again; orjson writes a ``Fragment`` into the answer as it is, on
    every face (REST and MCP both encode with orjson)."""
    out = []
    for b in found.bands:
        docs, index = b.packed.docs, b.index
        for i, s, e, d in zip(b.packed.ids[index].tolist(), b.packed.starts[index].tolist(),
                              b.packed.ends[index].tolist(), b.dist.tolist()):
            out.append(orjson.Fragment(b'{"id":%d,%b,"distanceM":%.1f}' % (i, docs[s:e], d)))
    return out


async def seen_facts(reader, lat: float, lon: float, radius_m: float,
                     cap: int) -> tuple[Coverage, list[orjson.Fragment], bool]:
    """(coverage, facts as served and already encoded (``served_facts``), truncated)."""
    def read(conn):
        disc = Disc.of(lat, lon, radius_m)
        cov = circle_coverage(conn, disc)
        found = _nearest_facts(conn, disc, lat, lon, radius_m, cap)
        return cov, served_facts(found), found.truncated
    return await reader.run(read)


# ---- street measure -------------------------------------------------------------------

MEASURE_PHOTOS_CAP = 200
OBJECTS_CAP = 500
ROAD_WIDTH_PHOTOS = 7


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    i = (len(xs) - 1) * q
    lo, hi = int(i), min(int(i) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (i - lo)


def road_width(scenes: list[tuple[float, Any]]) -> dict[str, Any] | None:
    """The road width near the point: the median of the nearest photos' measured widths.
    ``spreadM`` is the larger of the photos' own spread and half the interquartile range
    between photos, so that disagreement between photos is not hidden."""
    measured = [(d, m) for d, m in scenes if m.road_width][:ROAD_WIDTH_PHOTOS]
    if not measured:
        return None
    widths = [m.road_width["widthM"] for _, m in measured]
    own = statistics.median(m.road_width["spreadM"] for _, m in measured)
    between = (_percentile(widths, 0.75) - _percentile(widths, 0.25)) / 2 if len(widths) > 1 else 0.0
    methods = sorted({m.road_width["method"] for _, m in measured})
    trusts = [m.calibration.get("scaleTrust") for _, m in measured]
    confidence = "high" if len(measured) >= 2 and all(t == "high" for t in trusts) else "low"
    return {"value": round(statistics.median(widths), 2), "unit": "m", "confidence": confidence,
            "method": methods[0] if len(methods) == 1 else "+".join(methods),
            "spreadM": round(max(own, between), 2), "photos": len(measured),
            "samples": sum(m.road_width["samples"] for _, m in measured),
            "nearestPhotoM": round(measured[0][0], 1), "basis": "measured"}


async def street_measure(reader, lat: float, lon: float, max_m: float) -> dict[str, Any]:
    def read(conn):
        disc = Disc.of(lat, lon, max_m)
        cols = (SeenMeasurement.photo_id, SeenMeasurement.lat, SeenMeasurement.lon, SeenMeasurement.heading,
                SeenMeasurement.captured_at, SeenMeasurement.provider, SeenMeasurement.license,
                SeenMeasurement.photo_url, SeenMeasurement.road_width, SeenMeasurement.calibration,
                SeenMeasurement.objects)
        return (_nearest(conn, SeenMeasurement.__table__, cols, disc, lat, lon, max_m, MEASURE_PHOTOS_CAP),
                circle_coverage(conn, disc))
    found, cov = await reader.run(read)
    scenes, objects = [], []
    for d, m in found.rows:
        cal = m.calibration
        scenes.append({"photoId": m.photo_id, "photoUrl": m.photo_url, "provider": m.provider,
                       "license": m.license, "capturedAt": m.captured_at,
                       "geometry": {"type": "Point", "coordinates": [m.lon, m.lat]}, "distanceM": round(d, 1),
                       "scaleTrust": cal["scaleTrust"], "focalPx": cal["focalPx"], "focalBasis": cal["focalBasis"],
                       "cameraHeightM": cal["cameraHeightM"], "pitchDeg": cal["pitchDeg"],
                       "evidence": cal.get("evidence", {})})
        for o in m.objects:
            od = distance_m(lat, lon, o["lat"], o["lon"])
            if od > max_m:
                continue
            objects.append({"label": o["label"], "distanceM": o["distanceM"], "size": o["size"],
                            "bearingDeg": o["bearingDeg"],
                            "geometry": {"type": "Point", "coordinates": [o["lon"], o["lat"]]},
                            "heightIsLowerBound": o["heightIsLowerBound"],
                            "widthIsLowerBound": o.get("widthIsLowerBound", False), "score": o.get("score"),
                            "photoId": m.photo_id, "scaleTrust": cal["scaleTrust"],
                            "fromPointM": round(od, 1),
                            "bearingFromPointDeg": round(bearing_deg(lat, lon, o["lat"], o["lon"]), 1)})
    objects.sort(key=lambda o: o["fromPointM"])
    truncated = found.truncated or len(objects) > OBJECTS_CAP
    return {"measured": bool(found.rows), "coverage": cov, "roadWidth": road_width(found.rows),
            "scenes": scenes, "objects": objects[:OBJECTS_CAP], "truncated": truncated}


# ---- covered areas --------------------------------------------------------------------

_SIDES = (-360.0, 0.0, 360.0)


def _cut_at_antimeridian(geo: dict[str, Any]) -> dict[str, Any]:
    """A covered area as served: a Polygon, or, when it crosses the antimeridian, a
    MultiPolygon of its parts either side of it (RFC 7946 section 3.1.9), as the hazard
    feed cuts an event's box. H3 gives a group straddling 180 as one ring whose
    longitudes jump from 179.9995 to -179.9999, which read as written is a polygon around
    the whole globe. Each ring is unwrapped (its longitudes continuous beside the outer
    ring's first), and the shape is cut at +-180 and each part turned back to [-180, 180].
    A ring that does not close once unwrapped goes round a pole and is served as H3 gives it."""
    rings = [[(float(x), float(y)) for x, y in ring] for ring in geo["coordinates"]]
    ref = rings[0][0][0]
    unwrapped = []
    for ring in rings:
        prev, out = ref, []
        for x, y in ring:
            prev = coverage.unwrap_lon(x, prev)
            out.append((prev, y))
        if abs(out[-1][0] - out[0][0]) > 1e-9:
            return geo
        unwrapped.append(out)
    xs = [x for x, _ in unwrapped[0]]
    if min(xs) >= -180.0 and max(xs) <= 180.0:
        return geo
    shape = Polygon(unwrapped[0], unwrapped[1:])
    parts = []
    for turn in _SIDES:
        side = shape.intersection(shapely_box(-180.0 - turn, -90.0, 180.0 - turn, 90.0))
        for g in getattr(side, "geoms", [side]):
            if isinstance(g, Polygon) and not g.is_empty and g.area > 0:
                g = orient(translate(g, xoff=turn), 1.0)
                parts.append([[[round(x, 9), round(y, 9)] for x, y in r.coords]
                              for r in (g.exterior, *g.interiors)])
    return {"type": "Polygon", "coordinates": parts[0]} if len(parts) == 1 else \
        {"type": "MultiPolygon", "coordinates": parts}


async def covered_areas(reader, max_features: int) -> tuple[list[dict[str, Any]], int, bool]:
    """Covered ground as GeoJSON polygons: connected groups of swept cells, those with
    approved results and those swept with no imagery alike (the seen layer and the queue call
    both covered), each group saying how many of its cells had no imagery. A group across the
    antimeridian is a MultiPolygon of its parts either side of it (``_cut_at_antimeridian``)."""
    rows = await reader.run(lambda conn: conn.execute(
        select(CoverageCell.cell, CoverageCell.covered_at, CoverageCell.state)
        .where(CoverageCell.state.in_(tr.SWEPT))).all())
    if not rows:
        return [], 0, False
    when = {h3.int_to_str(c): tr.aware(at) for c, at, _ in rows}
    bare = {h3.int_to_str(c) for c, _, state in rows if state == tr.CELL_NO_IMAGERY}
    shape = h3.cells_to_h3shape(list(when))
    polys = list(shape) if isinstance(shape, h3.LatLngMultiPoly) else [shape]
    features = []
    for poly in polys:
        geo = _cut_at_antimeridian(poly.__geo_interface__)
        inside = h3.h3shape_to_cells(poly, coverage.RESOLUTION)
        times = [when[c] for c in inside if c in when and when[c] is not None]
        features.append({"type": "Feature", "geometry": geo,
                         "properties": {"cells": len(inside), "noImageryCells": len(bare.intersection(inside)),
                                        "h3Resolution": coverage.RESOLUTION,
                                        "areaKm2": round(len(inside) * h3.average_hexagon_area(coverage.RESOLUTION, "km^2"), 4),
                                        "firstCoveredAt": tr.iso(min(times)) if times else None,
                                        "lastCoveredAt": tr.iso(max(times)) if times else None}})
    features.sort(key=lambda f: -f["properties"]["cells"])
    total = len(features)
    return features[:max_features], total, total > max_features
