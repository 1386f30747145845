"""Reading an OpenStreetMap extract (``.osm.pbf``, or ``.osm`` XML) with pyosmium.

Only objects carrying a key some tool serves reach Python (``KeyFilter``); node
locations are kept for every node by pyosmium's own index so a way's geometry is known.
A way whose nodes are missing from the extract (cut at its border) is a bad record:
counted and named, never dropped silently and never served with a guessed shape. So is
an object a tool serves whose kept tags (``classes.KEPT_TAGS``: what is classified and
stored) are not UTF-8: pyosmium raises at the first such tag, which ended the whole load;
a tag that is neither kept nor classified is never read, so one not UTF-8 loses nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import osmium

from .classes import KEPT_TAGS, classify, kept

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
    where: str = ""                 # "node 12", as a bad record of it is named


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


def _tags(obj) -> tuple[dict[str, str], str | None]:  # noqa: ANN001
    """An object's tags, and why one of those kept is not UTF-8 (else None). Read whole
    where every tag is UTF-8; else the kept ones one by one, which pyosmium decodes apart."""
    try:
        return {t.k: t.v for t in obj.tags}, None
    except UnicodeDecodeError:
        return _kept_tags(obj)


def _kept_tags(obj) -> tuple[dict[str, str], str | None]:  # noqa: ANN001
    """The kept tags read one by one, and why the first of them that is not UTF-8 is not."""
    tags: dict[str, str] = {}
    why = None
    for key in KEPT_TAGS:
        try:
            value = obj.tags.get(key)
        except UnicodeDecodeError as exc:
            why = why or f"not UTF-8: byte 0x{exc.object[exc.start]:02X} in its {key} tag"
            continue
        if value is not None:
            tags[key] = value
    return tags, why


def read(path: Path) -> Iterator[Mapped | Bad]:
    fp = (osmium.FileProcessor(str(path), osmium.osm.NODE | osmium.osm.WAY)
          .with_locations().with_filter(osmium.filter.KeyFilter(*KEYS)))
    for obj in fp:
        tags, why = _tags(obj)
        if obj.is_node():
            classes = classify(tags, is_way=False)
            if not classes:
                continue
            where = f"node {obj.id}"
            if why:
                yield Bad(where, why)
                continue
            loc = obj.location
            if not loc.valid():
                yield Bad(where, "no valid location")
                continue
            yield Mapped(f"osm:node/{obj.id}", classes, kept(tags), point=(loc.lon, loc.lat), where=where)
        else:
            classes = classify(tags, is_way=True)
            if not classes:
                continue
            where = f"way {obj.id}"
            if why:
                yield Bad(where, why)
                continue
            try:
                line = [[n.lon, n.lat] for n in obj.nodes]
            except osmium.InvalidLocationError:
                yield Bad(where, "some of its nodes are not in the extract")
                continue
            if len(line) < 2:
                yield Bad(where, f"{len(line)} node(s): not a line")
                continue
            yield Mapped(f"osm:way/{obj.id}", classes, kept(tags), line=line, where=where)
