"""A third map-features index, holding the rows of the infrastructure tool's point classes
(communication towers, power poles and towers, substations) at every sampling level,
covering what a bbox sample reads: the level, the sample key, the position, the license
and the stored encoding. Migration 0016's level index holds levels 4 and above only; the
infrastructure classes are sparse (some 5,900 rows in bench/features.py's million
features), so a box holding much of them samples at level 1 or 2, below it, and read its
rows from the query index with a table lookup each (about 4 ms of the 2-degree ceiling's
10 on SQLite). Here they are one range per class, as places' top levels are in the level
index, for a few MB per million such rows (coordinator/features/store.py, ``_box_clause``).

The condition is written as ``models.INFRA_POINTS_SQL`` writes it into a query:
both databases use a partial index only where the query's own terms imply its condition.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26
"""
import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

# models.INFRA_POINTS_SQL, frozen here as of this revision
INFRA_POINTS_SQL = "cls IN ('comm_tower', 'power_pole', 'power_tower', 'substation')"


def upgrade() -> None:
    op.create_index("ix_map_features_infra", "map_features",
                    ["version_id", "cls", "level", "sample", "lon", "lat", "license", "doc"],
                    sqlite_where=sa.text(INFRA_POINTS_SQL), postgresql_where=sa.text(INFRA_POINTS_SQL))


def downgrade() -> None:
    op.drop_index("ix_map_features_infra", table_name="map_features")
