"""Each map feature a bbox tool serves as a point carries its GeoJSON Feature encoded at
load time (``doc``), so a bbox answer of 2,000 places joins 2,000 stored strings instead of
decoding 2,000 rows into dicts and encoding them again (coordinator/features/geojson.py,
bench/features.py). NULL for the rest (line chunks, trees and gates: served with a
distance or merged per request) and for rows loaded before this revision, which are
rendered from their columns as before.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26
"""
import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("map_features", sa.Column("doc", sa.Text(), nullable=True))
    op.add_column("map_features_load", sa.Column("doc", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("map_features_load") as batch:
        batch.drop_column("doc")
    with op.batch_alter_table("map_features") as batch:
        batch.drop_column("doc")
