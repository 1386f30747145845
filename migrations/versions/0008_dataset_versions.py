"""Ingested datasets: one row per load of a file by ``sis ingest`` (DESIGN.md §13).

Each load is recorded before it starts (state ``loading``) and marked ``ready`` or
``failed`` when it ends, with the file's sha256, its extent and its record and
bad-record counts; the rows a dataset kind writes carry the version's id.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""
import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "dataset_versions",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(60), nullable=False),
        sa.Column("state", sa.String(8), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("license", sa.String(120), nullable=False),
        sa.Column("file_name", sa.Text(), nullable=False),
        sa.Column("file_bytes", sa.BigInteger(), nullable=True),
        sa.Column("sha256", sa.String(64), nullable=True),
        sa.Column("loaded_at", TS, nullable=False),
        sa.Column("finished_at", TS, nullable=True),
        sa.Column("records", sa.BigInteger(), nullable=False),
        sa.Column("bad_records", sa.BigInteger(), nullable=False),
        sa.Column("bad_samples", sa.JSON(), nullable=False),
        sa.Column("west", sa.Float(), nullable=True),
        sa.Column("south", sa.Float(), nullable=True),
        sa.Column("east", sa.Float(), nullable=True),
        sa.Column("north", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
    )
    op.create_index("ix_dataset_versions_kind_state", "dataset_versions", ["kind", "state", "id"])


def downgrade() -> None:
    op.drop_index("ix_dataset_versions_kind_state", table_name="dataset_versions")
    op.drop_table("dataset_versions")
