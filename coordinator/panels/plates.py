"""Plate boundaries: Peter Bird's PB2002 model (Bird 2003, G3 4(3) 1027), ingested from its
``PB2002_steps.dat`` (UPSTREAMS.md §6), with each boundary's types.

``PB2002_steps.dat`` is one line per digitised step of a plate boundary, fixed-width fields
separated by spaces: sequence number, boundary id (``AF-AN``; a leading ``:`` marks a step that
continues its segment), start lon and lat, end lon and lat, length (km), azimuth, velocity
(mm/a), velocity azimuth, divergent and right-lateral components (mm/a), elevation (m),
seafloor age (Ma), then the step class (a leading ``:`` as before, a trailing ``*`` when the step
lies in an orogen)::

       3 :AF-AN    0.443 -54.451    0.965 -54.832  54.0 142  13.2  47   13.1   -1.1  -1687   4  OSR

Classes: CRB continental rift, CTF continental transform, CCB continental convergent, OSR
oceanic spreading ridge, OTF oceanic transform, OCB oceanic convergent, SUB subduction.

It is loaded by ``sis ingest pb2002 PB2002_steps.dat`` (the kind is declared in
``dataset_kinds.py``) into ``plate_steps`` (``PlateStep``, migration 0010), one row per step tagged with its
dataset version. The answer joins each boundary's steps into lines, cut where they cross 180 degrees
(RFC 7946 §3.1.9; Tonga-Kermadec does), and names the dataset
version it read (``versions.current``); with none loaded it says so, degraded. The model's
files are published under ODC-By 1.0 in their GeoJSON form; the kind records that license
unless ``--license`` says otherwise.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from coordinator.core.context import ToolContext
from coordinator.core.db.models import PlateStep
from coordinator.core.honesty import Answer, Health
from coordinator.core.registry import Tool, tool
from coordinator.datasets import versions

TOOLS: list[Tool] = []

KIND = "pb2002"
LICENSE = "ODC-By-1.0"
CLASSES = {"CRB": "continental rift boundary", "CTF": "continental transform fault",
           "CCB": "continental convergent boundary", "OSR": "oceanic spreading ridge",
           "OTF": "oceanic transform fault", "OCB": "oceanic convergent boundary", "SUB": "subduction zone"}
BOUNDARY_ID = re.compile(r"^([A-Za-z]{2,3})([-/\\])([A-Za-z]{2,3})$")

PLATE_STEPS = PlateStep.__table__


@dataclass(frozen=True)
class Step:
    seq: int
    boundary: str
    lon1: float
    lat1: float
    lon2: float
    lat2: float
    length_km: float
    velocity_mm_a: float | None
    step_class: str
    orogen: bool


def parse_step(line: str) -> Step | None:
    """One line of PB2002_steps.dat; None for a blank line; ValueError saying why for a bad one."""
    tokens = [t for t in line.split() if t != ":"]
    if not tokens:
        return None
    if len(tokens) != 15:
        raise ValueError(f"{len(tokens)} fields where a step has 15")
    boundary = tokens[1].lstrip(":")
    if not BOUNDARY_ID.match(boundary):
        raise ValueError(f"boundary id {boundary!r} is not two plate codes")
    cls = tokens[14].lstrip(":")
    orogen = cls.endswith("*")
    cls = cls.rstrip("*")
    if cls not in CLASSES:
        raise ValueError(f"step class {cls!r} is not one of {', '.join(CLASSES)}")
    lon1, lat1, lon2, lat2 = (float(t) for t in tokens[2:6])
    for lon_, lat_ in ((lon1, lat1), (lon2, lat2)):
        if not (-180 <= lon_ <= 360 and -90 <= lat_ <= 90):
            raise ValueError(f"position {lon_},{lat_} is off the Earth")
    return Step(int(tokens[0]), boundary, _lon(lon1), lat1, _lon(lon2), lat2, float(tokens[6]),
                float(tokens[8]), cls, orogen)


def _lon(x: float) -> float:
    """A longitude of the file (some files count east to 360) in [-180, 180], without the float
    noise of the subtraction (``359.999 - 360`` is not ``-0.001``)."""
    return round(x - 360, 6) if x > 180 else x


def _same_point(p: list[float], q: list[float]) -> bool:
    """Equal positions, counting 180 and -180 as the one meridian they are."""
    return p[1] == q[1] and (p[0] == q[0] or abs(p[0] - q[0]) == 360)


def split_at_antimeridian(line: list[list[float]]) -> list[list[list[float]]]:
    """A line of [lon, lat] positions cut where a segment crosses 180 degrees (RFC 7946 §3.1.9).

    A segment whose longitudes differ by more than 180 degrees is read as the short way across the
    antimeridian, not the long way round the globe: it ends at the meridian (180 or -180, at the
    latitude interpolated along it) and the next part starts on the other side of it.
    """
    parts: list[list[list[float]]] = []
    current = [line[0]]
    prev = line[0]
    for q in line[1:]:
        d = q[0] - prev[0]
        if abs(d) <= 180:
            current.append(q)
        else:
            edge, q_lon = (180.0, q[0] + 360) if d < 0 else (-180.0, q[0] - 360)
            span = q_lon - prev[0]
            t = (edge - prev[0]) / span if span else 0.0
            lat = round(prev[1] + t * (q[1] - prev[1]), 6)
            if current[-1] != [edge, lat]:
                current.append([edge, lat])
            parts.append(current)
            current = [[-edge, lat]]
            if q != current[0]:
                current.append(q)
        prev = q
    parts.append(current)
    return [p for p in parts if len(p) >= 2]


def plates_of(boundary: str) -> list[str]:
    m = BOUNDARY_ID.match(boundary)
    return [m.group(1), m.group(3)] if m else []


def boundaries_from(rows: list[Any]) -> list[dict[str, Any]]:
    """Steps (in file order) grouped by boundary: consecutive steps that meet are one line, cut
    where it crosses the antimeridian so that no segment is drawn the long way round the globe."""
    out: "OrderedDict[str, dict[str, Any]]" = OrderedDict()
    for r in rows:
        b = out.get(r.boundary)
        if b is None:
            b = out[r.boundary] = {"id": r.boundary, "plates": plates_of(r.boundary), "_types": {},
                                   "lengthKm": 0.0, "_lines": []}
        t = b["_types"].setdefault(r.step_class, {"class": r.step_class, "name": CLASSES[r.step_class],
                                                  "lengthKm": 0.0, "steps": 0})
        t["lengthKm"] += r.length_km
        t["steps"] += 1
        b["lengthKm"] += r.length_km
        lines = b["_lines"]
        if lines and _same_point(lines[-1][-1], [r.lon1, r.lat1]):
            lines[-1].append([r.lon2, r.lat2])
        else:
            lines.append([[r.lon1, r.lat1], [r.lon2, r.lat2]])
    served = []
    for b in out.values():
        b["_lines"] = [part for line in b["_lines"] for part in split_at_antimeridian(line)]
        types = sorted(b.pop("_types").values(), key=lambda t: -t["lengthKm"])
        for t in types:
            t["lengthKm"] = round(t["lengthKm"], 1)
        served.append({**{k: v for k, v in b.items() if k != "_lines"}, "lengthKm": round(b["lengthKm"], 1),
                       "types": types, "geometry": {"type": "MultiLineString", "coordinates": b["_lines"]},
                       "license": None})
    return served


@tool(TOOLS, name="plates", title="Plate boundaries", routes={"public": "/plates"},
      description="Tectonic plate boundaries of the PB2002 model (Bird 2003), ingested: each boundary with its "
                  "two plates, its types (continental rift, continental transform, continental convergent, oceanic "
                  "spreading ridge, oceanic transform, oceanic convergent, subduction) with their lengths, and its "
                  "lines; the dataset version is named in health.",
      params=(), scopes=("earth.plates",), cache_ttl_s=300, tags=("panels",))
async def plates(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    db = ctx.services.db
    version, report = await versions.current(db, KIND)
    caveats = ["Boundaries of a published model (PB2002, Bird 2003) as ingested, not a live reading; the "
               "model's types are its own classification of each digitised step."]
    if version is None:
        caveats.append("No plate model is loaded here, so boundaries are unknown (not absent): "
                       "an operator loads one with `sis ingest pb2002 PB2002_steps.dat`.")
        return Answer({"dataset": None, "count": None, "byType": None, "boundaries": []},
                      caveats=caveats, health=Health([report]))
    q = sa.select(PLATE_STEPS).where(PLATE_STEPS.c.version_id == version.id).order_by(PLATE_STEPS.c.seq)
    async with db.read() as s:
        rows = list((await s.execute(q)).all())
    boundaries = boundaries_from(rows)
    for b in boundaries:
        b["license"] = version.license
    by_type: dict[str, dict[str, Any]] = {}
    for b in boundaries:
        for t in b["types"]:
            agg = by_type.setdefault(t["class"], {"name": t["name"], "lengthKm": 0.0, "boundaries": 0})
            agg["lengthKm"] = round(agg["lengthKm"] + t["lengthKm"], 1)
            agg["boundaries"] += 1
    return Answer({"dataset": report.dataset, "count": len(boundaries), "byType": by_type,
                   "boundaries": boundaries}, caveats=caveats, health=Health([report]))
