"""Database URLs as people type them, and start-up failures said in one line.

SQLAlchemy's asyncio engine needs the driver named in the URL (``sqlite+aiosqlite``,
``postgresql+asyncpg``). Users type ``sqlite:///var/sis.db`` or
``postgresql://user@host/db`` (the form ``psql``, Heroku's ``postgres://`` and most
documents use), which SQLAlchemy reads as the synchronous drivers and refuses with a
traceback about async drivers or a missing ``psycopg``. ``normalise`` turns those forms
into the drivers the service ships with and refuses anything else with one sentence
that says what is accepted. ``connection_problem`` finds, in an exception from opening
the database, the cause a user can act on (nothing listening, no such database,
credentials refused, something that is not PostgreSQL at the address, a server that
accepts and never answers) and says it in one line naming the host and database; of a
SQLite file, that it is full, read-only, damaged (cut short) or failing, and what to do.
``storage_trouble`` tells those apart in any exception, for the writes of a running service.
"""
from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

# How long every engine the service makes waits to connect to PostgreSQL (asyncpg's own default
# is 60 s); the one-line errors below name this wait.
PG_CONNECT_TIMEOUT_S = 10.0

SQLITE = "sqlite+aiosqlite"
POSTGRES = "postgresql+asyncpg"

# Every scheme accepted, and the driver it means.
SCHEMES = {
    "sqlite": SQLITE,
    SQLITE: SQLITE,
    "postgresql": POSTGRES,
    "postgres": POSTGRES,
    POSTGRES: POSTGRES,
}

ACCEPTED = "sqlite:///path/to/sis.db or postgresql://user@host:5432/database"


class StartupError(Exception):
    """A mistake in how the service was started, said in one line (exit status 2)."""


def _parse(url: str) -> URL:
    try:
        return make_url(url)
    except ArgumentError:
        raise StartupError(f"{url!r} is not a database URL: use {ACCEPTED}") from None


def normalise(url: str) -> str:
    """The URL with the driver the service uses; ``StartupError`` for a URL it cannot use.

    ``sqlite:`` becomes ``sqlite+aiosqlite:`` and ``postgresql:`` or ``postgres:`` becomes
    ``postgresql+asyncpg:``; everything else in the URL (path, user, password, host,
    port, query) is kept as typed."""
    parsed = _parse(url.strip())
    driver = SCHEMES.get(parsed.drivername)
    if driver is None:
        raise StartupError(f"the database URL scheme {parsed.drivername!r} is not supported: use {ACCEPTED}")
    if driver == SQLITE and not parsed.database:
        raise StartupError(f"the SQLite URL {url!r} names no file: use {ACCEPTED}")
    if driver == parsed.drivername:
        return url.strip()
    # Replace only the scheme in the text: rendering the parsed URL again would
    # re-quote a password and rewrite what the user typed.
    text = url.strip()
    return driver + text[text.index(":"):]


def label(url: str) -> str:
    """Where the database is, for messages: the SQLite file, or PostgreSQL's host, port and
    database, never the password."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return url
    if parsed.get_backend_name() == "sqlite":
        return f"SQLite file {parsed.database}"
    host = parsed.host or "localhost"
    return f"{host}:{parsed.port or 5432}/{parsed.database or ''}"


def _causes(exc: BaseException):
    """The exception and everything it was raised from or while handling, once each;
    SQLAlchemy keeps the driver's exception as ``orig``."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo.extend([getattr(e, "orig", None), e.__cause__, e.__context__])


def _from_the_driver(exc: BaseException) -> bool:
    """Whether a socket error came from opening the database (it passed through the
    driver or SQLAlchemy) rather than from, say, Redis or an upstream at start-up."""
    if type(exc).__module__.split(".")[0] in ("sqlalchemy", "asyncpg"):
        return True
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename.replace("\\", "/")
        if "/asyncpg/" in name or "/sqlalchemy/" in name:
            return True
        tb = tb.tb_next
    return False


