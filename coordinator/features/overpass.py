"""Overpass API: the live answer where no loaded extract covers a request
(UPSTREAMS.md §2.4). One QL query per request, for the classes the tool serves, with
``out geom`` so ways come with their coordinates.

Overpass reports a timeout or memory exhaustion inside an HTTP 200, as a ``remark``
beside empty or PARTIAL ``elements``. Such an answer is served for what it holds but
reported unusable in ``health`` (so it is degraded and never cached), with the remark.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

from coordinator.core.honesty import SourceReport
from coordinator.sources.base import Query, Source, SourceError, SourceRead, fetch
from coordinator.sources.registry import register
from . import store
from .classes import classify, kept
from .widths import ROAD_CLASSES

# QL selectors per class: (element, filter). Kept beside ``classes.classify``, which
# decides again on the tags that come back, so a selector too wide cannot leak.
SELECTORS: dict[str, tuple[str, ...]] = {
    "comm_tower": ('node["man_made"~"^(tower|mast)$"]["tower:type"="communication"]',),
    "power_tower": ('node["power"="tower"]',),
    "power_pole": ('node["power"="pole"]',),
    "power_line": ('way["power"="line"]',),
    "power_minor_line": ('way["power"="minor_line"]',),
    "substation": ('node["power"="substation"]', 'way["power"="substation"]'),
    "tree": ('node["natural"="tree"]',),
    "tree_row": ('way["natural"="tree_row"]',),
    "gate": ('node["barrier"="gate"]', 'way["barrier"="gate"]'),
    "road": ('way["highway"~"^(' + "|".join(sorted(ROAD_CLASSES)) + ')$"]',),
}


def query_text(classes: Sequence[str], box: tuple[float, float, float, float], timeout_s: int) -> str:
    w, s, e, n = box
    area = f"({s:.6f},{w:.6f},{n:.6f},{e:.6f})"
    parts = sorted({sel for c in classes for sel in SELECTORS.get(c, ())})
    return f"[out:json][timeout:{timeout_s}];(" + "".join(f"{p}{area};" for p in parts) + ");out geom;"


def rows_of(elements: list[dict[str, Any]], classes: Sequence[str], license: str) -> list[dict]:
    """Overpass elements as feature rows (as the store holds them), of the asked classes."""
    wanted = set(classes)
    rows: list[dict] = []
    for el in elements:
        tags = el.get("tags") or {}
        kind = el.get("type")
        if kind == "node" and "lat" in el and "lon" in el:
            cls = [c for c in classify(tags, is_way=False) if c in wanted]
            rows += store.rows_for(0, f"osm:node/{el['id']}", cls, license=license, point=(el["lon"], el["lat"]),
                                   name=tags.get("name"), props=kept(tags))
        elif kind == "way" and el.get("geometry"):
            line = [[p["lon"], p["lat"]] for p in el["geometry"] if p is not None]
            cls = [c for c in classify(tags, is_way=True) if c in wanted]
            rows += store.rows_for(0, f"osm:way/{el['id']}", cls, license=license, line=line,
                                   name=tags.get("name"), props=kept(tags))
    return rows


@register
class Overpass(Source[dict]):
    name = "overpass"
    license = "ODbL-1.0"
    default_base_url = "https://overpass-api.de"
    default_timeout_s = 30.0
    max_in_flight = 2       # the public instances give a client (an address) two slots at once; more are refused 429
    description = "the Overpass API over OpenStreetMap (JSON), where no loaded extract covers a request"

    async def fetch(self, query: Query) -> list[dict]:
        return (await self._ask(query))[0]

    async def _ask(self, query: Query) -> tuple[list[dict], str | None]:
        assert query.bbox is not None
        classes = tuple(query.params.get("classes", ()))
        text = query_text(classes, query.bbox, max(1, int(self.timeout_s) - 2))
        code, body = await fetch(self.url("/api/interpreter"), self.timeout_s, form={"data": text}, source=self)
        if code != 200:
            raise SourceError(f"HTTP {code}" + (" (busy: rate limited)" if code in (429, 504) else ""))
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise SourceError("answer is not JSON") from exc
        return rows_of(doc["elements"], classes, self.license), doc.get("remark")

    async def read(self, query: Query | None = None) -> SourceRead[dict]:
        """As every source reads, except that a ``remark`` makes the answer partial: its
        rows are kept and the report says it is unusable, with the remark."""
        try:
            rows, remark = await self._ask(query or Query())
        except SourceError as exc:
            return self._failed(str(exc))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            return self._failed(f"unparseable answer ({type(exc).__name__})", exc=exc, detail=repr(exc))
        self._answered()              # it answered (a remark is Overpass's, said in the report): the log is told
        ok = remark is None
        error = None if ok else f"partial answer (Overpass remark: {remark.strip()[:200]})"
        return SourceRead(rows, SourceReport(self.report_name, self.license, ok=ok, error=error,
                                             records=len(rows), demo=self.demo))
