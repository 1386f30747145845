"""Seen layer: the live facts of each H3 cell packed into one row, as circle reads use them.

A dense 1500 m circle read its facts from ``seen_facts`` one index entry and one row at
a time (some 2,000 entries walked and 1,000 rows fetched), nine tenths of the answer's
time on SQLite. ``seen_tiles`` holds, per cell, the ids, positions and served docs of
its facts as arrays (``coordinator.seen.tiles``), so the same circle reads some 170
rows. ``seen_facts`` stays the record; the tiles are made from it here, and appended to
by every approval.

The tiles of facts already live are made here from ``seen_facts``, 2,000 cells a
batch (``tiles.rebuild``). On the 2-core development machine a million facts took
about 15 s on SQLite.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""
import logging

import sqlalchemy as sa
from alembic import op

from coordinator.seen import tiles

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

log = logging.getLogger("alembic.runtime.migration")


def upgrade() -> None:
    op.create_table(
        "seen_tiles",
        sa.Column("cell", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
                  autoincrement=False),
        sa.Column("facts", sa.Integer(), nullable=False),
        sa.Column("ids", sa.LargeBinary(), nullable=False),
        sa.Column("lats", sa.LargeBinary(), nullable=False),
        sa.Column("lons", sa.LargeBinary(), nullable=False),
        sa.Column("lens", sa.LargeBinary(), nullable=False),
        sa.Column("docs", sa.LargeBinary(), nullable=False),
    )
    done = tiles.rebuild(op.get_bind())
    if done:
        log.info("seen_tiles: %d live facts packed", done)


def downgrade() -> None:
    op.drop_table("seen_tiles")
