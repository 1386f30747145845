"""The street-photo provider searched over a sweep request's circle, box by box.

The provider answers a box (w, s, e, n) in its own order, one page of at most
``limit`` photos with a ``next`` link while more remain. Paging through a box whose
photos outnumber what one request keeps only lists more of the provider's order, which
may all stand in one corner; and a circle asked again would list the same photos. So a
box whose page is cut (``next``) is split at its middle into four (two where one side is
already about a cell across: never below ``MIN_BOX_M``, a cell's width, which follows the
cells and is no setting), and the parts are searched in turn, a quadtree:

- **One page a call.** Every call asks one box for one page (``limit`` is the page size,
  ``panoramax.PAGE_LIMIT``, at most ``SIS_SWEEP_MAX_PHOTOS``): a box is either listed
  completely in one call or split (a call reads a second page only where the provider's
  page held items that cannot be measured). ``SIS_SWEEP_MAX_SEARCHES`` (32) calls at most
  per request, ``SIS_SWEEP_SEARCHES_AT_ONCE`` (4) at a time (``search``'s ``max_searches``
  and ``at_once``): by default at most 16,000 references read in 8 rounds, against the 6
  pages one after the other of a request that paged through one box for its 3,000. A
  circle of up to 500 photos is one call, as before; 1,000 photos over a 1000 m circle
  are 5, 3,000 are 21 (depth 2: boxes about 500 m across), all listed; past that the
  calls left go deeper where the ground is dense, nearest the centre first.
- **Nearest first.** Boxes are searched nearest the centre first (a box holding it is at
  0; ``Box.distance_m``, on the sphere, so that near a pole a box reaching it past the
  centre's meridian is as near as it is), a round of ``at_once`` after another, and the
  search stops once the ground listed completely holds ``max_photos`` photos on ground
  not yet queued or covered: what more it could list would not be kept. Rounds, not a free-running pool: the boxes a search lists
  depend only on the provider's answers and the ground already known, never on which
  answer came first, so the same circle asked over the same ground lists the same boxes.
- **Known ground is skipped.** A part whose ground (the circle's cells a photo in it could
  stand in, ``Box.near``) is all known, swept or held by a request or listed completely
  by a queued one, is not searched: the same circle asked again lists the ground not yet
  known. The circle's own boxes (``requests._boxes``) are always searched.
- **What is known after.** A cell is listed completely when no box left cut (a box a
  cell wide whose page is still cut, or one the budget left unsearched) or skipped
  reaches it. Only such cells without a photo in the circle are ``known_empty``, the ones
  a request may call swept without imagery once it is covered; a cell a cut box reaches
  is not called anything.
- **What is kept** (``keep``): at most ``max_photos`` photos, whole cells, cells listed
  completely nearest the centre first. A cell reached by a cut box is kept only when no
  cell listed completely is left to keep: a queued cell is swept once, and one queued
  from part of its photos would stay swept from that part only. The nearest, not a
  sample spread over the circle: the requester asked about the centre, and the ground
  swept grows from it as a disc that asking again widens, rather than a scatter of cells
  with unswept ones between them. Where the nearest cell alone holds more, its nearest
  ``max_photos`` photos are kept, so that a request over ground with photos never
  queues nothing.

Ground is the circle's own cells (``coverage.circle_cells``), those the answer and the
seen layer count. A photo in the circle standing in an edge cell (whose centre is outside
it) is queued with the request that lists it, but that cell is the ground of the circles
beside it: nothing goes looking for it once the circle's own ground is known, and the
same circle asked again is then merged without a search (docs/node-protocol.md says so
where sweep requests are described). Looking for edge cells would not be sound here: an
edge cell is never listed completely by the circle's boxes (most of it lies outside
them), so one without a photo in the circle could never become known, and every ask of
the circle would search the provider again; and one queued from the photos in the
circle is swept from those only, as a ground cell on the circle's edge is.

A provider call that fails fails the whole search (``SourceError``: the request is
answered ``provider_unavailable``, nothing queued), as one call did before. A box that
could not be read could be left like one not searched, and the rest queued; but a provider
failing one call of a round is most often failing, and that answer would send the
requester to ask the same circle again for ground a plain retry lists. The calls of the
round still running are awaited first, so none is left running.
"""
from __future__ import annotations

