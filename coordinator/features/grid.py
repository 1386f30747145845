"""The spatial key of map features: a fixed grid of 0.05-degree tiles, row-major.

Why a grid and not H3 here: a bbox query over a grid is one contiguous key range per
tile row (a 2-degree box is 40 ranges), which SQLite and PostgreSQL both answer from an
ordinary B-tree index, and the exact test on ``lon``/``lat`` runs on the same index
(it is covering), so neither database needs a spatial extension. Lines are stored as
chunks no wider than ``CHUNK_DEG``, keyed at their centre, so a query widened by half a
chunk finds every chunk that can touch it, and the exact intersection is tested after.
"""
from __future__ import annotations

import math
from typing import Iterable, Iterator, Sequence

TILE_DEG = 0.05
COLS = int(round(360 / TILE_DEG))          # 7200
ROWS = int(round(180 / TILE_DEG))          # 3600
CHUNK_DEG = 0.005                          # widest side of a stored line chunk (~550 m)
EARTH_R = 6_371_008.8

BBox = tuple[float, float, float, float]   # west, south, east, north


def _row(lat: float) -> int:
    return min(ROWS - 1, max(0, int(math.floor((lat + 90.0) / TILE_DEG))))


def _col(lon: float) -> int:
    return min(COLS - 1, max(0, int(math.floor((lon + 180.0) / TILE_DEG))))


def tile_of(lon: float, lat: float) -> int:
    return _row(lat) * COLS + _col(lon)


def tile_ranges(box: BBox) -> list[tuple[int, int]]:
    """Inclusive key ranges covering ``box``: one per tile row."""
    w, s, e, n = box
    c0, c1 = _col(w), _col(e)
    return [(r * COLS + c0, r * COLS + c1) for r in range(_row(s), _row(n) + 1)]


def tiles(box: BBox) -> list[int]:
    """Every tile key of ``box``: as an IN list they are equality seeks on the index's
    third column, which both databases use (an OR of ranges there is not used by SQLite's
    planner, measured: it scanned the whole version)."""
    return [k for a, b in tile_ranges(box) for k in range(a, b + 1)]


def widen(box: BBox, deg: float) -> BBox:
    w, s, e, n = box
    return (max(-180.0, w - deg), max(-90.0, s - deg), min(180.0, e + deg), min(90.0, n + deg))


def reaches_pole(lat: float, radius_m: float) -> bool:
    """Whether a circle holds a pole (or touches it)."""
    dlat = math.degrees(radius_m / EARTH_R)
    return lat + dlat >= 90.0 or lat - dlat <= -90.0


def circle_box(lat: float, lon: float, radius_m: float) -> BBox:
    """The bbox around a circle on the sphere. A circle holding a pole holds every longitude:
    its box runs from -180 to 180, from the pole to its far edge. Any other spans the
    longitudes of its two tangent meridians (lon +- asin(sin(r/R) / cos(lat)), wider than
    r/R / cos(lat) near the poles), stopped at the antimeridian: what lies past it is not in
    the box (``antimeridian_caveats``)."""
    d = radius_m / EARTH_R
    dlat = math.degrees(d)
    s, n = max(-90.0, lat - dlat), min(90.0, lat + dlat)
    if reaches_pole(lat, radius_m):
        return (-180.0, s, 180.0, n)
    dlon = math.degrees(math.asin(min(1.0, math.sin(d) / math.cos(math.radians(lat)))))
    return (max(-180.0, lon - dlon), s, min(180.0, lon + dlon), n)


ANTIMERIDIAN = ("The circle reaches across the antimeridian (180 degrees): only its part on this side was searched; "
                "what lies beyond 180 degrees is neither listed nor counted.")


def antimeridian_caveats(lat: float, lon: float, radius_m: float) -> list[str]:
    """The caveat of a circle that reaches past 180 degrees, where ``circle_box`` stops; else
    none. A circle round a pole has none: its box holds every longitude, so nothing was cut."""
    w, _, e, _ = circle_box(lat, lon, radius_m)
    if w <= -180.0 and e >= 180.0:
        return []
    return [ANTIMERIDIAN] if w <= -180.0 or e >= 180.0 else []


