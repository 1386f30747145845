"""Reading Overture places: GeoParquet (pyarrow, in record batches, so a release's
files are never held whole) and GeoJSON sequences (one Feature a line, RFC 8142's
record separator allowed), both in the schema of UPSTREAMS.md §10 / §2.4.

A record's license is its own sources' (``sources[].license``, several joined as an
SPDX ``AND``), falling back to the load's license only when the record names none, and
then said so in its props. A permanently closed place is kept out: Overture gives it
confidence 0 and it is not a place any more.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, TextIO

import shapely

from coordinator.datasets.values import not_utf8, number

from .osm import Bad

DEFAULT_LICENSE = "CDLA-Permissive-2.0"
COLUMNS = ("id", "geometry", "names", "categories", "confidence", "sources", "brand", "operating_status")


@dataclass
class Place:
    fid: str
    lon: float
    lat: float
    name: str | None
    license: str
    brand: str | None               # its brand's Wikidata id as the record gives it (``dataset_kinds`` reads it)
    props: dict[str, Any]
    where: str = ""                 # "line 12", "row 40": as a bad record of it is named


def _license(licenses: Any) -> str | None:
    found = sorted({x for x in licenses or () if isinstance(x, str) and x})
    # Never cut to the column's length: a cut license names licenses the record does not
    # have; one too long for the column is a bad record (``dataset_kinds``).
    return " AND ".join(found) if found else None


def make_place(gid: Any, lon: float, lat: float, *, name: Any, category: Any, confidence: Any, status: Any,
               licenses: Any, datasets: Any, qid: Any, fallback_license: str) -> Place | None:
    """One place from an Overture record's fields, or None for a closed one. Raises
    ValueError for a record that cannot be a place."""
    if not isinstance(gid, str) or not gid:
        raise ValueError("no id")
    if not (-180 <= lon <= 180 and -90 <= lat <= 90):
        raise ValueError(f"position {lon},{lat} is off the globe")
    if status == "permanently_closed":
        return None
    lic = _license(licenses)
    props: dict[str, Any] = {"category": category, "confidence": confidence}
    if lic is None:
        props["licenseFrom"] = "the load (the record names no source license)"
    ds = sorted({d for d in datasets or () if isinstance(d, str) and d})
    if ds:
        props["sources"] = ds
    return Place(f"overture:{gid}", float(lon), float(lat), name if isinstance(name, str) else None,
                 lic or fallback_license, qid if isinstance(qid, str) and qid.startswith("Q") else None, props)


def place(rec: dict[str, Any], lon: float, lat: float, fallback_license: str) -> Place | None:
    """One place from a whole record (a GeoJSON Feature's properties)."""
    names = rec.get("names") or {}
    cats = rec.get("categories") or {}
    brand = rec.get("brand") or {}
    sources = [x for x in rec.get("sources") or () if isinstance(x, dict)]
    return make_place(rec.get("id"), lon, lat, name=names.get("primary"), category=cats.get("primary"),
                      confidence=rec.get("confidence"), status=rec.get("operating_status"),
                      licenses=[x.get("license") for x in sources], datasets=[x.get("dataset") for x in sources],
                      qid=brand.get("wikidata") if isinstance(brand, dict) else None,
                      fallback_license=fallback_license)


def _field(batch, column: str, sub: str | None = None) -> list:  # noqa: ANN001
    """A column (or a struct column's field) of a record batch as a Python list; Nones
    where the file has no such column or field (older releases lack some)."""
    import pyarrow.compute as pc

    names = batch.schema.names
    if column not in names:
        return [None] * batch.num_rows
    arr = batch.column(names.index(column))
    if sub is not None:
        if sub not in {f.name for f in arr.type}:
            return [None] * batch.num_rows
        arr = pc.struct_field(arr, sub)
    return arr.to_pylist()


def _per_row(batch, column: str, sub: str) -> list[list]:  # noqa: ANN001
    """A list-of-struct column's field, one list per row (``sources[].license``), read
    flat in Arrow and regrouped, rather than every row's structs turned into dicts."""
    import pyarrow.compute as pc

    out: list[list] = [[] for _ in range(batch.num_rows)]
    names = batch.schema.names
    if column not in names:
        return out
    arr = batch.column(names.index(column))
    values = arr.flatten()
    if sub not in {f.name for f in values.type}:
        return out
    for i, v in zip(pc.list_parent_indices(arr).to_pylist(), pc.struct_field(values, sub).to_pylist()):
        out[i].append(v)
    return out


def read_parquet(path: Path, fallback_license: str, on_progress) -> Iterator[Place | Bad]:  # noqa: ANN001
    """Places from a GeoParquet file, batch by batch; ``on_progress(share)`` after each.
    Fields are read column by column in Arrow (turning each row's nested structs into
    dicts was most of a load's time). pyarrow is imported here, not at the top: every
    ``sis`` command discovers the kinds."""
    import pyarrow.parquet as pq

    f = pq.ParquetFile(str(path))
    have = set(f.schema_arrow.names)
    missing = {"id", "geometry"} - have
    if missing:
        raise ValueError(f"not an Overture places file: no column {', '.join(sorted(missing))}")
    total = max(1, f.metadata.num_rows)
    done = 0
    for batch in f.iter_batches(batch_size=50_000, columns=[c for c in COLUMNS if c in have]):
        geoms = shapely.from_wkb(_field(batch, "geometry"), on_invalid="ignore")
        points = (shapely.get_type_id(geoms) == 0) & ~shapely.is_empty(geoms)
        xs, ys = shapely.get_x(geoms), shapely.get_y(geoms)
        cols = zip(_field(batch, "id"), _field(batch, "names", "primary"), _field(batch, "categories", "primary"),
                   _field(batch, "confidence"), _field(batch, "operating_status"), _field(batch, "brand", "wikidata"),
                   _per_row(batch, "sources", "license"), _per_row(batch, "sources", "dataset"))
        for n, (gid, name, cat, conf, status, qid, lics, dss) in enumerate(cols):
            if not points[n]:
                yield Bad(f"row {done + n + 1}", "geometry is not a WKB point")
                continue
            why = not_utf8((gid, name, cat, status, qid, lics, dss))    # Arrow strings may hold a NUL
            if why:
                yield Bad(f"row {done + n + 1}", why)
                continue
            try:
                p = make_place(gid, float(xs[n]), float(ys[n]), name=name, category=cat, confidence=conf,
                               status=status, licenses=lics, datasets=dss, qid=qid, fallback_license=fallback_license)
            except (ValueError, TypeError) as exc:
                yield Bad(f"row {done + n + 1}", str(exc))
                continue
            if p is not None:
                p.where = f"row {done + n + 1}"
                yield p
        done += batch.num_rows
        on_progress(done / total)


def read_geojsonseq(lines: TextIO, fallback_license: str) -> Iterator[Place | Bad]:
    """Places from a GeoJSON sequence: properties as Overture's columns."""
    for n, line in enumerate(lines, 1):
        text = line.strip().lstrip("\x1e")
        if not text:
            continue
        why = not_utf8(text)
        if why:
            yield Bad(f"line {n}", why)
            continue
        try:
            feat = json.loads(text)
            # After parsing too: an escaped lone surrogate ("\\ud800") or NUL ("\\u0000") is
            # plain ASCII in the line, and failed the whole load where it was written. Only a
            # line with an escape can hold one (JSON refuses a raw NUL, and the line's own
            # bytes are checked above): the walk costs more than the parse.
            why = not_utf8(feat) if "\\u" in text else None
            if why:
                yield Bad(f"line {n}", why)
                continue
            geom = feat["geometry"]
            if geom.get("type") != "Point":
                raise ValueError("geometry is not a Point")
            lon, lat = geom["coordinates"][:2]
            rec = dict(feat.get("properties") or {})
            rec.setdefault("id", feat.get("id"))
            p = place(rec, number(lon), number(lat), fallback_license)
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            yield Bad(f"line {n}", str(exc) or type(exc).__name__)
            continue
        if p is not None:
            p.where = f"line {n}"
            yield p