import asyncio
import functools
import heapq
import math
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import h3

from ..sources import panoramax
from . import coverage

MIN_BOX_M = coverage.SPACING_M          # a box is split only where its halves stay a cell across (131 m)
# Farther than any corner of a resolution-10 cell lies from its centre (84 m at most over 20,000
# cells spread over the globe): a cell whose centre is farther from a box holds no point of it.
REACH_M = 1.2 * coverage.EDGE_M


def _widest_cos(s: float, n: float) -> float:
    """The cosine of the latitude nearest the equator between s and n: a box's widest parallel."""
    lat = 0.0 if s <= 0.0 <= n else min(abs(s), abs(n))
    return math.cos(math.radians(lat))


@dataclass(frozen=True)
class Box:
    """A search box (w, s, e, n), -180 <= w <= e <= 180, and its depth in the quadtree."""

    w: float
    s: float
    e: float
    n: float
    depth: int = 0

    @property
    def bbox(self) -> tuple[float, float, float, float]:
        return (self.w, self.s, self.e, self.n)

    def _widest_cos(self) -> float:
        return _widest_cos(self.s, self.n)

    def halves(self) -> list["Box"]:
        """Split at the middle of its latitudes and of its longitudes, each only where the
        halves stay at least ``MIN_BOX_M`` (its widest, on the parallel nearest the
        equator); none where neither does. The longitudes are split only where the halves of
        each band of latitudes stay that wide: near a pole the band nearer it is much
        narrower than the box (at 89.995 half as wide as at 89.99), and split as the box
        was its halves were narrower than a cell."""
        tall = (self.n - self.s) * coverage.M_PER_DEG
        lat_m, lon_m = (self.s + self.n) / 2, (self.w + self.e) / 2
        lats = [(self.s, lat_m), (lat_m, self.n)] if tall >= 2 * MIN_BOX_M else [(self.s, self.n)]
        wide = (self.e - self.w) * coverage.M_PER_DEG * min(_widest_cos(s, n) for s, n in lats)
        lons = [(self.w, lon_m), (lon_m, self.e)] if wide >= 2 * MIN_BOX_M else [(self.w, self.e)]
        if len(lats) == len(lons) == 1:
            return []
        return [Box(w, s, e, n, self.depth + 1) for s, n in lats for w, e in lons]

    def distance_m(self, lat: float, lon: float) -> float:
        """From the point to the box's nearest point (0 inside it), on the sphere, across the
        antimeridian too. Where the point's meridian crosses the box, that point is on it (no
        point of the box is nearer in latitude). Elsewhere it is on one of the box's two
        meridian edges (along a parallel the distance grows with the longitude between), at
        an end of the edge or where the great circle from the point meets the edge square:
        near a pole the box's corner nearest in latitude and longitude can be far from its
        nearest point (a box reaching the pole on the far side of it from the point is as
        near as the pole)."""
        lo = coverage.unwrap_lon(lon, (self.w + self.e) / 2)
        if self.w <= lo <= self.e:
            return coverage.distance_m(lat, lon, min(max(lat, self.s), self.n), lo)
        phi = math.radians(lat)
        best = math.inf
        for edge in (self.w, self.e):
            # on meridian ``edge``, cos(distance) = sin(phi) sin(la) + cos(phi) cos(dl) cos(la): greatest at ``foot``
            foot = math.degrees(math.atan2(math.sin(phi), math.cos(phi) * math.cos(math.radians(lon - edge))))
            for la in (self.s, self.n, *((foot,) if self.s < foot < self.n else ())):
                best = min(best, coverage.distance_m(lat, lon, la, edge))
        return best

    def near(self, lats: np.ndarray, lons: np.ndarray) -> np.ndarray:
        """Which of these cell centres lie within ``REACH_M`` of the box: the cells that may
        hold a point of it. A little more than that near the poles, never less."""
        dlat = REACH_M / coverage.M_PER_DEG
        top = min(90.0, max(abs(self.s), abs(self.n)) + dlat)
        cos = math.cos(math.radians(top))
        ok = (lats >= self.s - dlat) & (lats <= self.n + dlat)
        if cos > 1e-9 and (dlon := REACH_M / (coverage.M_PER_DEG * cos)) < 180.0:
            mid = (self.w + self.e) / 2
            ul = lons - 360.0 * np.round((lons - mid) / 360.0)
            ok &= (ul >= self.w - dlon) & (ul <= self.e + dlon)
        return ok


