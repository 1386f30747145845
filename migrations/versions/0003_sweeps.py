"""Sweeps: requests, H3 coverage, jobs, leases, results, nodes and the transition log.

Revision ID: 0003
Revises: 0001
Create Date: 2026-11-22
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0001"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "nodes",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("name", sa.String(120), nullable=False),
        sa.Column("platform", sa.String(200), nullable=False),
        sa.Column("gpu", sa.String(200), nullable=False),
        sa.Column("engine_version", sa.String(60), nullable=False),
        sa.Column("engine_build", sa.String(128), nullable=False),
        sa.Column("enrolled_at", TS, nullable=False),
        sa.Column("last_seen_at", TS, nullable=False),
        sa.Column("revoked_at", TS, nullable=True),
        sa.Column("revoked_reason", sa.Text(), nullable=True),
        sa.Column("streak", sa.Integer(), nullable=False),
        sa.Column("valid_total", sa.Integer(), nullable=False),
        sa.Column("invalid_total", sa.Integer(), nullable=False),
        sa.Column("trusted", sa.Boolean(), nullable=False),
    )
    op.create_table(
        "sweep_requests",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("lat", sa.Float(), nullable=False),
        sa.Column("lon", sa.Float(), nullable=False),
        sa.Column("radius_m", sa.Float(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("requested_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("requester_hash", sa.String(64), nullable=True),
        sa.Column("asked", sa.Integer(), nullable=False),
        sa.Column("photos", sa.Integer(), nullable=False),
        sa.Column("jobs_total", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
    )
    op.create_index("ix_sweep_requests_state", "sweep_requests", ["state"])
    op.create_index("ix_sweep_requests_requested_at", "sweep_requests", ["requested_at"])
    op.create_table(
        "sweep_request_cells",
        sa.Column("request_id", sa.String(40), sa.ForeignKey("sweep_requests.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("cell", sa.BigInteger(), primary_key=True),
        sa.Column("sweepable", sa.Boolean(), nullable=False),
    )
    op.create_index("ix_sweep_request_cells_cell", "sweep_request_cells", ["cell"])
    op.create_table(
        "coverage_cells",
        sa.Column("cell", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("state", sa.String(12), nullable=False),
        sa.Column("request_id", sa.String(40), nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("covered_at", TS, nullable=True),
    )
    op.create_index("ix_coverage_cells_state", "coverage_cells", ["state"])
    op.create_table(
        "sweep_jobs",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("sweep_id", sa.String(40), sa.ForeignKey("sweep_requests.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("area", sa.JSON(), nullable=False),
        sa.Column("center_lat", sa.Float(), nullable=False),
        sa.Column("center_lon", sa.Float(), nullable=False),
        sa.Column("radius_m", sa.Float(), nullable=False),
        sa.Column("cells", sa.JSON(), nullable=False),
        sa.Column("photos", sa.JSON(), nullable=False),
        sa.Column("quorum", sa.Integer(), nullable=False),
        sa.Column("active_leases", sa.Integer(), nullable=False),
        sa.Column("valid_results", sa.Integer(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("canonical_lease_id", sa.String(40), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_index("ix_sweep_jobs_sweep_id", "sweep_jobs", ["sweep_id"])
    op.create_index("ix_sweep_jobs_state_id", "sweep_jobs", ["state", "id"])
    op.create_table(
        "sweep_leases",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("job_id", BigId, sa.ForeignKey("sweep_jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("node_id", sa.String(40), sa.ForeignKey("nodes.id", ondelete="CASCADE"), nullable=False),
        sa.Column("state", sa.String(12), nullable=False),
        sa.Column("leased_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.Column("heartbeat_at", TS, nullable=False),
        sa.Column("ended_at", TS, nullable=True),
    )
    op.create_index("ix_sweep_leases_job_id", "sweep_leases", ["job_id"])
    op.create_index("ix_sweep_leases_node_id", "sweep_leases", ["node_id"])
    op.create_index("ix_sweep_leases_state_expires", "sweep_leases", ["state", "expires_at"])
    op.create_table(
        "sweep_results",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("lease_id", sa.String(40), sa.ForeignKey("sweep_leases.id", ondelete="CASCADE"),
                  nullable=False, unique=True),
        sa.Column("job_id", BigId, sa.ForeignKey("sweep_jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("node_id", sa.String(40), nullable=False),
        sa.Column("state", sa.String(12), nullable=False),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.Column("body", sa.JSON(), nullable=True),
        sa.Column("body_sha256", sa.String(64), nullable=False),
        sa.Column("engine_build", sa.String(128), nullable=True),
        sa.Column("facts", sa.Integer(), nullable=False),
        sa.Column("received_at", TS, nullable=False),
    )
    op.create_index("ix_sweep_results_job_id", "sweep_results", ["job_id"])
    op.create_index("ix_sweep_results_node_id", "sweep_results", ["node_id"])
    op.create_table(
        "sweep_transitions",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("subject", sa.String(8), nullable=False),
        sa.Column("subject_id", sa.String(40), nullable=False),
        sa.Column("from_state", sa.String(16), nullable=True),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(80), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("at", TS, nullable=False),
    )
    op.create_index("ix_sweep_transitions_subject", "sweep_transitions", ["subject", "subject_id", "id"])


def downgrade() -> None:
    for table in ("sweep_transitions", "sweep_results", "sweep_leases", "sweep_jobs", "coverage_cells",
                  "sweep_request_cells", "sweep_requests", "nodes"):
        op.drop_table(table)
