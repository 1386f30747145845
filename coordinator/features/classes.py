"""What a mapped object is, from its OpenStreetMap tags (UPSTREAMS.md §10), and what
each tool serves of it. One table, so the loader, the Overpass fallback and the tools
cannot disagree on what counts as a power tower or a road."""
from __future__ import annotations

from typing import Mapping

from .widths import ROAD_CLASSES

POWER = {"tower": "power_tower", "pole": "power_pole", "line": "power_line",
         "minor_line": "power_minor_line", "substation": "substation"}
LINE_CLASSES = frozenset({"power_line", "power_minor_line", "tree_row", "road"})

INFRASTRUCTURE = ("comm_tower", "power_tower", "power_pole", "power_line", "power_minor_line", "substation")
ENVIRONMENT = ("tree", "tree_row", "gate") + INFRASTRUCTURE
ROADS = ("road",)
PLACES = ("place",)
BRANDS = ("brand",)

# Heights are never mapped here; these are the class priors a renderer should use, named
# as priors (basis "assumed"), typical values chosen by this project, not measurements.
HEIGHT_PRIOR_M = {"tree": 8.0, "tree_row": 8.0, "gate": 2.0, "comm_tower": 40.0, "power_tower": 30.0,
                  "power_pole": 9.0, "power_line": 20.0, "power_minor_line": 8.0, "substation": 5.0}

KEPT_TAGS = ("name", "ref", "highway", "oneway", "lanes", "width", "surface", "operator", "voltage", "cables",
             "man_made", "tower:type", "power", "natural", "barrier", "leaf_type", "species", "height",
             "brand", "brand:wikidata", "amenity", "shop")


def classify(tags: Mapping[str, str], *, is_way: bool) -> list[str]:
    """The classes an object is served as (an object may be a mast and a brand's outlet);
    empty when nothing here serves it."""
    out: list[str] = []
    mm = tags.get("man_made")
    if mm in ("tower", "mast") and tags.get("tower:type") == "communication":
        out.append("comm_tower")
    p = tags.get("power")
    if p in ("line", "minor_line") and is_way or p in ("tower", "pole") and not is_way or p == "substation":
        out.append(POWER[p])
    nat = tags.get("natural")
    if nat == "tree" and not is_way:
        out.append("tree")
    elif nat == "tree_row" and is_way:
        out.append("tree_row")
    if tags.get("barrier") == "gate":
        out.append("gate")
    if is_way and tags.get("highway") in ROAD_CLASSES:
        out.append("road")
    if tags.get("brand:wikidata", "").startswith("Q"):
        out.append("brand")
    return out


def is_line(cls: str) -> bool:
    return cls in LINE_CLASSES


def kept(tags: Mapping[str, str]) -> dict[str, str]:
    return {k: tags[k] for k in KEPT_TAGS if k in tags}
