"""The widget catalogue: loaded once, checked, and turned into typed records.

A widget's parameters are declared in its record in the registry's own terms (``Param``), so
a widget's bad parameter is refused with the same rules and messages as any tool's. The
load refuses a catalogue that breaks the contract (the category counts of SPEC.md, Widget),
names an adapter that does not exist, repeats an id, or declares a parameter that other
widgets type differently (one ``widget`` tool publishes the union of them all).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

from coordinator.core.errors import ServiceError
from coordinator.core.registry import BOOLEAN, INTEGER, NUMBER, STRING, Param

CATALOGUE_PATH = Path(__file__).parent / "data" / "catalogue.json"

# SPEC.md, Widget: the category counts of the contract, in its order.
CATEGORY_COUNTS: dict[str, int] = {
    "Macro": 961, "Global": 658, "Crypto": 17, "Equities": 8, "Globe": 7, "Positioning": 2, "Climate": 5,
    "Social": 5, "Space": 5, "Signals": 4, "Perception": 2, "Weather": 2, "Geospatial": 1, "News": 1, "Earth": 1}
ID_PATTERN = r"[a-z0-9][a-z0-9._-]{0,79}"
_KINDS = {"number": NUMBER, "integer": INTEGER, "string": STRING, "boolean": BOOLEAN}
_REQUIRED_FIELDS = ("id", "title", "category", "source", "upstreamIds", "params", "units", "license", "cadence",
                    "confirmed", "listedBy")


class CatalogueError(ValueError):
    """The catalogue is not one the service can serve; start-up stops with this line."""


@dataclass(frozen=True)
class Widget:
    id: str
    title: str
    category: str
    source: str                       # the adapter's name in the source registry: the provenance
    upstream_ids: Mapping[str, str]   # the upstream's own ids (seriesId, indicator, coin, product, ...)
    params: tuple[Param, ...]
    units: str
    license: str
    cadence: str
    confirmed: bool                   # its ids were found in an upstream's own listing
    listed_by: str                    # key of the list it came from (Catalogue.lists)
    record: Mapping[str, Any]         # as published in widgets.json

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


@dataclass(frozen=True)
class Catalogue:
    widgets: dict[str, Widget]
    lists: Mapping[str, Any]          # how each list was obtained
    meta: Mapping[str, Any]

    def counts(self) -> dict[str, int]:
        out = {c: 0 for c in CATEGORY_COUNTS}
        for w in self.widgets.values():
            out[w.category] = out.get(w.category, 0) + 1
        return out


def param_from_record(rec: Mapping[str, Any]) -> Param:
    kind = _KINDS.get(rec.get("type", ""))
    if kind is None:
        raise CatalogueError(f"parameter {rec.get('name')!r} has an unknown type {rec.get('type')!r}")
    return Param(rec["name"], kind, rec.get("description", ""), required=bool(rec.get("required")),
                 default=rec.get("default"), minimum=rec.get("minimum"), maximum=rec.get("maximum"),
                 enum=tuple(rec["enum"]) if rec.get("enum") else None, pattern=rec.get("pattern"),
                 max_length=rec.get("maxLength"))


def parse(doc: Mapping[str, Any], sources: Iterable[str] | None = None, *,
          counts: Mapping[str, int] | None = CATEGORY_COUNTS) -> Catalogue:
    """Typed records of a catalogue document, or CatalogueError naming the first problem.
    ``sources``: the adapter names that exist (None: not checked)."""
    import re

    known = set(sources) if sources is not None else None
    lists = doc.get("lists") or {}
    widgets: dict[str, Widget] = {}
    kinds: dict[str, str] = {}
    for rec in doc.get("widgets") or []:
        missing = [f for f in _REQUIRED_FIELDS if f not in rec]
        if missing:
            raise CatalogueError(f"widget {rec.get('id')!r} lacks {', '.join(missing)}")
        wid = rec["id"]
        if not re.fullmatch(ID_PATTERN, wid):
            raise CatalogueError(f"widget id {wid!r} does not match {ID_PATTERN}")
        if wid in widgets:
            raise CatalogueError(f"widget id {wid!r} appears twice")
        if rec["category"] not in CATEGORY_COUNTS:
            raise CatalogueError(f"widget {wid!r}: category {rec['category']!r} is not one of the contract's")
        if known is not None and rec["source"] not in known:
            raise CatalogueError(f"widget {wid!r}: source {rec['source']!r} is not a registered adapter")
        if rec["listedBy"] not in lists:
            raise CatalogueError(f"widget {wid!r}: list {rec['listedBy']!r} is not described under 'lists'")
        params = tuple(param_from_record(p) for p in rec["params"])
        for p in params:
            if kinds.setdefault(p.name, p.kind) != p.kind:
                raise CatalogueError(f"parameter {p.name!r} is {p.kind} in {wid!r} but {kinds[p.name]} elsewhere")
            if p.default is not None:     # a default outside its own bounds is the catalogue's mistake
                try:
                    p.parse(p.default)
                except ServiceError as exc:
                    raise CatalogueError(f"widget {wid!r}: default of {p.name!r}: {exc.message}") from None
        widgets[wid] = Widget(wid, rec["title"], rec["category"], rec["source"], dict(rec["upstreamIds"]), params,
                              rec["units"], rec["license"], rec["cadence"], bool(rec["confirmed"]), rec["listedBy"],
                              rec)
    cat = Catalogue(widgets, lists, {k: v for k, v in doc.items() if k not in ("widgets", "lists")})
    if counts is not None:
        got = cat.counts()
        wrong = {c: (got.get(c, 0), n) for c, n in counts.items() if got.get(c, 0) != n}
        if wrong:
            raise CatalogueError("category counts differ from the contract: " + ", ".join(
                f"{c} {g} (contract {n})" for c, (g, n) in wrong.items()))
    return cat


@lru_cache(maxsize=1)
def load(path: str = str(CATALOGUE_PATH)) -> Catalogue:
    """The shipped catalogue, read once per process (orjson: about 10 ms for 1679 records)."""
    import orjson

    try:
        doc = orjson.loads(Path(path).read_bytes())
    except (OSError, ValueError) as exc:
        raise CatalogueError(f"cannot read the widget catalogue {path}: {exc}") from None
    return parse(doc)


def dumps(doc: Mapping[str, Any]) -> str:
    """The catalogue as committed: one widget a line, so that a rebuild's diff is readable."""
    head = {k: v for k, v in doc.items() if k != "widgets"}
    lines = [json.dumps(w, ensure_ascii=False, sort_keys=False, separators=(",", ":")) for w in doc["widgets"]]
    body = json.dumps(head, ensure_ascii=False, indent=1)[:-2]
    return body + ',\n "widgets": [\n' + ",\n".join(lines) + "\n ]\n}\n"
