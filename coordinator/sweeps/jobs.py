"""Splitting discovered photos into jobs (work units), and a job as the data a node gets.

Photos are grouped by their H3 cell; cells are packed in a row-by-row order into
jobs of at most ``job_max_photos`` photos, so that a job is a compact patch of
ground. A cell holding more photos than that is split over several jobs with the
same area. A job's area is the convex hull of its cells' hexagons: always one
polygon, and the ground its photos can speak for.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import h3
from shapely.geometry import MultiPolygon, mapping
from shapely.ops import unary_union

from sweep_engine.schema import Job, PhotoRef

from coordinator.core.db.models import SweepJob
from . import coverage

WIRE_PREFIX = "job-"


@dataclass
class JobPlan:
    cells: list[int]
    photos: list[PhotoRef]
    area: dict
    center_lat: float
    center_lon: float
    radius_m: float


def wire_id(job_id: int) -> str:
    return f"{WIRE_PREFIX}{job_id}"


MAX_ID = 2 ** 63 - 1                    # a BIGINT row id, on SQLite and PostgreSQL alike


def parse_job_id(text: str) -> int | None:
    """A job id as a route takes it, ``job-<n>`` or ``<n>``: ValueError when it is not one
    (ASCII digits only), None when no row can have it (0, or past a 64-bit row id, which
    the databases refuse to compare with rather than find nothing), so that the route
    answers 404 and never hands the database a number it overflows on."""
    digits = text[len(WIRE_PREFIX):] if text.startswith(WIRE_PREFIX) else text
    if not digits or not digits.isascii() or not digits.isdigit():
        raise ValueError(f"{text!r} is not a job id")
    if len(digits.lstrip("0")) > len(str(MAX_ID)):
        return None
    n = int(digits)
    return n if 1 <= n <= MAX_ID else None


def _plan(cells: list[int], photos: list[PhotoRef]) -> JobPlan:
    hull = unary_union([coverage.cell_polygon(c) for c in cells]).convex_hull
    if isinstance(hull, MultiPolygon):  # pragma: no cover - a hull is one polygon
        hull = max(hull.geoms, key=lambda g: g.area)
    c = hull.centroid
    radius = max(_dist_m(c.y, c.x, la, lo) for lo, la in hull.exterior.coords)
    area = mapping(hull)
    area = {"type": "Polygon", "coordinates": [[[round(x, 7), round(y, 7)] for x, y in ring]
                                               for ring in area["coordinates"]]}
    return JobPlan(cells=sorted(cells), photos=photos, area=area, center_lat=c.y, center_lon=c.x,
                   radius_m=max(1.0, round(radius, 1)))


def _dist_m(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    dy = (lat2 - lat1) * coverage.M_PER_DEG
    dx = (lon2 - lon1) * coverage.M_PER_DEG * math.cos(math.radians((lat1 + lat2) / 2))
    return math.hypot(dx, dy)


def split(photos_by_cell: dict[int, list[PhotoRef]], max_photos: int) -> list[JobPlan]:
    def order(cell: int) -> tuple[float, float]:
        la, lo = h3.cell_to_latlng(coverage.cell_text(cell))
        return (round(la, 3), lo)

    plans: list[JobPlan] = []
    cells: list[int] = []
    batch: list[PhotoRef] = []
    for cell in sorted(photos_by_cell, key=order):
        photos = sorted(photos_by_cell[cell], key=lambda p: (p.captured_at, p.id))
        if len(photos) > max_photos:
            for i in range(0, len(photos), max_photos):
                plans.append(_plan([cell], photos[i:i + max_photos]))
            continue
        if len(batch) + len(photos) > max_photos:
            plans.append(_plan(cells, batch))
            cells, batch = [], []
        cells.append(cell)
        batch.extend(photos)
    if batch:
        plans.append(_plan(cells, batch))
    return plans


def job_document(job: SweepJob) -> Job:
    """The job as a node receives it: data only (photo references and parameters)."""
    return Job(job_id=wire_id(job.id), sweep_id=job.sweep_id, area=job.area, center_lon=job.center_lon,
               center_lat=job.center_lat, radius_m=job.radius_m,
               photos=[PhotoRef.from_dict(p) for p in job.photos],
               params={"h3Resolution": coverage.RESOLUTION, "cells": list(job.cells)})
