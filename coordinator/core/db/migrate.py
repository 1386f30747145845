"""Applying and checking Alembic migrations from the program (no ini file needed)."""
from __future__ import annotations

import asyncio
from pathlib import Path

from alembic import command
from alembic.util import CommandError
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from coordinator.core.db import Database
from coordinator.core.db.leader import lock_key
from coordinator.core.settings import Settings

MIGRATIONS = Path(__file__).resolve().parents[3] / "migrations"
# The PostgreSQL advisory lock every migration run holds for its transaction (migrations/env.py).
MIGRATION_LOCK = lock_key("migrate")


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head_revisions(url: str) -> set[str]:
    return set(ScriptDirectory.from_config(alembic_config(url)).get_heads())


def upgrade(url: str, revision: str = "head") -> str:
    """Apply pending migrations up to ``revision`` (runs its own event loop: call it outside
    one) and return the revision the database is at after, which is not ``revision`` when
    the database was already past it (an upgrade never goes down).

    A database at a revision this code does not know is ``SchemaTooNew``: Alembic says
    only "Can't locate revision", which reads as a typo in ``revision``. The database is
    asked again only when Alembic failed so."""
    try:
        command.upgrade(alembic_config(url), revision)
    except CommandError:
        newer = too_new(asyncio.run(_revisions_at(url)), url)
        if newer is not None:
            raise newer from None
        raise
    return ", ".join(sorted(asyncio.run(_revisions_at(url)))) or "none"


def migration_engine(url: str) -> AsyncEngine:
    """The engine of a migration run (``migrations/env.py``) and of the checks around it.
    On PostgreSQL it gives up connecting after ``PG_CONNECT_TIMEOUT_S``, as the service's
    own engines do: asyncpg's default is 60 s, so ``sis migrate`` against a server that
    never answered waited a minute where ``sis serve`` waited ten seconds, and the
    one-line error (``urls.connection_problem``) names the one wait."""
    from sqlalchemy.engine import make_url

    from coordinator.core import db
    if make_url(url).get_backend_name() == "postgresql":
        return create_async_engine(url, connect_args={"timeout": db.PG_CONNECT_TIMEOUT_S})
    return create_async_engine(url)


async def _revisions_at(url: str) -> set[str]:
    engine = migration_engine(url)
    try:
        return await current_revisions(engine)
    finally:
        await engine.dispose()


async def upgrade_async(engine: AsyncEngine, url: str, revision: str = "head") -> None:
    cfg = alembic_config(url)

    def _run(conn) -> None:  # noqa: ANN001
        newer = too_new(set(MigrationContext.configure(conn).get_current_heads()), url)
        if newer is not None:
            raise newer
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)

    async with engine.begin() as conn:
        await conn.run_sync(_run)


async def current_revisions(engine: AsyncEngine) -> set[str]:
    def _get(conn) -> set[str]:  # noqa: ANN001
        return set(MigrationContext.configure(conn).get_current_heads())

    async with engine.connect() as conn:
        return await conn.run_sync(_get)


async def pending(engine: AsyncEngine, url: str) -> bool:
    """Whether the database is not at this code's newest migration; ``SchemaTooNew`` when
    it is at one this code does not know (`sis migrate` could not help)."""
    current = await current_revisions(engine)
    newer = too_new(current, url)
    if newer is not None:
        raise newer
    return current != head_revisions(url)


class SchemaOutOfDate(RuntimeError):
    """PostgreSQL's schema is older than the code: ``sis migrate`` first."""


class SchemaTooNew(SchemaOutOfDate):
    """The database is at a migration this code does not have: a newer release migrated it.
    A ``SchemaOutOfDate``, so that every command that reports that one in one line (serve,
    the CLI tools) reports this one too, with what to do instead of ``sis migrate``."""


def too_new(current: set[str], url: str) -> SchemaTooNew | None:
    """``SchemaTooNew`` naming the revisions of ``current`` that the migrations folder does
    not know, or None when it knows them all."""
    script = ScriptDirectory.from_config(alembic_config(url))
    known = {rev.revision for rev in script.walk_revisions()}
    unknown = sorted(current - known)
    if not unknown:
        return None
    heads = ", ".join(sorted(script.get_heads()))
    return SchemaTooNew(f"the database is at {', '.join(unknown)}, newer than this code's head {heads}: "
                        "it needs a newer release of the service (or restore a database of this release)")


async def prepare_database(settings: Settings, db: Database) -> None:
    """SQLite (embedded) applies pending migrations itself; PostgreSQL refuses an old schema."""
    if db.is_sqlite:
        await upgrade_async(db.write_engine, settings.database_url)
    elif await pending(db.engine, settings.database_url):
        raise SchemaOutOfDate("the database schema is not at the newest migration: run `sis migrate` first")


async def with_database(settings: Settings, work, prog: str = "sis", *, create: bool = False) -> int:  # noqa: ANN001
    """For command-line tools: run ``work(db)`` against the configured database at the
    newest schema; an out-of-date PostgreSQL schema is reported and gives exit code 2. A
    SQLite file that does not exist is made only by a command that creates something
    (``create``): a list from a mistyped path would otherwise make an empty database and
    report an empty queue."""
    import sys
    if settings.is_sqlite and not create:
        from sqlalchemy.engine import make_url
        path = make_url(settings.database_url).database
        if path and path != ":memory:" and not Path(path).exists():
            print(f"{prog}: no database at {path} (sis migrate or sis serve makes one)", file=sys.stderr)
            return 2
    async with Database(settings.database_url) as db:
        try:
            await prepare_database(settings, db)
            return int(await work(db) or 0)
        except SchemaOutOfDate as exc:
            print(f"{prog}: {exc}", file=sys.stderr)
            return 2