@dataclass
class Listing:
    """What a search listed: every photo once (``photos``, by id, as first listed), and how
    the boxes ended."""

    photos: dict[str, Any]
    calls: int
    page: int
    complete: list[Box] = field(default_factory=list)     # listed completely, not split
    dense: list[Box] = field(default_factory=list)        # cut, and about a cell across: not split
    unsearched: list[Box] = field(default_factory=list)   # ground not known that the budget or the stop left
    skipped: list[Box] = field(default_factory=list)      # every cell of their ground known before
    unread: dict[str, int] = field(default_factory=dict)  # items the provider listed that cannot be measured

    @property
    def cut(self) -> list[Box]:
        return self.dense + self.unsearched


@functools.lru_cache(maxsize=1 << 16)
def _centre(cell: int) -> tuple[float, float]:
    return h3.cell_to_latlng(h3.int_to_str(cell))


def reached(cells: Iterable[int], boxes: Iterable[Box]) -> set[int]:
    """The cells that may hold a point of one of the boxes (``Box.near``)."""
    cells, boxes = sorted(set(cells)), list(boxes)
    if not cells or not boxes:
        return set()
    ll = np.array([_centre(c) for c in cells])
    mask = np.zeros(len(cells), dtype=bool)
    for b in boxes:
        mask |= b.near(ll[:, 0], ll[:, 1])
    return {c for c, m in zip(cells, mask.tolist()) if m}


@dataclass
class Found:
    """A search's result as ``requests`` uses it."""

    photos: list                  # kept, and those on ground already queued or covered
    listed: int                   # distinct photos the provider listed
    known_empty: set[int]         # ground listed completely with no photo in the circle
    unknown: set[int]             # ground still not known after this request (neither queued, swept nor listed empty)
    beside_dense: set[int]        # the part of it a dense box reaches: no search lists it completely
    listing: Listing
    skipped: dict[str, int]

    @property
    def truncated(self) -> bool:
        return bool(self.unknown)


