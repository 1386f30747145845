"""Reference layers loaded from files with ``sis ingest`` (UPSTREAMS.md §2.3): airports
(OurAirports ``airports.csv``), countries, cities and rivers (Natural Earth GeoJSON) and seaports
(World Port Index CSV), all public domain.

Each file is read into ``twin_reference`` (``TwinReference``, migration 0013): one row per record
with its position, a ``rank`` (bigger is more important: an airport's class, a city's or
country's population, a port's harbour size, a river's scale rank), the properties the twin
serves, and a line geometry for rivers. A layer serves the newest ready version of its kind,
highest rank first, so a cap keeps the most important records, and names that version.

The formats' traps, handled here: OurAirports files differ in column order (read by header
name) and empty means missing; Natural Earth countries mark missing codes ``-99`` (fall back to
``ISO_A3_EH``, then ``ADM0_A3``) and come with mixed-case property names, populated places in
upper case (full files) or lower case (``_simple`` files); World Port Index CSVs may start with
a BOM and an ``OID_`` column, hold the country's name in ``Country Code`` and numbers as
``"15590.0"``.
"""
from __future__ import annotations

from typing import Any, Iterable

import sqlalchemy as sa

from coordinator.core.db import Database
from coordinator.core.db.models import TwinReference
from coordinator.core.honesty import SourceReport
from coordinator.datasets import versions
from coordinator.datasets.values import number

from .records import feature

TABLE = TwinReference.__table__
LICENSE = "public-domain"

# kind -> (layer id, what the file is)
KINDS: dict[str, tuple[str, str]] = {
    "ourairports": ("airports", "OurAirports airports.csv"),
    "ne_countries": ("countries", "Natural Earth admin-0 countries, GeoJSON"),
    "ne_places": ("cities", "Natural Earth populated places, GeoJSON"),
    "ne_rivers": ("rivers", "Natural Earth rivers and lake centerlines, GeoJSON"),
    "wpi": ("seaports", "World Port Index (NGA Pub 150) CSV"),
}
AIRPORT_RANK = {"large_airport": 4, "medium_airport": 3, "small_airport": 2, "seaplane_base": 1, "heliport": 1,
                "balloonport": 1, "closed": 0}
HARBOR_RANK = {"large": 4, "l": 4, "medium": 3, "m": 3, "small": 2, "s": 2, "very small": 1, "v": 1}


def _on_earth(lon: float, lat: float) -> tuple[float, float]:
    if not (-180 <= lon <= 180 and -90 <= lat <= 90):
        raise ValueError(f"position {lon},{lat} is off the Earth")
    return lon, lat


def _text(v: Any) -> str | None:
    v = (v if isinstance(v, str) else "" if v is None else str(v)).strip()
    return v or None


def _number(v: Any) -> float | None:
    t = _text(v)
    return None if t is None else float(t)


def _ne_number(v: Any) -> float | None:
    """A Natural Earth number: ``-99`` there means missing (never so in the CSV files, where
    -99 is a longitude like any other)."""
    x = _number(v)
    return None if x == -99 else x


def _prop(props: dict[str, Any], *names: str) -> Any:
    """The first of ``names`` present in either case (Natural Earth files differ)."""
    for name in names:
        for key in (name, name.upper(), name.lower()):
            if key in props and props[key] not in (None, "", "-99", -99):
                return props[key]
    return None


def row(fid: str, name: str | None, lon: float, lat: float, rank: float, props: dict[str, Any],
        geom: Any = None) -> dict[str, Any]:
    lon, lat = _on_earth(number(lon), number(lat))
    return {"fid": fid[:80], "name": name, "lon": lon, "lat": lat, "rank": float(rank), "props": props, "geom": geom}


def airport(r: dict[str, str]) -> dict[str, Any]:
    """One row of OurAirports ``airports.csv``, read by header name."""
    lat, lon = _number(r.get("latitude_deg")), _number(r.get("longitude_deg"))
    if lat is None or lon is None:
        raise ValueError("no latitude_deg or longitude_deg")
    kind = _text(r.get("type")) or "unknown"
    scheduled = _text(r.get("scheduled_service")) == "yes"
    ident = _text(r.get("ident")) or _text(r.get("id"))
    if ident is None:
        raise ValueError("no ident or id")
    return row(ident, _text(r.get("name")), lon, lat, AIRPORT_RANK.get(kind, 0) + (0.5 if scheduled else 0),
               {"ident": ident, "type": kind, "iata": _text(r.get("iata_code")),
                "icao": _text(r.get("icao_code")),      # not gps_code: a heliport's K00A is no ICAO code
                "municipality": _text(r.get("municipality")), "country": _text(r.get("iso_country")),
                "elevationFt": _number(r.get("elevation_ft")), "scheduledService": scheduled})


def seaport(r: dict[str, str]) -> dict[str, Any]:
    """One row of the World Port Index CSV (header names, a BOM stripped by the reader)."""
    lat, lon = _number(r.get("Latitude")), _number(r.get("Longitude"))
    if lat is None or lon is None:
        raise ValueError("no Latitude or Longitude")
    port = _text(r.get("World Port Index Number"))
    name = _text(r.get("Main Port Name"))
    if port is None and name is None:
        raise ValueError("no World Port Index Number or Main Port Name")
    size = _text(r.get("Harbor Size"))
    depth = _number(r.get("Channel Depth (m)"))
    return row(f"wpi:{int(float(port)) if port else name}", name, lon, lat,
               HARBOR_RANK.get((size or "").lower(), 0),
               {"portNumber": int(float(port)) if port else None, "unlocode": _text(r.get("UN/LOCODE")),
                "country": _text(r.get("Country Code")), "harborSize": size, "harborType": _text(r.get("Harbor Type")),
                "channelDepthM": depth})


