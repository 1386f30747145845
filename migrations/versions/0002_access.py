"""Access: API keys (stored hashed), embed tokens, persisted usage counters.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "access_keys",
        sa.Column("id", sa.String(24), primary_key=True),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("plan", sa.String(12), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "embed_tokens",
        sa.Column("id", sa.String(24), primary_key=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("key_id", sa.String(24), sa.ForeignKey("access_keys.id", ondelete="CASCADE"), nullable=False),
        sa.Column("chain_id", sa.String(24), nullable=False),
        sa.Column("origin", sa.Text(), nullable=False),
        sa.Column("budget", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_embed_tokens_key_id", "embed_tokens", ["key_id"])
    op.create_index("ix_embed_tokens_chain_id", "embed_tokens", ["chain_id"])
    op.create_table(
        "access_usage",
        sa.Column("subject", sa.String(120), primary_key=True),
        sa.Column("period", sa.String(16), primary_key=True),
        sa.Column("count", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("access_usage")
    op.drop_table("embed_tokens")
    op.drop_table("access_keys")