def distance_m(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance (haversine)."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_R * math.asin(min(1.0, math.sqrt(a)))


def aeqd(lat0: float, lon0: float, lat: float, lon: float) -> tuple[float, float]:
    """(x, y) in metres of a point on the azimuthal equidistant plane around (lat0, lon0):
    its distance from the centre is the great-circle one, at any latitude (the poles too) and
    across 180 degrees; within a few kilometres of the centre other distances on the plane are
    off by under a millionth. Written in forms that keep their precision over metres."""
    p0, p = math.radians(lat0), math.radians(lat)
    dl = math.radians(lon - lon0)
    hav_dl = math.sin(dl / 2) ** 2
    x = math.cos(p) * math.sin(dl)
    y = math.sin(p - p0) + 2 * math.sin(p0) * math.cos(p) * hav_dl
    hav = math.sin((p - p0) / 2) ** 2 + math.cos(p0) * math.cos(p) * hav_dl
    c = 2 * math.asin(min(1.0, math.sqrt(hav)))
    sc = math.hypot(x, y)                      # sin(c)
    k = EARTH_R * (c / sc if sc > 1e-15 else 1.0)
    return x * k, y * k


def _segment_m(ax: float, ay: float, bx: float, by: float) -> float:
    """Distance from the plane's origin to the segment a-b."""
    dx, dy = bx - ax, by - ay
    L = dx * dx + dy * dy
    t = 0.0 if L == 0 else max(0.0, min(1.0, -(ax * dx + ay * dy) / L))
    return math.hypot(ax + t * dx, ay + t * dy)


def point_segment_m(lat: float, lon: float, a: Sequence[float], b: Sequence[float]) -> float:
    """Distance from a point to the segment a-b (``[lon, lat]`` pairs), on the azimuthal
    equidistant plane around the point (``aeqd``): exact to its ends, under a millionth off
    across it at the radii served, near the poles and across 180 degrees as anywhere (a
    plane of degrees scaled by the point's cos(lat) read a segment across a pole hundreds
    of metres off)."""
    return _segment_m(*aeqd(lat, lon, a[1], a[0]), *aeqd(lat, lon, b[1], b[0]))


def line_distance_m(lat: float, lon: float, coords: Sequence[Sequence[float]]) -> float:
    if len(coords) == 1:
        return distance_m(lat, lon, coords[0][1], coords[0][0])
    xy = [aeqd(lat, lon, c[1], c[0]) for c in coords]        # each vertex projected once
    return min(_segment_m(*xy[i], *xy[i + 1]) for i in range(len(xy) - 1))


def line_meets_box(coords: Sequence[Sequence[float]], box: BBox) -> bool:
    """Whether a polyline touches a bbox (Liang-Barsky on each segment; a first point
    inside the box, as most of a line's chunks in a large box have, answers at once)."""
    w, s, e, n = box
    if coords and w <= coords[0][0] <= e and s <= coords[0][1] <= n:
        return True
    for i in range(max(1, len(coords) - 1)):
        x0, y0 = coords[i][0], coords[i][1]
        x1, y1 = (coords[i + 1][0], coords[i + 1][1]) if len(coords) > 1 else (x0, y0)
        t0, t1 = 0.0, 1.0
        dx, dy = x1 - x0, y1 - y0
        ok = True
        for p, q in ((-dx, x0 - w), (dx, e - x0), (-dy, y0 - s), (dy, n - y0)):
            if p == 0:
                if q < 0:
                    ok = False
                    break
                continue
            r = q / p
            if p < 0:
                t0 = max(t0, r)
            else:
                t1 = min(t1, r)
            if t0 > t1:
                ok = False
                break
        if ok:
            return True
    return False


def chunks(coords: Sequence[Sequence[float]], max_deg: float = CHUNK_DEG) -> Iterator[list[list[float]]]:
    """Split a polyline into consecutive pieces whose bboxes are at most ``max_deg`` on a
    side, sharing their end points, so the pieces join back into the line. A segment longer
    than ``max_deg`` is cut at evenly spaced points."""
    pts: list[list[float]] = []
    for c in coords:
        p = [float(c[0]), float(c[1])]
        if pts:
            prev = pts[-1]
            steps = int(math.ceil(max(abs(p[0] - prev[0]), abs(p[1] - prev[1])) / max_deg))
            for k in range(1, steps):
                pts.append([prev[0] + (p[0] - prev[0]) * k / steps, prev[1] + (p[1] - prev[1]) * k / steps])
        pts.append(p)
    if len(pts) < 2:
        return
    cur = [pts[0]]
    w = e = pts[0][0]
    s = n = pts[0][1]
    for p in pts[1:]:
        nw, ne, ns, nn = min(w, p[0]), max(e, p[0]), min(s, p[1]), max(n, p[1])
        if len(cur) > 1 and (ne - nw > max_deg or nn - ns > max_deg):
            yield cur
            cur = [cur[-1]]
            w = e = cur[0][0]
            s = n = cur[0][1]
            nw, ne, ns, nn = min(w, p[0]), max(e, p[0]), min(s, p[1]), max(n, p[1])
        cur.append(p)
        w, e, s, n = nw, ne, ns, nn
    yield cur


def centre(coords: Iterable[Sequence[float]]) -> tuple[float, float]:
    """Centre of a chunk's bbox (its key)."""
    xs, ys = zip(*((c[0], c[1]) for c in coords))
    return (min(xs) + max(xs)) / 2, (min(ys) + max(ys)) / 2