async def search(provider, lat: float, lon: float, radius_m: float, roots: Iterable[tuple[float, ...]], *,
                 max_photos: int, ground: set[int], known: set[int], taken: set[int], max_searches: int,
                 at_once: int) -> Listing:
    """Search the provider over the circle's boxes ``roots`` (module docstring). ``known``:
    ground cells swept, held or listed completely by a queued request (their boxes are
    skipped); ``taken``: ground cells covered or held, whose photos are not queued again
    (not counted towards ``max_photos``); ``max_searches`` calls at most, ``at_once`` at a
    time (``SIS_SWEEP_MAX_SEARCHES``, ``SIS_SWEEP_SEARCHES_AT_ONCE``). Raises ``SourceError``
    when a call fails."""
    if max_searches < 1 or at_once < 1:
        raise ValueError(f"a search makes at least one call, one at a time (max_searches={max_searches}, "
                         f"at_once={at_once})")
    page = max(1, min(panoramax.PAGE_LIMIT, max_photos))
    out = Listing({}, 0, page)
    heap: list[tuple[float, int, int, Box]] = []
    for i, (w, s, e, n) in enumerate(roots):
        b = Box(w, s, e, n)
        heapq.heappush(heap, (b.distance_m(lat, lon), 0, i, b))
    order = len(heap)
    fresh: dict[str, int] = {}                 # id -> cell of photos in the circle on ground not taken

    def complete_fresh() -> int:
        if len(fresh) < max_photos:
            return len(fresh)
        near = reached(fresh.values(), [*out.dense, *(b for *_, b in heap), *out.skipped])
        return sum(1 for c in fresh.values() if c not in near)

    while heap and out.calls < max_searches and complete_fresh() < max_photos:
        batch = [heapq.heappop(heap)[-1] for _ in range(min(at_once, max_searches - out.calls, len(heap)))]
        out.calls += len(batch)
        answers = await asyncio.gather(*(provider.search(b.bbox, page) for b in batch), return_exceptions=True)
        for a in answers:
            if isinstance(a, BaseException):
                raise a
        for b, found in zip(batch, answers):
            for p in found.photos:
                if p.id not in out.photos:
                    out.photos[p.id] = p
            kids = b.halves() if found.truncated else []
            if not kids:                                 # a leaf: its own listing stands for its ground
                (out.dense if found.truncated else out.complete).append(b)
                for why, k in found.skipped.items():
                    out.unread[why] = out.unread.get(why, 0) + k
                for p in found.photos:
                    if p.id not in fresh and coverage.distance_m(lat, lon, p.lat, p.lon) <= radius_m:
                        cell = coverage.point_cell(p.lat, p.lon)
                        if cell not in taken:
                            fresh[p.id] = cell
                continue
            for k in kids:
                if reached(ground, [k]) <= known:
                    out.skipped.append(k)
                else:
                    heapq.heappush(heap, (k.distance_m(lat, lon), k.depth, order, k))
                    order += 1
    out.unsearched = [b for *_, b in sorted(heap)]
    return out


def keep(listing: Listing, lat: float, lon: float, radius_m: float, *, max_photos: int, ground: set[int],
         known: set[int], taken: set[int]) -> Found:
    """What the request takes of the listing (module docstring): the photos in the circle,
    at most ``max_photos`` of them on ground not ``taken``, whole cells listed completely
    nearest the centre first; a cell a cut box reaches only where no such cell is left.
    ``taken`` may hold cells off the circle's ground (a photo's edge cell)."""
    by_cell: dict[int, list] = {}
    for p in listing.photos.values():
        if coverage.distance_m(lat, lon, p.lat, p.lon) <= radius_m:
            by_cell.setdefault(coverage.point_cell(p.lat, p.lon), []).append(p)
    near_cut = reached(set(ground) | set(by_cell), [*listing.cut, *listing.skipped])
    on_taken = [p for c, ps in by_cell.items() if c in taken for p in ps]
    open_ = {c: ps for c, ps in by_cell.items() if c not in taken}

    def centre_m(c: int) -> float:
        return coverage.distance_m(lat, lon, *_centre(c))

    whole = sorted((c for c in open_ if c not in near_cut), key=lambda c: (centre_m(c), c))
    part = sorted((c for c in open_ if c in near_cut), key=lambda c: (centre_m(c), c))

    def fit(cells: list[int]) -> list:
        out: list = []
        for c in cells:
            if len(out) + len(open_[c]) <= max_photos:
                out += open_[c]
        return out

    kept = fit(whole) or fit(part)
    if not kept and open_:          # the nearest cell alone holds more than a request takes: its nearest photos
        kept = sorted(open_[(whole or part)[0]], key=lambda p: coverage.distance_m(lat, lon, p.lat, p.lon))
        del kept[max_photos:]
    kept_cells = {coverage.point_cell(p.lat, p.lon) for p in kept}
    with_photos = set(by_cell)
    known_empty = {c for c in ground if c not in with_photos and c not in near_cut}
    unknown = set(ground) - known - taken - kept_cells - known_empty
    return Found(photos=kept + on_taken, listed=len(listing.photos), known_empty=known_empty, unknown=unknown,
                 beside_dense=reached(unknown, listing.dense), listing=listing, skipped=dict(listing.unread))
