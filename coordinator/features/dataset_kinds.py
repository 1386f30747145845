"""The map-data kinds of ``sis ingest`` (docs/features.md):

- ``osm``: an OpenStreetMap extract (``.osm.pbf``, ``.osm``): towers, power, trees,
  gates, roads and brand outlets; ODbL-1.0. Its extent is the extract's declared bounds
  where the header has them.
- ``places``: Overture places (GeoParquet, or a GeoJSON sequence); each record carries
  its own sources' license. Every load is a snapshot of the place-trends archive.
"""
from __future__ import annotations

from coordinator.datasets.kinds import dataset_kind
from . import osm, overture, store
from .osm import Bad


@dataset_kind(store.OSM_KIND, description="OpenStreetMap extract (.osm.pbf or .osm XML)", license=osm.LICENSE,
              suffixes=(".osm.pbf", ".osm"), discard=store.discard)
async def load_osm(load) -> None:  # noqa: ANN001
    bounds = osm.declared_bounds(load.path)
    if bounds is not None:
        load.declare_extent(bounds)
    writer = store.Writer(load.db, load.version_id)
    for item in osm.read(load.path):
        if isinstance(item, Bad):
            load.bad(item.where, item.reason)
            continue
        rows = store.rows_for(load.version_id, item.fid, item.classes, license=load.license, point=item.point,
                              line=item.line, name=item.tags.get("name"), brand=item.tags.get("brand:wikidata"),
                              props=item.tags)
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
    if load.path.name.lower().endswith((".parquet", ".geoparquet")):
        items = overture.read_parquet(load.path, load.license, lambda share: load.progress(int(share * load.file_bytes)))
    else:
        items = overture.read_geojsonseq(load.open(text=True), load.license)
    writer = store.Writer(load.db, load.version_id)
    for item in items:
        if isinstance(item, Bad):
            load.bad(item.where, item.reason)
            continue
        await writer.add(store.rows_for(load.version_id, item.fid, ["place"] + (["brand"] if item.brand else []),
                                        license=item.license, point=(item.lon, item.lat), name=item.name,
                                        brand=item.brand, props=item.props))
        load.accepted(lon=item.lon, lat=item.lat)
    await writer.close()
    await store.analyze(load.db)
