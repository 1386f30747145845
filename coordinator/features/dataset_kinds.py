"""The map-data kinds of ``sis ingest`` (docs/features.md):

- ``osm``: an OpenStreetMap extract (``.osm.pbf``, ``.osm``): towers, power, trees,
  gates, roads and brand outlets; ODbL-1.0. Its extent is the extract's declared bounds
  where the header has them.
- ``places``: Overture places (GeoParquet, or a GeoJSON sequence); each record carries
  its own sources' license. Every load is a snapshot of the place-trends archive.

A record whose text does not fit its columns (``fid``, ``license``, ``brand``: lengths read
from the model) is a bad record, checked here where its rows are built: PostgreSQL refused
such a row and failed the whole load, SQLite kept it. A brand is its Wikidata ids
(``brand_ids``): an outlet of several brands is one brand row for each.
"""
from __future__ import annotations

import re
from typing import Any

from coordinator.datasets.kinds import dataset_kind
from coordinator.datasets.values import column_limits, too_long
from . import osm, overture, store
from .osm import Bad

LIMITS = column_limits(store.LOAD_TABLE, store.TABLE)
WIKIDATA_ID = re.compile(r"Q[1-9][0-9]*")


def brand_ids(value: Any) -> list[str]:
    """The Wikidata ids a brand is given as: ``brand:wikidata`` lists several separated by
    ``;`` (a shop of two chains), each an outlet of its brand; stored whole, ``Q1;Q2`` was
    matched by no query (``brand_exposure`` asks for one ``Q`` and digits) and, longer than
    the column, failed a PostgreSQL load. What is not ``Q`` and digits is no brand here."""
    if not isinstance(value, str):
        return []
    out: list[str] = []
    for part in value.split(";"):
        part = part.strip()
        if WIKIDATA_ID.fullmatch(part) and len(part) <= LIMITS["brand"] and part not in out:
            out.append(part)
    return out


def _rows(load, where: str, fid: str, classes: list[str], brands: list[str],  # noqa: ANN001
          **kw: Any) -> list[dict] | None:
    """The rows of one record, a row more for each brand after the first; None, the record
    counted bad, where one does not fit its columns."""
    rows = store.rows_for(load.version_id, fid, classes, brand=brands[0] if brands else None, **kw)
    for extra in brands[1:]:
        rows += store.rows_for(load.version_id, fid, ["brand"], brand=extra, **kw)
    for row in rows:
        why = too_long(row, LIMITS)
        if why:
            load.bad(where, why)
            return None
    return rows


def _license_fits(load) -> None:  # noqa: ANN001
    """The load's license is every row's that names none of its own: one longer than the
    column would make every record bad, so the load is refused at once."""
    if len(load.license) > LIMITS["license"]:
        raise ValueError(f"its license is {len(load.license)} characters, longer than the {LIMITS['license']} "
                         "a map feature keeps: give a shorter --license (an SPDX id)")


@dataset_kind(store.OSM_KIND, description="OpenStreetMap extract (.osm.pbf or .osm XML)", license=osm.LICENSE,
              suffixes=(".osm.pbf", ".osm"), discard=store.discard)
async def load_osm(load) -> None:  # noqa: ANN001
    _license_fits(load)
    bounds = osm.declared_bounds(load.path)
    if bounds is not None:
        load.declare_extent(bounds)
    writer = store.Writer(load.db, load.version_id)
    for item in osm.read(load.path):
        if isinstance(item, Bad):
            load.bad(item.where, item.reason)
            continue
        brands = brand_ids(item.tags.get("brand:wikidata"))
        classes = item.classes if brands else [c for c in item.classes if c != "brand"]
        if not classes:
            load.bad(item.where, f"brand:wikidata {item.tags.get('brand:wikidata', '')[:40]!r} is no Wikidata id "
                                 "(Q and digits), and nothing else of it is served")
            continue
        rows = _rows(load, item.where, item.fid, classes, brands, license=load.license, point=item.point,
                     line=item.line, name=item.tags.get("name"), props=item.tags)
        if rows is None:
            continue
        await writer.add(rows)
        if item.point is not None:
            load.accepted(lon=item.point[0], lat=item.point[1])
        else:
            xs = [c[0] for c in item.line]
            ys = [c[1] for c in item.line]
            load.accepted(bbox=(min(xs), min(ys), max(xs), max(ys)))
    await writer.close()
    await store.analyze(load.db)
    load.progress(load.file_bytes)


@dataset_kind(store.PLACES_KIND, description="Overture places (GeoParquet, or a GeoJSON sequence)",
              license=overture.DEFAULT_LICENSE, suffixes=(".parquet", ".geoparquet", ".geojsonl", ".geojsons",
                                                          ".geojsonseq", ".ndjson"),
              discard=store.discard)
async def load_places(load) -> None:  # noqa: ANN001
    _license_fits(load)
    if load.path.name.lower().endswith((".parquet", ".geoparquet")):
        items = overture.read_parquet(load.path, load.license, lambda share: load.progress(int(share * load.file_bytes)))
    else:
        items = overture.read_geojsonseq(load.open(text=True), load.license)
    writer = store.Writer(load.db, load.version_id)
    for item in items:
        if isinstance(item, Bad):
            load.bad(item.where, item.reason)
            continue
        brands = brand_ids(item.brand)
        rows = _rows(load, item.where or item.fid, item.fid, ["place"] + (["brand"] if brands else []), brands,
                     license=item.license, point=(item.lon, item.lat), name=item.name, props=item.props)
        if rows is None:
            continue
        await writer.add(rows)
        load.accepted(lon=item.lon, lat=item.lat)
    await writer.close()
    await store.analyze(load.db)
