"""What is known of the ground under a box: read once, then measured at one site or many.

A site score reads a circle and a scan reads a small bbox; both load the same layers for
the box around them (``load``), each from the newest ready dataset version covering the
whole box (``features.store.covering``: half an extract would read as the whole):

- roads and mapped structures (power, communication) from the OpenStreetMap extract;
- places (with their categories) from the places dataset;
- the population grid's window;
- the active hazard events of the polled history, with the last poll's completeness.

A layer with no covering dataset is ``None`` with an unusable report naming the command
that loads one, so every figure measured from it is unknown, never zero. Positions are
projected once onto a local plane in metres around the box's centre (azimuthal equidistant:
under a millionth off across the few kilometres a site reads, at the poles and across 180
degrees as anywhere), so distances for hundreds of scan cells are numpy and shapely array
operations rather than per-row loops. A box that runs on past 180 degrees is read on both
sides of it (``sides``).
"""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import shapely
import sqlalchemy as sa

from coordinator.core.db.models import EventPoll, HazardEvent
from coordinator.core.honesty import SourceReport
from coordinator.datasets import versions
from coordinator.features import store
from coordinator.features.classes import INFRASTRUCTURE, PLACES, ROADS
from coordinator.features.widths import functional_class
from coordinator.hazards.feed import meets, square
from . import population

EARTH_R = 6_371_008.8
M_PER_DEG = math.radians(1) * EARTH_R
ALL = 10_000_000          # no sample: every feature of the box is read
HISTORY = "event-history"


@dataclass
class Plane:
    """A local metric plane around (lat0, lon0): the azimuthal equidistant projection
    (``grid.aeqd``), so that distances from the centre are the great-circle ones and
    others, within the few kilometres a site or a scan reads, are off by under a millionth,
    at any latitude and across 180 degrees (a plane of degrees scaled by cos(lat0) put ground
    across a pole hundreds of metres off, and ground across 180 degrees a world away)."""

    lat0: float
    lon0: float

    def xy(self, lons: Any, lats: Any) -> tuple[np.ndarray, np.ndarray]:
        p0 = math.radians(self.lat0)
        p = np.radians(np.asarray(lats, dtype=float))
        dl = np.radians(np.asarray(lons, dtype=float) - self.lon0)
        hav_dl = np.sin(dl / 2) ** 2
        x = np.cos(p) * np.sin(dl)
        y = np.sin(p - p0) + 2 * math.sin(p0) * np.cos(p) * hav_dl
        hav = np.sin((p - p0) / 2) ** 2 + math.cos(p0) * np.cos(p) * hav_dl
        c = 2 * np.arcsin(np.sqrt(np.clip(hav, 0.0, 1.0)))
        sc = np.hypot(x, y)
        k = EARTH_R * np.where(sc > 1e-15, c / np.where(sc > 1e-15, sc, 1.0), 1.0)
        return x * k, y * k

    def geometries(self, geojsons: list[dict]) -> list[shapely.Geometry]:
        """GeoJSON (Multi)LineStrings and Points on the plane, their vertices projected in one call."""
        runs: list[list] = []
        for g in geojsons:
            t = g["type"]
            runs += [g["coordinates"]] if t == "LineString" else g["coordinates"] if t == "MultiLineString" \
                else [[g["coordinates"][:2]]]
        flat = [c for run in runs for c in run]
        x, y = self.xy([c[0] for c in flat], [c[1] for c in flat])
        pts = list(zip(x.tolist(), y.tolist()))
        out, at, k = [], 0, 0
        for g in geojsons:
            t = g["type"]
            n_runs = len(g["coordinates"]) if t == "MultiLineString" else 1
            lines = []
            for run in runs[k:k + n_runs]:
                lines.append(pts[at:at + len(run)])
                at += len(run)
            k += n_runs
            out.append(shapely.LineString(lines[0]) if t == "LineString" else shapely.MultiLineString(lines)
                       if t == "MultiLineString" else shapely.Point(lines[0][0]))
        return out

    def geometry(self, geojson: dict) -> shapely.Geometry:
        """A GeoJSON (Multi)LineString or Point on the plane."""
        return self.geometries([geojson])[0]


@dataclass
class Points:
    """Point features on the plane, with what each row served."""

    x: np.ndarray
    y: np.ndarray
    rows: list[dict]

    @classmethod
    def of(cls, plane: Plane, rows: list[dict]) -> "Points":
        x, y = plane.xy([r["lon"] for r in rows], [r["lat"] for r in rows])
        return cls(x, y, rows)

    def within(self, cx: np.ndarray, cy: np.ndarray, radius_m: float) -> np.ndarray:
        """(sites, points) booleans: which points lie within the radius of each site."""
        if not self.rows:
            return np.zeros((len(cx), 0), dtype=bool)
        return (cx[:, None] - self.x[None, :]) ** 2 + (cy[:, None] - self.y[None, :]) ** 2 <= radius_m ** 2


