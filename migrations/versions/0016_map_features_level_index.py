"""A second map-features index led by the sampling level, holding only levels 4 and above
(a sixteenth of the rows) and covering what a large bbox's sample reads: the level, the
sample key, the position, the license and the stored encoding. A bbox holding much of a
version (a 0.6-degree box of places) is then counted and sampled by reading the few
thousand entries of its top levels in the whole version, one range per query, instead of
seeking the query index once per 0.05-degree tile (169 seeks at 0.6 degrees) and the table
once per sampled row (coordinator/features/store.py, ``sample_box``; bench/features.py).

A PostgreSQL B-tree entry holds at most about 2,700 bytes: a stored encoding longer than
``features.geojson.DOC_MAX_BYTES`` (2,000) is set to NULL first, as a load now leaves it,
and such a row is rendered per request, byte for byte as it was stored.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26
"""
import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

LEAD_LEVEL = 4          # features.store.LEAD_LEVEL: the index's rows are those at this level or above
DOC_MAX_BYTES = 2000    # features.geojson.DOC_MAX_BYTES


def upgrade() -> None:
    nbytes = ("octet_length(doc)" if op.get_bind().dialect.name == "postgresql"
              else "length(CAST(doc AS BLOB))")
    op.execute(f"UPDATE map_features SET doc = NULL WHERE doc IS NOT NULL AND {nbytes} > {DOC_MAX_BYTES}")
    op.create_index("ix_map_features_level", "map_features",
                    ["version_id", "cls", "level", "sample", "lon", "lat", "license", "doc"],
                    sqlite_where=sa.text(f"level >= {LEAD_LEVEL}"),
                    postgresql_where=sa.text(f"level >= {LEAD_LEVEL}"))


def downgrade() -> None:
    op.drop_index("ix_map_features_level", table_name="map_features")
