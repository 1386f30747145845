"""Demo mode's population grid: a synthetic town's head counts around the demo centre, in
an Esri ASCII grid (the format ``sis ingest population`` reads), loaded once into the
demo's own database and data folder so ``/earth/site-intel`` and the briefs have the
population figure to show offline. Its source says it is synthetic; the counts are a smooth
made-up density, not any census."""
from __future__ import annotations

import math
import tempfile
from pathlib import Path

from coordinator.core.db import Database
from coordinator.datasets import ingest, versions
from .population import write_asc

KIND = "population"
SOURCE = f"{versions.DEMO_PREFIX}synthetic town population (not a census)"
CELL = 0.001            # ~110 m
HALF = 0.03             # the grid covers the demo centre +- 0.03 degrees


def write_grid(path: Path, centre: tuple[float, float]) -> None:
    """The synthetic grid around ``centre`` as an Esri ASCII file: some 425 people a cell at
    the town's centre fading to 25, made up."""
    lat0, lon0 = centre
    n = int(round(2 * HALF / CELL))
    rows = []
    for i in range(n):                          # north first
        lat = lat0 + HALF - (i + 0.5) * CELL
        row = []
        for j in range(n):
            lon = lon0 - HALF + (j + 0.5) * CELL
            d2 = ((lat - lat0) ** 2 + (lon - lon0) ** 2) / (0.01 ** 2)
            row.append(round(25 + 400 * math.exp(-d2 / 2), 1))    # people per cell: a town centre fading out
        rows.append(row)
    write_asc(path, lon0 - HALF, lat0 - HALF, CELL, rows)


async def load_demo_population(db: Database, centre: tuple[float, float], data_dir: str | Path) -> None:
    """Load the synthetic grid unless this database has a population version."""
    if await versions.newest_ready(db, KIND):
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "demo-population.asc"
        write_grid(path, centre)
        await ingest.run(db, KIND, path, source=SOURCE, data_dir=data_dir)
