"""Review of contributed sweeps and the seen layer: reviewer keys, approved facts and
per-photo measurements, each indexed by its H3 cell.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "reviewers",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("name", sa.String(120), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("scopes", sa.String(200), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("last_used_at", TS, nullable=True),
        sa.Column("revoked_at", TS, nullable=True),
        sa.Column("revoked_reason", sa.Text(), nullable=True),
    )
    op.create_table(
        "seen_facts",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("cell", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("lat", sa.Float(), nullable=False),
        sa.Column("lon", sa.Float(), nullable=False),
        sa.Column("value", sa.JSON(), nullable=True),
        sa.Column("unit", sa.String(16), nullable=False),
        sa.Column("confidence", sa.String(8), nullable=False),
        sa.Column("basis", sa.String(10), nullable=False),
        sa.Column("photos", sa.JSON(), nullable=False),
        sa.Column("provider", sa.String(40), nullable=False),
        sa.Column("license", sa.String(60), nullable=False),
        sa.Column("observed_at", sa.String(40), nullable=False),
        sa.Column("job_id", BigId, nullable=False),
        sa.Column("sweep_id", sa.String(40), nullable=False),
        sa.Column("approved_at", TS, nullable=False),
    )
    op.create_index("ix_seen_facts_cell", "seen_facts", ["cell"])
    op.create_index("ix_seen_facts_job_id", "seen_facts", ["job_id"])
    op.create_table(
        "seen_measurements",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("cell", sa.BigInteger(), nullable=False),
        sa.Column("photo_id", sa.String(200), nullable=False),
        sa.Column("lat", sa.Float(), nullable=False),
        sa.Column("lon", sa.Float(), nullable=False),
        sa.Column("heading", sa.Float(), nullable=True),
        sa.Column("captured_at", sa.String(40), nullable=False),
        sa.Column("provider", sa.String(40), nullable=False),
        sa.Column("license", sa.String(60), nullable=False),
        sa.Column("photo_url", sa.Text(), nullable=False),
        sa.Column("road_width", sa.JSON(), nullable=True),
        sa.Column("calibration", sa.JSON(), nullable=False),
        sa.Column("objects", sa.JSON(), nullable=False),
        sa.Column("job_id", BigId, nullable=False),
        sa.Column("approved_at", TS, nullable=False),
    )
    op.create_index("ix_seen_measurements_cell", "seen_measurements", ["cell"])


def downgrade() -> None:
    for table in ("seen_measurements", "seen_facts", "reviewers"):
        op.drop_table(table)
