"""Map features loaded by ``sis ingest osm`` (OpenStreetMap extracts) and ``sis ingest
places`` (Overture places), one row per point or line chunk, tagged with its dataset
version (coordinator/features/). Indexed for bbox and radius queries on the 0.05-degree
grid key, with ``level`` (a sampling level), ``lon``, ``lat`` and ``sample`` in the index
so counting and sampling a bbox read the index alone, on SQLite and PostgreSQL alike.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25
"""
import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "map_features",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("version_id", BigId, sa.ForeignKey("dataset_versions.id"), nullable=False),
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
    op.create_index("ix_map_features_query", "map_features", ["version_id", "cls", "tile", "level", "lon", "lat", "sample"])
    op.create_index("ix_map_features_brand", "map_features", ["version_id", "brand", "tile"])


def downgrade() -> None:
    op.drop_index("ix_map_features_brand", table_name="map_features")
    op.drop_index("ix_map_features_query", table_name="map_features")
    op.drop_table("map_features")
