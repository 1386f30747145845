"""Reading an OpenStreetMap extract (``.osm.pbf``, or ``.osm`` XML) with pyosmium.

Only objects carrying a key some tool serves reach Python (``KeyFilter``); node
locations are kept for every node by pyosmium's own index so a way's geometry is known.
A way whose nodes are missing from the extract (cut at its border) is a bad record:
counted and named, never dropped silently and never served with a guessed shape.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import osmium

from .classes import classify, kept

LICENSE = "ODbL-1.0"
KEYS = ("man_made", "power", "natural", "barrier", "highway", "brand:wikidata")


@dataclass
class Mapped:
    """One OSM object some tool serves, copied out of pyosmium's buffers."""

    fid: str
    classes: list[str]
    tags: dict[str, str]
    point: tuple[float, float] | None = None
    line: list[list[float]] | None = None


@dataclass
class Bad:
    where: str
    reason: str


def declared_bounds(path: Path) -> tuple[float, float, float, float] | None:
    """The extract's declared bounds (the header's box: what it claims to cover, which is
    what "no loaded extract covers this request" is judged by), or None."""
    reader = osmium.io.Reader(str(path), osmium.osm.osm_entity_bits.NOTHING)
    try:
        box = reader.header().box()
    finally:
        reader.close()
    if not box.valid():
        return None
    bl, tr = box.bottom_left, box.top_right
    return (bl.lon, bl.lat, tr.lon, tr.lat)


def read(path: Path) -> Iterator[Mapped | Bad]:
    fp = (osmium.FileProcessor(str(path), osmium.osm.NODE | osmium.osm.WAY)
          .with_locations().with_filter(osmium.filter.KeyFilter(*KEYS)))
    for obj in fp:
        tags = {t.k: t.v for t in obj.tags}
        if obj.is_node():
            classes = classify(tags, is_way=False)
            if not classes:
                continue
            loc = obj.location
            if not loc.valid():
                yield Bad(f"node {obj.id}", "no valid location")
                continue
            yield Mapped(f"osm:node/{obj.id}", classes, kept(tags), point=(loc.lon, loc.lat))
        else:
            classes = classify(tags, is_way=True)
            if not classes:
                continue
            try:
                line = [[n.lon, n.lat] for n in obj.nodes]
            except osmium.InvalidLocationError:
                yield Bad(f"way {obj.id}", "some of its nodes are not in the extract")
                continue
            if len(line) < 2:
                yield Bad(f"way {obj.id}", f"{len(line)} node(s): not a line")
                continue
            yield Mapped(f"osm:way/{obj.id}", classes, kept(tags), line=line)
