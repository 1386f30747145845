"""The twin's reference layers (airports, countries, cities, rivers, seaports), loaded by
``sis ingest ourairports|ne_countries|ne_places|ne_rivers|wpi`` (coordinator/twin/reference.py):
one row per record, tagged with its dataset version, read highest rank first.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26
"""
import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "twin_reference",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("version_id", BigId, sa.ForeignKey("dataset_versions.id"), nullable=False),
        sa.Column("layer", sa.String(16), nullable=False),
        sa.Column("fid", sa.String(80), nullable=False),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("lon", sa.Float(), nullable=False),
        sa.Column("lat", sa.Float(), nullable=False),
        sa.Column("rank", sa.Float(), nullable=False),
        sa.Column("props", sa.JSON(), nullable=False),
        sa.Column("geom", sa.JSON(), nullable=True),
    )
    op.create_index("ix_twin_reference_version_rank", "twin_reference", ["version_id", "rank"])


def downgrade() -> None:
    op.drop_index("ix_twin_reference_version_rank", table_name="twin_reference")
    op.drop_table("twin_reference")
