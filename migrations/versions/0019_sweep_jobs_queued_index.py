"""A partial index of the queued jobs by id, for the claims' "oldest queued jobs".

The claims read ``WHERE state = 'queued' ORDER BY id LIMIT n``. With statistics that
say many jobs are queued (a large request just made and analysed), PostgreSQL read them
through the primary key and filtered every job done before them: in bench/queue.py, with
2,000 jobs done ahead of 2,000 queued, a claim batch's read took 1.1 ms and removed 2,000
rows (auto_explain), and the longer a deployment runs the more rows there are to pass.
This index holds only the queued jobs, so the read is the first n entries whatever the
statistics say.

The condition is written as ``models.QUEUED_JOBS_SQL`` writes it into the claims:
both databases use a partial index only where the query's own terms imply its condition.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26
"""
import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

# models.QUEUED_JOBS_SQL, frozen here as of this revision
QUEUED_JOBS_SQL = "state = 'queued'"


def upgrade() -> None:
    op.create_index("ix_sweep_jobs_queued", "sweep_jobs", ["id"],
                    sqlite_where=sa.text(QUEUED_JOBS_SQL), postgresql_where=sa.text(QUEUED_JOBS_SQL))


def downgrade() -> None:
    op.drop_index("ix_sweep_jobs_queued", table_name="sweep_jobs")
