"""Applying and checking Alembic migrations from the program (no ini file needed)."""
from __future__ import annotations

import asyncio
import logging
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
log = logging.getLogger("sis.db")
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


class _Applied(logging.Handler):
    """The migrations one run applied, as Alembic runs them ("Running <step>"): what this run
    did, not what lay between the revisions read before and after, which a second ``sis
    migrate`` waiting on the first's lock would claim as its own."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.steps: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        step = record.args[0] if record.msg == "Running %s" and isinstance(record.args, tuple) else None
        rev = getattr(getattr(step, "revision", None), "revision", None)
        if rev and getattr(step, "is_upgrade", True):
            self.steps.append((rev, _first_sentence(step.doc or "")))


def _first_sentence(doc: str) -> str:
    """A migration's docstring's first sentence (its first paragraph, to its first stop)."""
    para = " ".join(doc.strip().split("\n\n")[0].split())
    first = para.split(". ")[0].rstrip(".") + "." if para else ""
    return first if len(first) <= 100 else first[:first.rfind(" ", 0, 99)] + " …"


def upgrade_saying(url: str, revision: str = "head") -> tuple[str, list[tuple[str, str]]]:
    """``upgrade``, and the migrations it applied, oldest first: each revision with the first
    line of its docstring, for ``sis migrate`` to say what it did."""
    runtime = logging.getLogger("alembic.runtime.migration")
    seen = _Applied()
    level, propagate = runtime.level, runtime.propagate
    runtime.addHandler(seen)
    runtime.setLevel(logging.INFO)
    runtime.propagate = False           # its "Context impl", "Will assume": the steps are said below
    try:
        return upgrade(url, revision), seen.steps
    finally:
        runtime.removeHandler(seen)
        runtime.setLevel(level)
        runtime.propagate = propagate


def migration_engine(url: str) -> AsyncEngine:
    """The engine of a migration run (``migrations/env.py``) and of the checks around it.
    On PostgreSQL it gives up connecting after ``PG_CONNECT_TIMEOUT_S``, as the service's
    own engines do: asyncpg's default is 60 s, so ``sis migrate`` against a server that
    never answered waited a minute where ``sis serve`` waited ten seconds, and the
    one-line error (``urls.connection_problem``) names the one wait."""
    from sqlalchemy.engine import make_url

    from coordinator.core.db import urls
    if make_url(url).get_backend_name() == "postgresql":
        return create_async_engine(url, connect_args={"timeout": urls.PG_CONNECT_TIMEOUT_S})
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


def _revs(revs: set[str]) -> str:
    return ", ".join(sorted(revs)) or "none (no schema yet)"


LEFT_BESIDE = ("-wal", "-shm", "-journal", ".serving")   # what SQLite and sis serve leave beside a database file


def lost_database(path: Path) -> str | None:
    """One line when the SQLite file at ``path`` looks lost, not new, or None: it is empty
    (0 bytes: a copy or restore cut short, a disk that filled; SQLite takes it for a new
    database and it was migrated as one, without a word), or it is not there while what an
    earlier one leaves beside it is (``sis.db.serving``, ``sis.db-wal``: deleted, moved, a
    mount missing). A new installation has neither, and is started without a word."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        size = None
    except OSError:
        return None          # opening it says what is wrong
    if size == 0:
        return (f"{path} is empty (0 bytes): a new database is made in it; if it held one (a copy or "
                "restore cut short, a disk that filled), stop now and restore it from a backup")
    if size is not None:
        return None
    left = [path.with_name(path.name + suffix) for suffix in LEFT_BESIDE]
    left = [p.name for p in left if p.exists()]
    if not left:
        return None
    return (f"there is no database at {path}, but {', '.join(left)} left by an earlier one "
            f"{'is' if len(left) == 1 else 'are'} there: a new, empty database is made; if one was there (deleted, "
            "moved, a mount missing), stop now and put it back")


async def prepare_database(settings: Settings, db: Database, *, upgrade: bool = True) -> None:
    """The database at this code's newest migration, or ``SchemaOutOfDate`` saying where it is.

    SQLite (embedded) applies pending migrations itself where ``upgrade`` (``sis serve``),
    and to a database with no schema yet whoever opens it: one just made has nothing an
    earlier release could still read. Every other tool (``with_database``) refuses a SQLite
    database of an earlier release, as PostgreSQL refuses an old schema to all: a ``sis
    keys list`` that migrated it silently left the release that made it unable to open it
    ("Can't locate revision"), with nothing said."""
    url = settings.database_url
    current = await current_revisions(db.engine)
    newer = too_new(current, url)
    if newer is not None:
        raise newer
    heads = head_revisions(url)
    if current == heads:
        return
    if db.is_sqlite and (upgrade or not current):
        await upgrade_async(db.write_engine, url)
        if current:
            log.warning("the database was at %s: migrated to this release's %s (%s)", _revs(current),
                        _revs(heads), url)
        return
    how = ("run `sis migrate` first (or `sis serve`, which migrates SQLite itself); once migrated, the release "
           "that made it cannot open it, so copy the file first to keep a way back") if db.is_sqlite else (
           "run `sis migrate` first")
    raise SchemaOutOfDate(f"the database schema is at {_revs(current)}, and this release's is {_revs(heads)}: {how}")


async def with_database(settings: Settings, work, prog: str = "sis", *, create: bool = False) -> int:  # noqa: ANN001
    """For command-line tools: run ``work(db)`` against the configured database at the
    newest schema; an out-of-date schema (PostgreSQL's, or a SQLite file of an earlier
    release: ``prepare_database``) is reported and gives exit code 2. A
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
            await prepare_database(settings, db, upgrade=False)
            return int(await work(db) or 0)
        except SchemaOutOfDate as exc:
            print(f"{prog}: {exc}", file=sys.stderr)
            return 2
