"""A seen fact's and a measurement's license as text of any length.

A fact derived from photos under several licenses names all of them, joined by
`` AND `` (``seen.publish``), so that share-alike and permissive records stay
separable. The columns held 60 characters and the names were cut to fit: five
licenses lost the last one and cut the one before mid-word. A photo's license, as
its provider writes it, is not bounded either.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27
"""
import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

TABLES = ("seen_facts", "seen_measurements")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.alter_column("license", type_=sa.Text(), existing_type=sa.String(60), existing_nullable=False)


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.alter_column("license", type_=sa.String(60), existing_type=sa.Text(), existing_nullable=False)
