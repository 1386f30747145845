"""A synthetic town in the real file formats, for tests, ``--demo`` and the bench.

Nothing here is real ground: every name says "Synthetic", the extract's header says
which program wrote it, and the brand ids are in a range no Wikidata item uses
(Q999999xx). What is real is the format: an ``.osm.pbf`` written by pyosmium with its
declared bounds, Overture places as a GeoJSON sequence and as GeoParquet with the
release's columns, so the loaders are tested on the files they will meet.

The town: a street grid (residential, with secondary and primary every few lines and a
trunk across), a service road, trees along streets and a tree row, gates, masts, a
power line on towers with poles and a substation, and branded shops. ``scale`` repeats
the town's blocks to reach a feature count (the bench's million).
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Iterator

import osmium
import shapely

GENERATOR = "sis synthetic town (coordinator/features/synthetic.py): not real ground"
BRANDS = {"Q99999901": "Synthetic Mart", "Q99999902": "Synthetic Coffee"}
STEP = 0.002          # street spacing in degrees (~220 m)
NODE_STEP = 0.0005    # node spacing along streets


def _street_class(i: int) -> str:
    return "primary" if i % 10 == 4 else "secondary" if i % 5 == 2 else "residential"


def write_extract(path: Path, centre: tuple[float, float], half_deg: float = 0.01, *, bad_way: bool = False,
                  trees_per_block: int = 2) -> dict[str, int]:
    """Write a synthetic ``.osm.pbf`` (or ``.osm``) around ``centre`` (lat, lon); returns
    counts per class written. ``bad_way`` adds a way whose nodes the file lacks."""
    lat0, lon0 = centre
    w, s, e, n = lon0 - half_deg, lat0 - half_deg, lon0 + half_deg, lat0 + half_deg
    header = osmium.io.Header()
    header.add_box(osmium.osm.Box(osmium.osm.Location(w, s), osmium.osm.Location(e, n)))
    header.set("generator", GENERATOR)
    path.unlink(missing_ok=True)
    writer = osmium.SimpleWriter(str(path), header=header)
    rnd = random.Random(7)
    nid = 0
    wid = 0
    counts: dict[str, int] = {}

    def count(cls: str) -> None:
        counts[cls] = counts.get(cls, 0) + 1

    def node(lon: float, lat: float, tags: dict | None = None) -> int:
        nonlocal nid
        nid += 1
        writer.add_node(osmium.osm.mutable.Node(id=nid, location=(round(lon, 7), round(lat, 7)), tags=tags or {},
                                                version=1))
        return nid

    def way(refs: list[int], tags: dict) -> None:
        nonlocal wid
        wid += 1
        writer.add_way(osmium.osm.mutable.Way(id=wid, nodes=refs, tags=tags, version=1))

    def line(points: list[tuple[float, float]], tags: dict, node_tags: dict | None = None) -> None:
        way([node(x, y, node_tags) for x, y in points], tags)

    k = int(round(2 * half_deg / STEP))
    steps = int(round(2 * half_deg / NODE_STEP))
    for i in range(k + 1):
        x = w + i * STEP
        y = s + i * STEP
        cls = _street_class(i)
        line([(x, s + j * NODE_STEP) for j in range(steps + 1)],
             {"highway": cls, "name": f"Synthetic Street {i}"})
        line([(w + j * NODE_STEP, y) for j in range(steps + 1)],
             {"highway": cls, "name": f"Synthetic Avenue {i}", **({"oneway": "yes"} if i % 7 == 3 else {})})
        count("road")
        count("road")
    line([(w + j * NODE_STEP, s + j * NODE_STEP) for j in range(steps + 1)], {"highway": "trunk", "ref": "SYN 1"})
    line([(lon0 + 0.0003, lat0 - 0.004), (lon0 + 0.0003, lat0 + 0.004)], {"highway": "service"})
    count("road")
    count("road")
    for bi in range(k):
        for bj in range(k):
            bx, by = w + bi * STEP, s + bj * STEP
            for t in range(trees_per_block):
                node(bx + 0.0002 + rnd.random() * 0.0016, by + 0.0001, {"natural": "tree"})
                count("tree")
            if (bi + bj) % 4 == 0:
                node(bx + 0.001, by + 0.00005, {"barrier": "gate"})
                count("gate")
            if (bi * 3 + bj) % 11 == 0:
                brand = "Q99999901" if (bi + bj) % 2 else "Q99999902"
                node(bx + 0.0012, by + 0.0012, {"shop": "convenience", "name": BRANDS[brand],
                                                 "brand": BRANDS[brand], "brand:wikidata": brand})
                count("brand")
            if (bi + 2 * bj) % 17 == 0:
                node(bx + 0.0015, by + 0.0015, {"man_made": "mast", "tower:type": "communication",
                                                 "name": f"Synthetic Mast {bi}-{bj}"})
                count("comm_tower")
    line([(w + j * 0.0004, lat0 + 0.0031) for j in range(int(2 * half_deg / 0.0004) + 1)],
         {"natural": "tree_row"})
    count("tree_row")
    towers = [node(w + j * 0.002, lat0 - 0.0033, {"power": "tower"}) for j in range(k + 1)]
    way(towers, {"power": "line", "voltage": "150000", "name": "Synthetic 150 kV"})
    counts["power_tower"] = len(towers)
    count("power_line")
    for j in range(k):
        node(w + j * 0.002 + 0.001, lat0 + 0.0011, {"power": "pole"})
        count("power_pole")
    sub = [node(lon0 - 0.003 + dx, lat0 - 0.003 + dy) for dx, dy in ((0, 0), (0.0006, 0), (0.0006, 0.0005), (0, 0.0005))]
    way(sub + sub[:1], {"power": "substation", "name": "Synthetic Substation"})
    count("substation")
    if bad_way:
        way([10**12, 10**12 + 1], {"highway": "residential", "name": "Synthetic Street cut at the border"})
    writer.close()
    return counts


def places(centre: tuple[float, float], n: int, *, half_deg: float = 0.01, seed: int = 1,
           drop_every: int = 0, id_offset: int = 0) -> Iterator[dict]:
    """Overture-shaped place records (GeoJSON Features) around ``centre``: ``drop_every``
    leaves out every k-th id and ``id_offset`` starts new ids, to make a later snapshot."""
    lat0, lon0 = centre
    rnd = random.Random(seed)
    cats = ["restaurant", "school", "hospital", "convenience_store", "mosque", "bank", "pharmacy"]
    sources = [("meta", "CDLA-Permissive-2.0"), ("Foursquare", "Apache-2.0"), ("AllThePlaces", "CC0-1.0")]
    for i in range(n):
        lon = lon0 + (rnd.random() * 2 - 1) * half_deg
        lat = lat0 + (rnd.random() * 2 - 1) * half_deg
        gid = i + id_offset
        if drop_every and gid % drop_every == 0:
            continue
        ds, lic = sources[gid % 3]
        brand = list(BRANDS)[gid % 2] if gid % 13 == 0 else None
        props = {"id": f"syn{gid:08x}", "names": {"primary": f"Synthetic Place {gid}"},
                 "categories": {"primary": cats[gid % len(cats)], "alternate": []},
                 "confidence": round(0.5 + rnd.random() / 2, 3),
                 "sources": [{"property": "", "dataset": ds, "license": lic, "record_id": str(gid),
                              "update_time": "2026-10-01T00:00:00Z", "confidence": None}],
                 "brand": {"names": {"primary": BRANDS[brand]}, "wikidata": brand} if brand else None,
                 "operating_status": "open"}
        yield {"type": "Feature", "id": props["id"], "geometry": {"type": "Point", "coordinates": [lon, lat]},
               "properties": props}


def write_geojsonseq(path: Path, features: Iterator[dict], *, bad_lines: int = 0) -> None:
    with open(path, "w") as f:
        for feat in features:
            f.write(json.dumps(feat) + "\n")
        for i in range(bad_lines):
            f.write('{"type": "Feature", "geometry": {"type": "Polygon"}}\n' if i % 2 else "not json\n")


def write_geoparquet(path: Path, features: Iterator[dict]) -> None:
    """Overture's columns: WKB ``geometry``, ``bbox`` struct, nested ``names``,
    ``categories``, ``sources`` and ``brand``, with GeoParquet ``geo`` metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for f in features:
        p = dict(f["properties"])
        lon, lat = f["geometry"]["coordinates"]
        p["geometry"] = shapely.to_wkb(shapely.Point(lon, lat))
        p["bbox"] = {"xmin": lon, "xmax": lon, "ymin": lat, "ymax": lat}
        p["version"] = 1
        rows.append(p)
    table = pa.Table.from_pylist(rows)
    geo = {"version": "1.1.0", "primary_column": "geometry",
           "columns": {"geometry": {"encoding": "WKB", "geometry_types": ["Point"]}}}
    table = table.replace_schema_metadata({b"geo": json.dumps(geo).encode()})
    pq.write_table(table, path)
