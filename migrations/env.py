"""Alembic environment: async engines, batch mode on SQLite."""
from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import text

from coordinator.core.db import sqlite_threads_done
from coordinator.core.db.migrate import MIGRATION_LOCK, migration_engine
from coordinator.core.db.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        from coordinator.core.settings import load
        url = load().database_url
    return url


def _configure(connection) -> None:  # noqa: ANN001
    context.configure(connection=connection, target_metadata=target_metadata,
                      render_as_batch=connection.dialect.name == "sqlite",
                      compare_type=True)


def _run_sync(connection) -> None:  # noqa: ANN001
    """The migrations in one transaction. On PostgreSQL that transaction first takes an
    advisory lock: two ``sis migrate`` started together on an empty database both found no
    ``alembic_version`` and both created it, and one failed with a duplicate-type
    IntegrityError. With the lock the second waits for the first to commit, then reads
    the version it wrote (each statement sees what was committed before it, under the
    default READ COMMITTED) and finds nothing to do."""
    _configure(connection)
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK})
        context.run_migrations()


async def _run_async() -> None:
    engine = migration_engine(_url())
    try:
        async with engine.connect() as conn:
            await conn.run_sync(_run_sync)
            await conn.commit()
    except BaseException:
        # A SQLite file that failed to open leaves aiosqlite's thread answering a loop that
        # asyncio.run is about to close: its "Event loop is closed" traceback would print
        # over the command's one-line error, now and then. Let it end first.
        await engine.dispose()
        if engine.dialect.name == "sqlite":
            await sqlite_threads_done()
        raise
    await engine.dispose()


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_sync(connection)
    else:
        asyncio.run(_run_async())
