"""The twin's reference dataset kinds (docs/datasets.md: a capability declares its kinds in a
module of this name): ``ourairports``, ``ne_countries``, ``ne_places``, ``ne_rivers`` and
``wpi``, read by ``coordinator.twin.reference`` into ``twin_reference``."""
from __future__ import annotations

import csv
import json
from typing import Any, Callable

import sqlalchemy as sa

from coordinator.datasets.kinds import dataset_kind
from coordinator.datasets.rows import delete_version_rows
from coordinator.datasets.values import column_limits, not_utf8, too_long

from .reference import LICENSE, TABLE, airport, city, country, river, seaport

BATCH = 1000
LIMITS = column_limits(TABLE)


async def discard(db, version_id: int) -> None:  # noqa: ANN001
    """Delete the records of a dropped version or a failed load, in batches (``datasets.rows``)."""
    await delete_version_rows(db, TABLE, version_id)


class _Writer:
    def __init__(self, load, layer: str) -> None:  # noqa: ANN001
        self.load, self.layer, self.batch = load, layer, []

    async def add(self, where: str, parse: Callable[[Any], dict[str, Any]], raw: Any) -> None:
        why = not_utf8(raw)
        if why:
            self.load.bad(where, why)
            return
        try:
            rec = parse(raw)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError) as exc:
            # one malformed record (a feature that is a number, nesting past the stack) is a
            # bad record, counted, never the end of the whole load
            self.load.bad(where, str(exc) or type(exc).__name__)
            return
        why = too_long(rec, LIMITS)     # longer than its column: PostgreSQL refused the batch, and the load
        if why:
            self.load.bad(where, why)
            return
        self.batch.append({**rec, "version_id": self.load.version_id, "layer": self.layer})
        self.load.accepted(lon=rec["lon"], lat=rec["lat"])
        if len(self.batch) >= BATCH:
            await self.flush()

    async def flush(self) -> None:
        if self.batch:
            async with self.load.db.write_core() as conn:
                await conn.execute(sa.insert(TABLE), self.batch)
            self.batch = []


async def _csv(load, layer: str, parse: Callable[[dict[str, str]], dict[str, Any]]) -> None:  # noqa: ANN001
    out = _Writer(load, layer)
    with load.open(text=True) as f:
        reader = csv.DictReader(f)
        fields = [(h or "").lstrip("\ufeff").strip() for h in reader.fieldnames or ()]
        reader.fieldnames = fields
        for n, r in enumerate(reader, 2):
            await out.add(f"line {n}", parse, r)
    await out.flush()


async def _geojson(load, layer: str, parse: Callable[[dict[str, Any]], dict[str, Any]]) -> None:  # noqa: ANN001
    """A GeoJSON FeatureCollection (Natural Earth's files are one document each)."""
    with load.open(text=True) as f:
        try:
            doc = json.load(f)
        except ValueError as exc:
            raise ValueError(f"not a GeoJSON document: {exc}") from None
    if not isinstance(doc, dict) or doc.get("type") != "FeatureCollection":
        raise ValueError("not a GeoJSON FeatureCollection")
    out = _Writer(load, layer)
    for n, feat in enumerate(doc.get("features") or [], 1):
        await out.add(f"feature {n}", parse, feat)
    await out.flush()


GEOJSON = (".geojson", ".json")


@dataset_kind("ourairports", description="OurAirports airports.csv (the twin's airports layer)", license=LICENSE,
              suffixes=(".csv",), discard=discard)
async def load_airports(load) -> None:  # noqa: ANN001
    await _csv(load, "airports", airport)


@dataset_kind("wpi", description="World Port Index (NGA Pub 150) CSV (the twin's seaports layer)", license=LICENSE,
              suffixes=(".csv",), discard=discard)
async def load_seaports(load) -> None:  # noqa: ANN001
    await _csv(load, "seaports", seaport)


@dataset_kind("ne_countries", description="Natural Earth admin-0 countries GeoJSON (the twin's countries layer)",
              license=LICENSE, suffixes=GEOJSON, discard=discard)
async def load_countries(load) -> None:  # noqa: ANN001
    await _geojson(load, "countries", country)


@dataset_kind("ne_places", description="Natural Earth populated places GeoJSON (the twin's cities layer)",
              license=LICENSE, suffixes=GEOJSON, discard=discard)
async def load_places(load) -> None:  # noqa: ANN001
    await _geojson(load, "cities", city)


@dataset_kind("ne_rivers", description="Natural Earth rivers and lake centerlines GeoJSON (the twin's rivers layer)",
              license=LICENSE, suffixes=GEOJSON, discard=discard)
async def load_rivers(load) -> None:  # noqa: ANN001
    await _geojson(load, "rivers", river)
