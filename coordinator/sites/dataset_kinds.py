"""The ``population`` dataset kind: a gridded population count (Esri ASCII grid, as WorldPop
and GHSL publish it), loaded by ``sis ingest population FILE.asc`` and kept as a
memory-mapped array in the version's folder of the data directory (``population.py``).
The version's records are the cells with a value, its extent the grid's edges."""
from __future__ import annotations

import json
import shutil

from coordinator.datasets.kinds import dataset_kind

from .population import GRID_FILE, KIND, LICENSE, MANIFEST_FILE, write_npy


@dataset_kind(KIND, description="gridded population counts per cell (Esri ASCII grid: WorldPop, GHS-POP)",
              license=LICENSE, suffixes=(".asc",))
async def load(load) -> None:  # noqa: ANN001
    folder = load.folder()
    try:
        with load.open(text=True) as lines:
            head, valued, missing = write_npy(lines, folder / GRID_FILE)
        (folder / MANIFEST_FILE).write_text(json.dumps({"file": load.path.name, "header": head.as_json(),
                                                        "cellsWithValue": valued, "cellsWithoutValue": missing}))
        load.accepted(valued, bbox=(head.west, head.south, head.east, head.north))
        load.declare_extent((head.west, head.south, head.east, head.north))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
