"""Hazard-event history: polls, current event states, derived changes.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "event_polls",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sources_queried", sa.Integer(), nullable=False),
        sa.Column("sources_usable", sa.Integer(), nullable=False),
        sa.Column("events_seen", sa.Integer(), nullable=False),
        sa.Column("health", sa.JSON(), nullable=False),
    )
    op.create_index("ix_event_polls_started_at", "event_polls", ["started_at"])
    op.create_table(
        "hazard_events",
        sa.Column("id", sa.String(80), primary_key=True),
        sa.Column("source", sa.String(20), nullable=False),
        sa.Column("event_type", sa.String(8), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("alert_level", sa.String(10), nullable=True),
        sa.Column("episode", sa.String(40), nullable=True),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
    )
    op.create_index("ix_hazard_events_source", "hazard_events", ["source"])
    op.create_index("ix_hazard_events_active", "hazard_events", ["active"])
    op.create_table(
        "event_changes",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("event_id", sa.String(80), nullable=False),
        sa.Column("kind", sa.String(12), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("poll_id", BigId, sa.ForeignKey("event_polls.id", ondelete="SET NULL"), nullable=True),
        sa.Column("from_level", sa.String(10), nullable=True),
        sa.Column("to_level", sa.String(10), nullable=True),
        sa.Column("from_episode", sa.String(40), nullable=True),
        sa.Column("to_episode", sa.String(40), nullable=True),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("event_type", sa.String(8), nullable=False),
    )
    op.create_index("ix_event_changes_event_id", "event_changes", ["event_id"])
    op.create_index("ix_event_changes_at_id", "event_changes", ["at", "id"])


def downgrade() -> None:
    op.drop_table("event_changes")
    op.drop_table("hazard_events")
    op.drop_table("event_polls")
