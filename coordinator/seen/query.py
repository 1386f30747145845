"""Reading the seen layer: facts around a point, street measurements, covered areas."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import h3
from sqlalchemy import func, select

from ..db.models import CoverageCell, SeenFact, SeenMeasurement
from ..sweeps import coverage
from ..sweeps import transitions as tr
from .spatial import bearing_deg, distance_m, ring_batches

FACT_COLUMNS = (SeenFact.id, SeenFact.kind, SeenFact.lat, SeenFact.lon, SeenFact.value, SeenFact.unit,
                SeenFact.confidence, SeenFact.basis, SeenFact.photos, SeenFact.provider, SeenFact.license,
                SeenFact.observed_at, SeenFact.sweep_id)


@dataclass
class Coverage:
    cells: int
    covered: int

    @property
    def fraction(self) -> float:
        return self.covered / self.cells if self.cells else 0.0

    @property
    def complete(self) -> bool:
        return self.cells > 0 and self.covered == self.cells

    def as_json(self) -> dict[str, Any]:
        return {"h3Resolution": coverage.RESOLUTION, "cells": self.cells, "coveredCells": self.covered,
                "fraction": round(self.fraction, 4)}


async def circle_coverage(session, lat: float, lon: float, radius_m: float) -> Coverage:
    """How many of the circle's cells (as ``sweep_request`` counts them) are covered:
    swept, and the sweep approved by a reviewer."""
    cells = coverage.circle_cells(lat, lon, radius_m)
    covered = 0
    for part in coverage.chunks(cells):
        q = select(func.count()).select_from(CoverageCell).where(CoverageCell.cell.in_(part),
                                                                  CoverageCell.state == tr.CELL_COVERED)
        covered += (await session.execute(q)).scalar_one()
    return Coverage(len(cells), covered)


@dataclass
class Found:
    rows: list[tuple[float, Any]] = field(default_factory=list)   # (distance, row), nearest first
    truncated: bool = False


async def _nearest(session, columns, cell_column, lat: float, lon: float, radius_m: float, cap: int,
                   lat_of, lon_of) -> Found:
    """Rows within ``radius_m``, read ring by ring; stops once more than ``cap`` are held."""
    out = Found()
    for cells in ring_batches(lat, lon, radius_m):
        limit = 4 * (cap + 1)
        rows = (await session.execute(select(*columns).where(cell_column.in_(cells)).limit(limit))).all()
        if len(rows) >= limit:
            out.truncated = True      # stopped reading: there may be more in these cells
        for r in rows:
            d = distance_m(lat, lon, lat_of(r), lon_of(r))
            if d <= radius_m:
                out.rows.append((d, r))
        if len(out.rows) > cap:
            break
    out.rows.sort(key=lambda x: x[0])
    if len(out.rows) > cap:
        out.truncated = True
        del out.rows[cap:]
    return out


def fact_json(d: float, r: Any) -> dict[str, Any]:
    return {"id": r.id, "kind": r.kind, "geometry": {"type": "Point", "coordinates": [r.lon, r.lat]},
            "value": r.value, "unit": r.unit, "confidence": r.confidence, "basis": r.basis,
            "source": f"{r.provider}:{','.join(r.photos)}", "photos": r.photos, "timestamp": r.observed_at,
            "license": r.license, "sweepId": r.sweep_id, "distanceM": round(d, 1)}


async def seen_facts(db, lat: float, lon: float, radius_m: float, cap: int) -> tuple[Coverage, Found]:
    async with db.read() as s:
        cov = await circle_coverage(s, lat, lon, radius_m)
        found = await _nearest(s, FACT_COLUMNS, SeenFact.cell, lat, lon, radius_m, cap,
                               lambda r: r.lat, lambda r: r.lon)
    return cov, found


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


async def street_measure(db, lat: float, lon: float, max_m: float) -> dict[str, Any]:
    async with db.read() as s:
        cols = (SeenMeasurement.photo_id, SeenMeasurement.lat, SeenMeasurement.lon, SeenMeasurement.heading,
                SeenMeasurement.captured_at, SeenMeasurement.provider, SeenMeasurement.license,
                SeenMeasurement.photo_url, SeenMeasurement.road_width, SeenMeasurement.calibration,
                SeenMeasurement.objects)
        found = await _nearest(s, cols, SeenMeasurement.cell, lat, lon, max_m, MEASURE_PHOTOS_CAP,
                               lambda r: r.lat, lambda r: r.lon)
        cov = await circle_coverage(s, lat, lon, max_m)
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

async def covered_areas(db, max_features: int) -> tuple[list[dict[str, Any]], int, bool]:
    """Covered ground as GeoJSON polygons: connected groups of covered cells."""
    async with db.read() as s:
        rows = (await s.execute(select(CoverageCell.cell, CoverageCell.covered_at)
                                .where(CoverageCell.state == tr.CELL_COVERED))).all()
    if not rows:
        return [], 0, False
    when = {h3.int_to_str(c): tr.aware(at) for c, at in rows}
    shape = h3.cells_to_h3shape(list(when))
    polys = list(shape) if isinstance(shape, h3.LatLngMultiPoly) else [shape]
    features = []
    for poly in polys:
        geo = poly.__geo_interface__
        inside = h3.h3shape_to_cells(poly, coverage.RESOLUTION)
        times = [when[c] for c in inside if c in when and when[c] is not None]
        features.append({"type": "Feature", "geometry": geo,
                         "properties": {"cells": len(inside), "h3Resolution": coverage.RESOLUTION,
                                        "areaKm2": round(len(inside) * h3.average_hexagon_area(coverage.RESOLUTION, "km^2"), 4),
                                        "firstCoveredAt": tr.iso(min(times)) if times else None,
                                        "lastCoveredAt": tr.iso(max(times)) if times else None}})
    features.sort(key=lambda f: -f["properties"]["cells"])
    total = len(features)
    return features[:max_features], total, total > max_features
