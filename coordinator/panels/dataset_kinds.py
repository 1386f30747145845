"""The dataset kinds panels answer from (docs/datasets.md: a capability declares its kinds in a
module of this name). ``pb2002``: PB2002_steps.dat, the plate model's boundary steps, read by
``coordinator.panels.plates``."""
from __future__ import annotations

import sqlalchemy as sa

from coordinator.datasets.kinds import dataset_kind
from coordinator.datasets.rows import delete_version_rows
from coordinator.datasets.values import not_utf8
from coordinator.panels.plates import KIND, LICENSE, PLATE_STEPS, parse_step

BATCH = 1000


async def discard(db, version_id: int) -> None:  # noqa: ANN001
    """Delete the steps of a dropped version or a failed load, in batches (``datasets.rows``)."""
    await delete_version_rows(db, PLATE_STEPS, version_id)


@dataset_kind(KIND, description="PB2002 plate boundary steps (Bird 2003), PB2002_steps.dat", license=LICENSE,
              suffixes=(".dat",), discard=discard)
async def load(load) -> None:  # noqa: ANN001
    batch: list[dict] = []

    async def flush() -> None:
        if batch:
            async with load.db.write_core() as conn:
                await conn.execute(sa.insert(PLATE_STEPS), batch)
            batch.clear()

    with load.open(text=True) as lines:
        for n, line in enumerate(lines, 1):
            why = not_utf8(line)
            if why:
                load.bad(f"line {n}", why)
                continue
            try:
                step = parse_step(line)
            except ValueError as exc:
                load.bad(f"line {n}", str(exc))
                continue
            if step is None:
                continue
            batch.append({"version_id": load.version_id, "seq": step.seq, "boundary": step.boundary,
                          "lon1": step.lon1, "lat1": step.lat1, "lon2": step.lon2, "lat2": step.lat2,
                          "length_km": step.length_km, "velocity_mm_a": step.velocity_mm_a,
                          "step_class": step.step_class, "orogen": step.orogen})
            load.accepted(bbox=(min(step.lon1, step.lon2), min(step.lat1, step.lat2),
                                max(step.lon1, step.lon2), max(step.lat1, step.lat2)))
            if len(batch) >= BATCH:
                await flush()
    await flush()
