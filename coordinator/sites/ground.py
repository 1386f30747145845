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
projected once onto a local plane in metres around the box's centre (equirectangular: under
0.1 % off across the 0.06 degrees a site reads), so distances for hundreds of scan cells are
numpy and shapely array operations rather than per-row loops.
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
    """A local metric plane around (lat0, lon0)."""

    lat0: float
    lon0: float

    @property
    def kx(self) -> float:
        return M_PER_DEG * math.cos(math.radians(self.lat0))

    def xy(self, lons: Any, lats: Any) -> tuple[np.ndarray, np.ndarray]:
        return ((np.asarray(lons, dtype=float) - self.lon0) * self.kx,
                (np.asarray(lats, dtype=float) - self.lat0) * M_PER_DEG)

    def geometry(self, geojson: dict) -> shapely.Geometry:
        """A GeoJSON (Multi)LineString or Point on the plane."""
        def proj(coords: list) -> list:
            return [((c[0] - self.lon0) * self.kx, (c[1] - self.lat0) * M_PER_DEG) for c in coords]
        t = geojson["type"]
        if t == "LineString":
            return shapely.LineString(proj(geojson["coordinates"]))
        if t == "MultiLineString":
            return shapely.MultiLineString([proj(c) for c in geojson["coordinates"]])
        x, y = geojson["coordinates"][:2]
        return shapely.Point((x - self.lon0) * self.kx, (y - self.lat0) * M_PER_DEG)


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
        geoms = np.array([plane.geometry(r["geom"]) for r in rows], dtype=object)
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
    return SourceReport(f"dataset:{kind}", "n/a", ok=False,
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


async def load(services: Any, box: tuple[float, float, float, float], *, hazards: bool = True) -> Ground:
    """Every layer of the box, each from the newest dataset covering all of it."""
    db = services.db
    w, s, e, n = box
    plane = Plane((s + n) / 2, (w + e) / 2)
    ground = Ground(box, plane, [])
    osm, report = await covering(db, store.OSM_KIND, box)
    ground.reports.append(report)
    if osm is not None:
        roads = await store.lines_in_box(db, osm.id, ROADS, box, ALL)
        ground.roads = Lines.of(plane, roads.rows)
        found = await store.sample_box(db, osm.id, INFRASTRUCTURE, box, ALL)
        ground.structures = Points.of(plane, [r for r in found.rows if r["geom"] is None])
        ground.structure_lines = Lines.of(plane, [r for r in found.rows if r["geom"] is not None])
    places, report = await covering(db, store.PLACES_KIND, box)
    ground.reports.append(report)
    if places is not None:
        found = await store.sample_box(db, places.id, PLACES, box, ALL)
        ground.places = Points.of(plane, found.rows)
    pop, report = await covering(db, population.KIND, box)
    if pop is not None:
        try:
            ground.grid = population_grid(services.settings.data_dir, pop)
        except (OSError, ValueError) as exc:
            report = SourceReport(report.name, report.license, ok=False,
                                  error=f"the grid of version {pop.id} cannot be read: {exc}")
    ground.reports.append(report)
    if hazards:
        ground.hazards = await active_hazards(db, box, services.settings.event_square_deg)
        ground.reports.append(ground.hazards.report)
    return ground


def road_class(row: dict) -> str | None:
    return functional_class(row["props"].get("highway", ""))