def _points(geometry: dict[str, Any]) -> Iterable[list[float]]:
    def walk(c: Any) -> Iterable[list[float]]:
        if not isinstance(c, list):        # text would be walked letter by letter for ever
            raise ValueError("coordinates must be arrays of numbers")
        if c and not isinstance(c[0], list):
            yield c
        else:
            for part in c:
                yield from walk(part)
    return walk(geometry.get("coordinates"))


def country(f: dict[str, Any]) -> dict[str, Any]:
    """A Natural Earth country at its label point (``LABEL_X``/``LABEL_Y``), else the centre of
    its outline's bounding box; the outline itself is not served in the twin. Its outline must
    be one (a Polygon or MultiPolygon): a places or rivers file, which has names and even label
    points, is then every record bad, as the other kinds refuse a file of another kind."""
    g = f.get("geometry") or {}
    if g.get("type") not in ("Polygon", "MultiPolygon"):
        raise ValueError(f"geometry {g.get('type')!r}, not a country's outline (Polygon or MultiPolygon)")
    p = f.get("properties") or {}
    name = _text(_prop(p, "NAME", "ADMIN"))
    iso3 = _text(_prop(p, "ISO_A3", "ISO_A3_EH", "ADM0_A3"))
    if name is None and iso3 is None:
        raise ValueError("no NAME, ADMIN or ISO code")
    lx, ly = _prop(p, "LABEL_X"), _prop(p, "LABEL_Y")
    if lx is not None and ly is not None:
        lon, lat, how = number(lx), number(ly), "label-point"
    else:
        pts = list(_points(g))
        if not pts:
            raise ValueError("an outline with no points and no label point")
        xs, ys = [number(q[0]) for q in pts], [number(q[1]) for q in pts]
        lon, lat, how = (min(xs) + max(xs)) / 2, (min(ys) + max(ys)) / 2, "bbox-centre"
    pop = _ne_number(_prop(p, "POP_EST"))
    return row(f"ne:{iso3 or name}", name, lon, lat, pop or 0,
               {"iso3": iso3, "iso2": _text(_prop(p, "ISO_A2", "ISO_A2_EH")), "nameLong": _text(_prop(p, "NAME_LONG")),
                "continent": _text(_prop(p, "CONTINENT")), "popEst": pop, "position": how})


def city(f: dict[str, Any]) -> dict[str, Any]:
    p = f.get("properties") or {}
    g = f.get("geometry") or {}
    if g.get("type") != "Point":
        raise ValueError(f"geometry {g.get('type')!r}, not Point")
    lon, lat = g["coordinates"][:2]
    name = _text(_prop(p, "NAME", "NAMEASCII"))
    if name is None:
        raise ValueError("no NAME")
    pop = _ne_number(_prop(p, "POP_MAX"))
    cls = _text(_prop(p, "FEATURECLA"))
    return row(f"ne:{name}:{lat:.3f}:{lon:.3f}", name, lon, lat, pop or 0,
               {"country": _text(_prop(p, "ADM0NAME")), "iso2": _text(_prop(p, "ISO_A2")),
                "popMax": pop, "capital": bool(cls and cls.lower().startswith("admin-0 capital")),
                "featureClass": cls})       # a national capital; "Admin-1 capital" is a province's


def river(f: dict[str, Any]) -> dict[str, Any]:
    """A river or lake centerline; its position is its middle vertex, its lines are served."""
    p = f.get("properties") or {}
    g = f.get("geometry") or {}
    if g.get("type") not in ("LineString", "MultiLineString"):
        raise ValueError(f"geometry {g.get('type')!r}, not a line")
    pts = list(_points(g))
    if len(pts) < 2:
        raise ValueError("a line of fewer than two points")
    for q in pts:
        _on_earth(number(q[0]), number(q[1]))
    mid = pts[len(pts) // 2]
    name = _text(_prop(p, "name_en", "name"))
    scalerank = _ne_number(_prop(p, "scalerank"))
    return row(f"ne:{_text(_prop(p, 'ne_id')) or name or 'river'}:{mid[0]:.3f}:{mid[1]:.3f}", name, mid[0], mid[1],
               10 - (scalerank if scalerank is not None else 10),
               {"featureClass": _text(_prop(p, "featurecla")), "scalerank": scalerank},
               {"type": g["type"], "coordinates": g["coordinates"]})


async def read_layer(db: Database, kind: str, limit: int) -> tuple[list[dict[str, Any]], SourceReport | None, int]:
    """The newest ready version's records of ``kind``, highest rank first, at most ``limit``;
    its report (None when none is loaded) and how many records it holds in all."""
    version, report = await versions.current(db, kind)
    if version is None:
        return [], None, 0
    t = TABLE
    q = (sa.select(t.c.fid, t.c.name, t.c.lon, t.c.lat, t.c.props, t.c.geom)
         .where(t.c.version_id == version.id).order_by(t.c.rank.desc(), t.c.id).limit(limit))
    async with db.read() as s:
        rows = (await s.execute(q)).all()
    lic = version.license
    out = [feature(r.fid, r.geom or {"type": "Point", "coordinates": [r.lon, r.lat]}, lic, name=r.name, **r.props)
           for r in rows]
    return out, report, version.records