@dataclass
class Lines:
    """Line features (merged from their stored chunks) on the plane, in a search tree."""

    geoms: np.ndarray
    rows: list[dict]
    tree: shapely.STRtree

    @classmethod
    def of(cls, plane: Plane, rows: list[dict]) -> "Lines":
        geoms = np.empty(len(rows), dtype=object)
        geoms[:] = plane.geometries([r["geom"] for r in rows])
        return cls(geoms, rows, shapely.STRtree(geoms))

    def nearest(self, cx: np.ndarray, cy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each site, the index of its nearest line and the distance to it (m); -1 and
        inf where there is no line at all."""
        n = len(cx)
        idx, dist = np.full(n, -1), np.full(n, np.inf)
        if not self.rows:
            return idx, dist
        pairs, d = self.tree.query_nearest(shapely.points(cx, cy), return_distance=True, all_matches=False)
        idx[pairs[0]] = pairs[1]
        dist[pairs[0]] = d
        return idx, dist

    def within(self, cx: np.ndarray, cy: np.ndarray, radius_m: float) -> list[list[int]]:
        """For each site, the lines within the radius."""
        out: list[list[int]] = [[] for _ in range(len(cx))]
        if self.rows:
            site, line = self.tree.query(shapely.points(cx, cy), predicate="dwithin", distance=radius_m)
            for s, i in zip(site.tolist(), line.tolist()):
                out[s].append(i)
        return out


@dataclass
class Hazards:
    """Active events whose modelled square holds some of the box, as last polled."""

    events: list[dict]
    report: SourceReport
    complete: bool          # the last poll had every source answer


@dataclass
class Ground:
    box: tuple[float, float, float, float]
    plane: Plane
    reports: list[SourceReport]
    roads: Lines | None = None
    structures: Points | None = None          # power and communication points
    structure_lines: Lines | None = None      # power lines
    places: Points | None = None
    grid: population.Grid | None = None
    hazards: Hazards | None = None
    notes: dict[str, str] = field(default_factory=dict)

    def source(self, name: str) -> SourceReport | None:
        return next((r for r in self.reports if r.name == name), None)


def no_dataset(kind: str) -> SourceReport:
    return SourceReport(f"dataset:{kind}", "n/a", ok=False, absent=True,
                        error=f"no loaded {kind} dataset covers this area: sis ingest {kind} FILE")


async def covering(db, kind: str, box) -> tuple[Any, SourceReport]:  # noqa: ANN001
    """The newest ready version of ``kind`` holding the whole box, and its report."""
    cover = await store.covering(db, kind, box)
    return (cover[0], versions.report(cover[0])) if cover else (None, no_dataset(kind))


GRIDS_KEPT = 8
_GRIDS: OrderedDict[Path, population.Grid] = OrderedDict()


def population_grid(data_dir: str | Path, version) -> population.Grid:  # noqa: ANN001
    """A loaded version's grid, opened (manifest read, cells memory-mapped) once per process:
    a ready version's files never change, and every brief and site score asks for it. The
    ``GRIDS_KEPT`` most recently asked are kept; one whose folder is gone (its version
    dropped) is forgotten at the next call, which unmaps its file once no answer still
    reads it, so that the drop gives its disk space back without a restart."""
    folder = versions.folder_of(data_dir, version)
    for gone in [f for f in _GRIDS if f != folder and not f.exists()]:
        del _GRIDS[gone]
    grid = _GRIDS.get(folder)
    if grid is None:
        grid = _GRIDS[folder] = population.Grid(folder)
        if len(_GRIDS) > GRIDS_KEPT:
            _GRIDS.popitem(last=False)
    else:
        _GRIDS.move_to_end(folder)
    return grid


async def active_hazards(db, box, square_deg: float) -> Hazards:  # noqa: ANN001
    """Active events of the polled history whose modelled square meets the box. Until a poll
    has had an answer from a feed nothing is known of them (unknown, not none): a poll that
    reached no feed lists no events because it read none. The events are those of the last
    poll a feed answered; complete when the last poll had every feed answer, within a day."""
    polls = sa.select(EventPoll.started_at, EventPoll.sources_usable, EventPoll.sources_queried)
    async with db.read() as s:
        last = (await s.execute(polls.order_by(EventPoll.id.desc()).limit(1))).first()
        poll = (await s.execute(polls.where(EventPoll.sources_usable > 0)
                                .order_by(EventPoll.id.desc()).limit(1))).first() if last else None
        rows = (await s.scalars(sa.select(HazardEvent).where(HazardEvent.active.is_(True)))).all() if poll else []
    if poll is None:
        error = "no poll of the hazard feeds yet" if last is None else \
            "no poll of the hazard feeds has had an answer from them yet"
        return Hazards([], SourceReport(HISTORY, "n/a", ok=False, error=error), False)
    events = []
    for r in rows:
        lon, lat = r.data.get("lon"), r.data.get("lat")
        if lon is None or lat is None:
            continue
        sq = square(lon, lat, square_deg)
        if meets(sq, box):
            events.append({"id": r.id, "type": r.event_type, "title": r.title, "alertLevel": r.alert_level,
                           "square": sq})
    at = poll.started_at if poll.started_at.tzinfo else poll.started_at.replace(tzinfo=timezone.utc)
    stale = datetime.now(timezone.utc) - at > timedelta(days=1)
    report = SourceReport(HISTORY, "n/a", ok=True, records=len(events))
    return Hazards(events, report, last.sources_usable == last.sources_queried and not stale)


def sides(box: tuple[float, float, float, float]) -> list[tuple[float, float, float, float]]:
    """A box as boxes within -180..180 that the store can read: itself, or, where it runs
    on past 180 degrees (a west below -180 or an east above 180, as ``scan.load_box`` writes
    a box at the antimeridian), its part on this side and its part beyond."""
    w, s, e, n = box
    if e - w >= 360.0:
        return [(-180.0, s, 180.0, n)]
    if w < -180.0:
        return [(-180.0, s, e, n), (w + 360.0, s, 180.0, n)]
    if e > 180.0:
        return [(w, s, 180.0, n), (-180.0, s, e - 360.0, n)]
    return [box]


def wrapped(box: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
    """A box as RFC 7946 writes one across 180 degrees (west greater than east), for the
    hazard squares' ``meets``."""
    w, s, e, n = box
    if e - w >= 360.0:
        return (-180.0, s, 180.0, n)
    return (w + 360.0 if w < -180.0 else w, s, e - 360.0 if e > 180.0 else e, n)


def _joined(founds: list[list[dict]]) -> list[dict]:
    """The rows read from each side of 180 degrees as one list: a point or line read on both
    sides once, a line's pieces from both sides as one MultiLineString."""
    if len(founds) == 1:
        return founds[0]
    by: dict[tuple[str, str], dict] = {}
    for rows in founds:
        for r in rows:
            key = (r["fid"], r["cls"])
            had = by.get(key)
            if had is None:
                by[key] = r
            elif r["geom"] is not None and had["geom"] is not None:
                runs = [g["coordinates"]] if (g := had["geom"])["type"] == "LineString" else list(g["coordinates"])
                runs += [r["geom"]["coordinates"]] if r["geom"]["type"] == "LineString" else r["geom"]["coordinates"]
                by[key] = {**had, "geom": {"type": "MultiLineString", "coordinates": runs}}
    return list(by.values())


async def load(services: Any, box: tuple[float, float, float, float], *, hazards: bool = True) -> Ground:
    """Every layer of the box, each from the newest dataset covering all of it. A box that
    runs on past 180 degrees (``sides``) is read on both sides, from one version holding
    both, and measured on one plane: the ground beyond 180 counts as any other."""
    db = services.db
    w, s, e, n = box
    parts = sides(box)
    plane = Plane((s + n) / 2, (w + e) / 2)
    ground = Ground(box, plane, [])
    osm, report = await covering(db, store.OSM_KIND, box)
    ground.reports.append(report)
    if osm is not None:
        roads = [(await store.lines_in_box(db, osm.id, ROADS, part, ALL)).rows for part in parts]
        ground.roads = Lines.of(plane, _joined(roads))
        found = _joined([(await store.sample_box(db, osm.id, INFRASTRUCTURE, part, ALL)).rows for part in parts])
        ground.structures = Points.of(plane, [r for r in found if r["geom"] is None])
        ground.structure_lines = Lines.of(plane, [r for r in found if r["geom"] is not None])
    places, report = await covering(db, store.PLACES_KIND, box)
    ground.reports.append(report)
    if places is not None:
        ground.places = Points.of(plane, _joined([(await store.sample_box(db, places.id, PLACES, part, ALL)).rows
                                                  for part in parts]))
    pop, report = await covering(db, population.KIND, box)
    if pop is not None:
        try:
            ground.grid = population_grid(services.settings.data_dir, pop)
        except FileNotFoundError:
            report = SourceReport(report.name, report.license, ok=False, absent=True,
                                  error=versions.missing_files(services.settings.data_dir, pop))
        except (OSError, ValueError) as exc:
            report = SourceReport(report.name, report.license, ok=False,
                                  error=f"the grid of version {pop.id} cannot be read: {exc}")
    ground.reports.append(report)
    if hazards:
        ground.hazards = await active_hazards(db, wrapped(box), services.settings.event_square_deg)
        ground.reports.append(ground.hazards.report)
    return ground


def road_class(row: dict) -> str | None:
    return functional_class(row["props"].get("highway", ""))
