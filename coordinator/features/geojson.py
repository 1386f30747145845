"""Map features as the tools serve them: GeoJSON Features (``[lon, lat]``) with each tool's
properties.

One module for the rendering because it runs in two places that must agree byte for
byte: at load time, where a point served by a bbox tool is rendered once and stored
encoded (``doc``, migration 0015), and at request time, for what has no stored ``doc``
(line features merged from their chunks, the radius tools' features with their distance,
Overpass's rows, loads made before 0015). A 2,000-place answer is then 2,000 stored
strings joined by orjson instead of 2,000 rows decoded, rebuilt as dicts and encoded
again (bench/features.py). A change to what these functions return changes the stored
docs' meaning too: it needs a migration that sets ``map_features.doc`` to NULL (those rows
are then rendered here on every request, as before 0015) or a new load.
"""
from __future__ import annotations

from typing import Any

import orjson

from .classes import HEIGHT_PRIOR_M, INFRASTRUCTURE, PLACES, is_line


def geometry(r: dict) -> dict:
    g = r["geom"]
    if g is None:
        return {"type": "Point", "coordinates": [round(r["lon"], 7), round(r["lat"], 7)]}
    if isinstance(g, dict):
        return g
    return {"type": "LineString", "coordinates": g}


def feature(r: dict, props: dict[str, Any]) -> dict:
    out = {"type": "Feature", "id": r["fid"], "geometry": geometry(r), "properties": props}
    if "distanceM" in r:
        props["distanceM"] = round(r["distanceM"], 1)
    return out


def place_properties(r: dict) -> dict[str, Any]:
    """A place's properties: its name, category, confidence, sources and own license."""
    props = r["props"]
    return {"name": r["name"], "category": props.get("category"), "confidence": props.get("confidence"),
            "sources": props.get("sources"), "license": r["license"]}


def mapped_properties(r: dict) -> dict[str, Any]:
    """An OSM feature's properties: class, name, license, the tags kept, and the height
    prior a renderer should use (the height itself is not mapped)."""
    props: dict[str, Any] = {"class": r["cls"], "name": r["name"], "license": r["license"], "tags": dict(r["props"])}
    if r["cls"] in HEIGHT_PRIOR_M:
        props["heightM"] = None
        props["heightPrior"] = {"value": HEIGHT_PRIOR_M[r["cls"]], "basis": "assumed",
                                "note": "a class prior for renderers, not a measurement"}
    return props


# The point classes a bbox tool serves, and the properties it serves them with: only these
# rows get a stored ``doc`` (trees and gates, most of an extract, are served by radius,
# with a distance that depends on the request).
BBOX_PROPERTIES = {**{c: place_properties for c in PLACES},
                   **{c: mapped_properties for c in INFRASTRUCTURE if not is_line(c)}}


def bbox_feature(r: dict) -> dict | orjson.Fragment:
    """A row of a bbox answer as its GeoJSON Feature: the stored encoding where the row
    carries one (``store.sample_box(docs=True)``), else rendered from its columns."""
    doc = r.get("doc")
    if doc is not None:
        return orjson.Fragment(doc)
    return feature(r, BBOX_PROPERTIES.get(r["cls"], mapped_properties)(r))


# The longest encoding stored: the level index (migration 0016) holds ``doc``, and a
# PostgreSQL B-tree entry holds at most about 2,700 bytes. A longer one (a place with a
# very long name or many sources) is rendered per request instead, to the same bytes.
DOC_MAX_BYTES = 2000


def doc_of(row: dict) -> str | None:
    """The stored encoding of a row a bbox tool serves as a point (``BBOX_PROPERTIES``);
    None for the rest, and for one longer than ``DOC_MAX_BYTES``."""
    render = BBOX_PROPERTIES.get(row["cls"])
    if render is None or row["geom"] is not None:
        return None
    encoded = orjson.dumps(feature(row, render(row)))
    return encoded.decode() if len(encoded) <= DOC_MAX_BYTES else None
