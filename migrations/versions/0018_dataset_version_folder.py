"""Each dataset version names its own folder in the data directory (``folder``, relative to
``SIS_DATA_DIR``), made unique when its load starts (``KIND/ID-TOKEN``).

A kind that keeps files (a population or bathymetry grid) kept them in ``KIND/ID``, and ids
are a database's own: a database made afresh (``var/sis.db`` removed, a new PostgreSQL
database) beside the data directory of the one before numbered its versions from 1 again,
and its loads failed on the folders the old versions had left (``File exists``), or, had the
folder been removed, would have taken another database's files for their own. Versions
loaded before this revision have no folder named and keep ``KIND/ID``.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26
"""
import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("dataset_versions", sa.Column("folder", sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("dataset_versions") as t:
        t.drop_column("folder")
