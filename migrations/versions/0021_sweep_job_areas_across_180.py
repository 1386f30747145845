"""Jobs over a cell straddling the antimeridian, made before their areas were drawn across it.

Until 2026-11-29 a job's area was the convex hull of its cells' hexagons as H3 gives them:
a hexagon straddling 180 has corners at 179.9998 and -179.9997, and their hull spanned the
whole latitude band (a centre near longitude 0, a radius of some 21,000 km). Such a job
accepted facts anywhere in that band, and nodes of this build refuse it (an area longitude
more than 180 degrees from its centre), so it failed lease after lease until parked.

Here every job whose area spans more than 180 degrees of longitude, which no job drawn from
cells of some 76 m can, is drawn again from its cells as ``sweeps.jobs`` draws one now:
area, centre and radius. Nothing else of the job changes (its photos, state, leases and
results stay). A job already parked for its failures stays parked; an operator requeues it
(``sis jobs requeue``) to have it swept on its new area.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-02
"""
import logging

import sqlalchemy as sa
from alembic import op

from coordinator.sweeps import jobs

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

log = logging.getLogger("sis.migrations")   # what sis migrate and sis serve show the operator

sweep_jobs = sa.table("sweep_jobs", sa.column("id", sa.BigInteger), sa.column("state", sa.String),
                      sa.column("area", sa.JSON),
                      sa.column("cells", sa.JSON), sa.column("center_lat", sa.Float),
                      sa.column("center_lon", sa.Float), sa.column("radius_m", sa.Float))


def _span(area: dict) -> float:
    lons = [x for ring in area["coordinates"] for x, _ in ring]
    return max(lons) - min(lons)


def upgrade() -> None:
    bind = op.get_bind()
    # Read in parts and written after: only the few jobs to redraw are held, and no row is
    # written under an open cursor over its own table (SQLite leaves that undefined).
    redraw = []
    scan = bind.execute(sa.select(sweep_jobs.c.id, sweep_jobs.c.area, sweep_jobs.c.cells),
                        execution_options={"yield_per": 5_000})   # this statement's, not the connection's
    for job_id, area, cells in scan:
        if area and cells and _span(area) > 180:
            redraw.append((job_id, jobs._plan([int(c, 16) for c in cells], [])))
    for job_id, plan in redraw:
        bind.execute(sa.update(sweep_jobs).where(sweep_jobs.c.id == job_id).values(
            area=plan.area, center_lat=plan.center_lat, center_lon=plan.center_lon, radius_m=plan.radius_m))
    if redraw:
        log.info("sweep_jobs: %d areas across the antimeridian drawn again from their cells", len(redraw))
        parked = sorted(bind.execute(sa.select(sweep_jobs.c.id).where(
            sweep_jobs.c.id.in_([job_id for job_id, _ in redraw]), sweep_jobs.c.state == "failed")).scalars())
        if parked:
            ids = ", ".join(f"job-{i}" for i in parked)
            log.info("sweep_jobs: %d of them parked for their failures stay parked (%s): `sis jobs requeue ID` "
                     "sweeps one on its new area", len(parked), ids)


def downgrade() -> None:
    """Nothing to put back: the areas this drew again were wrong, and the schema is unchanged."""
