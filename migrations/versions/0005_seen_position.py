"""Seen layer: index facts and measurements by (cell, lat, lon), covering the circle read.

A circle read picks the rows of its H3 cells inside a lat/lon box and orders them by
distance. With an index on ``cell`` alone every candidate row is fetched from the
table to read its position (some 4,500 scattered rows for a 1500 m circle over dense
ground); with the position in the index the pick and the order are done in the index
and only the rows served are fetched. On PostgreSQL the index also carries ``id``
(INCLUDE), so the pick is an index-only scan. The composite index serves lookups by
cell alone too, so the single-column index goes.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

TABLES = (("seen_facts", "ix_seen_facts_cell", "ix_seen_facts_cell_position"),
          ("seen_measurements", "ix_seen_measurements_cell", "ix_seen_measurements_cell_position"))


def upgrade() -> None:
    for table, old, new in TABLES:
        op.create_index(new, table, ["cell", "lat", "lon"], postgresql_include=["id"])
        op.drop_index(old, table_name=table)


def downgrade() -> None:
    for table, old, new in TABLES:
        op.create_index(old, table, ["cell"])
        op.drop_index(new, table_name=table)