def _while_connecting(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while the driver opened a connection (``asyncpg.connect``),
    not by a statement on one already open (its ``command_timeout``)."""
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if "/asyncpg/" in code.co_filename.replace("\\", "/") and code.co_name in ("connect", "_connect"):
            return True
        tb = tb.tb_next
    return False


def _accepts(host: str, port: int, timeout: float) -> bool:
    """Whether something at ``host:port`` completes a TCP connection within ``timeout``: a
    connect that timed out either never reached a listener (a host that drops packets) or
    reached one that never answered, and only a second look tells which."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


# What SQLite says of a file it cannot write or read (its message, lower-cased), and which trouble it is.
SQLITE_TROUBLES = (
    ("database or disk is full", "full"),
    ("attempt to write a readonly database", "read-only"),
    ("database disk image is malformed", "damaged"),
    ("file is not a database", "damaged"),
    ("disk i/o error", "io"),
)
# PostgreSQL's SQLSTATEs for the same (asyncpg keeps it as ``sqlstate``): disk_full, read_only_sql_transaction.
PG_TROUBLES = {"53100": "full", "25006": "read-only"}


def storage_trouble(exc: BaseException | None) -> tuple[str, str] | None:
    """Which host trouble ``exc`` is, if any: ``(kind, words)``, kind one of ``full``,
    ``read-only``, ``damaged``, ``io``, words the driver's or the system's own
    ("database or disk is full"). Only the driver's exception is read, never SQLAlchemy's
    text, which quotes the statement and its parameters; nor an OSError, which may be any
    file's (the pid file beside the database, a log)."""
    if exc is None:
        return None
    for e in _causes(exc):
        if isinstance(e, sqlite3.Error):
            text = str(e).lower()
            for words, kind in SQLITE_TROUBLES:
                if words in text:
                    return kind, words
        elif getattr(e, "sqlstate", None) in PG_TROUBLES:
            return PG_TROUBLES[e.sqlstate], str(e).splitlines()[0] if str(e) else e.sqlstate
    return None


def _why_read_only(path: Path) -> str:
    """Which of the file, its folder or the file system SQLite could not write, where it can be told."""
    folder = path.parent
    with contextlib.suppress(OSError):          # no statvfs answer: the permissions below tell
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return f"the file system holding {folder} is mounted read-only"
    if path.exists() and not os.access(path, os.W_OK):
        return "the file is read-only to this user"
    if not os.access(folder, os.W_OK):
        return f"its folder {folder} is read-only to this user"
    return "the file or its folder is read-only to this user"


def sqlite_trouble_line(exc: BaseException, where: str, path: Path) -> str | None:
    """One line, saying what to do, for a SQLite file that is full, read-only, damaged or
    failing, or None for anything else."""
    trouble = storage_trouble(exc)
    if trouble is None:
        return None
    kind, words = trouble
    if kind == "full":
        return f"cannot write the {where}: the disk is full ({words}); free space on it and start again"
    if kind == "read-only":
        uid = os.geteuid() if hasattr(os, "geteuid") else "?"
        return (f"cannot write the {where}: {_why_read_only(path)} ({words}); SQLite writes the file and, beside "
                f"it, its -wal and -shm files: give this user (uid {uid}) write access to the file and its folder")
    if kind == "damaged":
        return (f"the {where} is damaged ({words}): cut short or overwritten (a crash mid-copy, a disk that "
                "filled); restore it from a backup, or name another database (--database)")
    return f"cannot read or write the {where}: {words}; check the disk (dmesg), its free space and its mount"


def connection_problem(exc: BaseException, url: str) -> str | None:
    """One line saying why the database at ``url`` could not be opened, or None when
    ``exc`` is not one of the start-up mistakes recognised here."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    where = label(url)
    if parsed.get_backend_name() == "sqlite":
        folders = {str(p) for p in Path(parsed.database or ".").parents}
        for e in _causes(exc):
            if isinstance(e, OSError) and e.filename is not None and str(e.filename) in folders:
                if isinstance(e, (FileExistsError, NotADirectoryError)):
                    return f"cannot make the folder of the {where}: {e.filename} is a file"
                return f"cannot make the folder of the {where}: {e.filename}: {e.strerror}"
            if type(e).__name__ == "OperationalError" and "unable to open database file" in str(e):
                if parsed.database and Path(parsed.database).is_dir():
                    return f"cannot open the {where}: it is a folder; name a file in it (…/sis.db)"
                return f"cannot open the {where}: its folder cannot be written"
        if parsed.database and parsed.database != ":memory:":
            return sqlite_trouble_line(exc, where, Path(parsed.database))
        return None
    host = f"{parsed.host or 'localhost'}:{parsed.port or 5432}"
    database = parsed.database or parsed.username or ""
    for e in _causes(exc):
        name = type(e).__name__
        if name == "InvalidCatalogNameError":
            return (f"PostgreSQL at {host} has no database {database!r}: create it "
                    f"(createdb -h {parsed.host or 'localhost'} {database}) or name another")
        if name in ("InvalidPasswordError", "InvalidAuthorizationSpecificationError"):
            return f"PostgreSQL at {host} refused the credentials of user {parsed.username!r} (database {database!r})"
        if isinstance(e, OSError) and not _from_the_driver(e):
            continue
        if isinstance(e, socket.gaierror):
            return f"cannot reach PostgreSQL at {host} (database {database!r}): the host name is not known"
        if isinstance(e, ConnectionRefusedError) or (isinstance(e, OSError) and "Connect call failed" in str(e)):
            return (f"cannot reach PostgreSQL at {host} (database {database!r}): nothing answers there; "
                    "is the server running?")
        if isinstance(e, TimeoutError) and _while_connecting(e):
            waited = f"{PG_CONNECT_TIMEOUT_S:g} s"
            if _accepts(parsed.host or "localhost", parsed.port or 5432, min(3.0, PG_CONNECT_TIMEOUT_S)):
                return (f"cannot open database {database!r}: a server at {host} accepted the connection but "
                        f"did not answer within {waited}: is it PostgreSQL, and is it well?")
            return (f"cannot reach PostgreSQL at {host} (database {database!r}): nothing answered within "
                    f"{waited}; is the server running, and the address right?")
        if isinstance(e, ConnectionError):      # reset, or closed before PostgreSQL's first answer
            return (f"cannot open database {database!r}: something at {host} accepted and closed the "
                    "connection: is it PostgreSQL?")
    trouble = storage_trouble(exc)
    if trouble is not None:
        return (f"PostgreSQL at {host} cannot write database {database!r} ({trouble[1]}): free space on its "
                "server, or take it out of read-only mode")
    return None
