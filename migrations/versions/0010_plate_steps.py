"""PB2002 plate boundary steps, loaded by ``sis ingest pb2002`` (coordinator/panels/plates.py):
one row per step of ``PB2002_steps.dat``, tagged with its dataset version.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""
import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "plate_steps",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("version_id", BigId, sa.ForeignKey("dataset_versions.id"), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("boundary", sa.String(12), nullable=False),
        sa.Column("lon1", sa.Float(), nullable=False),
        sa.Column("lat1", sa.Float(), nullable=False),
        sa.Column("lon2", sa.Float(), nullable=False),
        sa.Column("lat2", sa.Float(), nullable=False),
        sa.Column("length_km", sa.Float(), nullable=False),
        sa.Column("velocity_mm_a", sa.Float(), nullable=True),
        sa.Column("step_class", sa.String(3), nullable=False),
        sa.Column("orogen", sa.Boolean(), nullable=False),
    )
    op.create_index("ix_plate_steps_version_seq", "plate_steps", ["version_id", "seq"])


def downgrade() -> None:
    op.drop_index("ix_plate_steps_version_seq", table_name="plate_steps")
    op.drop_table("plate_steps")
