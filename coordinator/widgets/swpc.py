"""NOAA Space Weather Prediction Center JSON products (UPSTREAMS.md §11), public domain.

``/products/<product>.json`` is a table in one of two shapes, both read: the legacy one, an
array whose first row names the columns and whose values are text
(``[["time_tag","Kp","a_running","station_count"],["2025-08-27 00:00:00.000","1.33","5","8"]]``),
and the current one, a list of objects with numbers (``[{"time_tag": "2026-05-27T21:00:00",
"Kp": 3.33, ...}]``). Text that is not a number stays text; an empty or null cell is null
(unknown). Rows come oldest first; the widget serves the newest ``limit``. Only the planetary
K index's path and formats are recorded in UPSTREAMS.md; the other products' paths are the
maintainers' and their widgets say so (``confirmed: false``).

Recorded samples (``samples/swpc/products/...``) are constructed for this project in those
formats, not recordings.
"""
from __future__ import annotations

import re
from typing import Any

from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register

from .build import LICENSES


@register
class Swpc(Source[dict]):
    name = "swpc"
    label = "NOAA SWPC"
    license = LICENSES["swpc"]
    default_base_url = "https://services.swpc.noaa.gov"
    description = "NOAA SWPC JSON products (tables)"
    cache_ttl_s = 300.0

    async def fetch(self, query: Query) -> list[dict]:
        (product,) = query.ids
        doc = await self.get_json(f"/products/{product}.json")
        rows = parse_table(doc)
        limit = int(query.params.get("limit") or 24)
        return [{**r, "license": self.license} for r in rows[-limit:][::-1]]


def _cell(v: Any) -> Any:
    if v is None or v == "":
        return None
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def _utc(tag: Any) -> Any:
    """SWPC's time_tag in one form, ISO 8601 UTC with Z: the legacy tables write
    "2025-08-27 00:00:00.000", the current ones "2026-05-27T21:00:00", neither with a zone
    (both are UTC); anything else is passed on as it is."""
    if not isinstance(tag, str):
        return tag
    m = re.fullmatch(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:\.\d+)?Z?", tag.strip())
    return f"{m.group(1)}T{m.group(2)}Z" if m else tag


def parse_table(doc: Any) -> list[dict]:
    if not isinstance(doc, list):
        raise SourceError("not an SWPC table")
    if not doc:
        return []
    if isinstance(doc[0], list):
        head = [str(h) for h in doc[0]]
        if "time_tag" not in head:
            raise SourceError("the table's first row names no time_tag column")
        return [{k: (_utc(v) if k == "time_tag" else _cell(v)) for k, v in zip(head, row)} for row in doc[1:]]
    if all(isinstance(r, dict) and "time_tag" in r for r in doc):
        return [{k: (_utc(v) if k == "time_tag" else _cell(v)) for k, v in r.items()} for r in doc]
    raise SourceError("rows are neither arrays under a header row nor objects with time_tag")
