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
    brand: str | None
    props: dict[str, Any]


def _license(sources: Any) -> str | None:
    found = sorted({s.get("license") for s in sources or () if isinstance(s, dict) and s.get("license")})
    return " AND ".join(found)[:80] if found else None


def place(rec: dict[str, Any], lon: float, lat: float, fallback_license: str) -> Place | None:
    """One place from an Overture record (already holding its coordinates), or None for
    a closed one. Raises ValueError for a record that cannot be a place."""
    gid = rec.get("id")
    if not isinstance(gid, str) or not gid:
        raise ValueError("no id")
    if not (-180 <= lon <= 180 and -90 <= lat <= 90):
        raise ValueError(f"position {lon},{lat} is off the globe")
    if rec.get("operating_status") == "permanently_closed":
        return None
    names = rec.get("names") or {}
    cats = rec.get("categories") or {}
    brand = rec.get("brand") or {}
    lic = _license(rec.get("sources"))
    props: dict[str, Any] = {"category": cats.get("primary"), "confidence": rec.get("confidence")}
    if lic is None:
        props["licenseFrom"] = "the load (the record names no source license)"
    sources = [s.get("dataset") for s in rec.get("sources") or () if isinstance(s, dict) and s.get("dataset")]
    if sources:
        props["sources"] = sorted(set(sources))
    qid = brand.get("wikidata") if isinstance(brand, dict) else None
    return Place(f"overture:{gid}", float(lon), float(lat), names.get("primary"), lic or fallback_license,
                 qid if isinstance(qid, str) and qid.startswith("Q") else None, props)


def read_parquet(path: Path, fallback_license: str, on_progress) -> Iterator[Place | Bad]:  # noqa: ANN001
    """Places from a GeoParquet file, batch by batch; ``on_progress(share)`` after each.
    pyarrow is imported here, not at the top: every ``sis`` command discovers the kinds."""
    import pyarrow.parquet as pq

    f = pq.ParquetFile(str(path))
    have = set(f.schema_arrow.names)
    missing = {"id", "geometry"} - have
    if missing:
        raise ValueError(f"not an Overture places file: no column {', '.join(sorted(missing))}")
    total = max(1, f.metadata.num_rows)
    done = 0
    for batch in f.iter_batches(batch_size=20_000, columns=[c for c in COLUMNS if c in have]):
        recs = batch.to_pylist()
        geoms = shapely.from_wkb([r.get("geometry") for r in recs], on_invalid="ignore")
        for n, (rec, g) in enumerate(zip(recs, geoms), done + 1):
            if g is None or g.geom_type != "Point" or g.is_empty:
                yield Bad(f"row {n}", "geometry is not a WKB point")
                continue
            try:
                p = place(rec, g.x, g.y, fallback_license)
            except (ValueError, TypeError, AttributeError) as exc:
                yield Bad(f"row {n}", str(exc))
                continue
            if p is not None:
                yield p
        done += len(recs)
        on_progress(done / total)


def read_geojsonseq(lines: TextIO, fallback_license: str) -> Iterator[Place | Bad]:
    """Places from a GeoJSON sequence: properties as Overture's columns."""
    for n, line in enumerate(lines, 1):
        text = line.strip().lstrip("\x1e")
        if not text:
            continue
        try:
            feat = json.loads(text)
            geom = feat["geometry"]
            if geom.get("type") != "Point":
                raise ValueError("geometry is not a Point")
            lon, lat = geom["coordinates"][:2]
            rec = dict(feat.get("properties") or {})
            rec.setdefault("id", feat.get("id"))
            p = place(rec, float(lon), float(lat), fallback_license)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            yield Bad(f"line {n}", str(exc) or type(exc).__name__)
            continue
        if p is not None:
            yield p
