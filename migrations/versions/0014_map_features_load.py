"""A staging table for map-feature loads: ``sis ingest osm|places`` writes a version's rows
here as it reads the extract, then moves them into ``map_features`` a few tiles at a time
in the order the queries read them (cls, tile, level descending, sample), so a sample's rows
lie together on disk instead of one page per row (coordinator/features/store.py).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26
"""
import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "map_features_load",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("version_id", BigId, nullable=False),
        sa.Column("cls", sa.String(20), nullable=False),
        sa.Column("tile", sa.Integer(), nullable=False),
        sa.Column("lon", sa.Float(), nullable=False),
        sa.Column("lat", sa.Float(), nullable=False),
        sa.Column("sample", sa.Integer(), nullable=False),
        sa.Column("level", sa.SmallInteger(), nullable=False),
        sa.Column("fid", sa.String(80), nullable=False),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("license", sa.String(80), nullable=False),
        sa.Column("brand", sa.String(24), nullable=True),
        sa.Column("props", sa.JSON(), nullable=False),
        sa.Column("geom", sa.JSON(), nullable=True),
    )
    op.create_index("ix_map_features_load_move", "map_features_load", ["version_id", "cls", "tile"])


def downgrade() -> None:
    op.drop_index("ix_map_features_load_move", table_name="map_features_load")
    op.drop_table("map_features_load")
