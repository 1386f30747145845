"""Rejected ground swept again.

Reissues: ``sweep_reissues`` links a job made again from a rejected one to it, with
the generation (how many times that ground was reissued), and
``sweep_job_exclusions`` names the nodes a job is never offered to.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""
import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "sweep_reissues",
        sa.Column("job_id", BigId, sa.ForeignKey("sweep_jobs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("parent_id", BigId, sa.ForeignKey("sweep_jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_index("ix_sweep_reissues_parent_id", "sweep_reissues", ["parent_id"])
    op.create_table(
        "sweep_job_exclusions",
        sa.Column("job_id", BigId, sa.ForeignKey("sweep_jobs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("node_id", sa.String(40), primary_key=True),
    )


def downgrade() -> None:
    op.drop_table("sweep_job_exclusions")
    op.drop_index("ix_sweep_reissues_parent_id", table_name="sweep_reissues")
    op.drop_table("sweep_reissues")
