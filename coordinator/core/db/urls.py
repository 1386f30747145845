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
accepts and never answers) and says it in one line naming the host and database.
"""
from __future__ import annotations

import socket
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

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
            from coordinator.core import db      # the connect timeout of every engine the service makes
            waited = f"{db.PG_CONNECT_TIMEOUT_S:g} s"
            if _accepts(parsed.host or "localhost", parsed.port or 5432, min(3.0, db.PG_CONNECT_TIMEOUT_S)):
                return (f"cannot open database {database!r}: a server at {host} accepted the connection but "
                        f"did not answer within {waited}: is it PostgreSQL, and is it well?")
            return (f"cannot reach PostgreSQL at {host} (database {database!r}): nothing answered within "
                    f"{waited}; is the server running, and the address right?")
        if isinstance(e, ConnectionError):      # reset, or closed before PostgreSQL's first answer
            return (f"cannot open database {database!r}: something at {host} accepted and closed the "
                    "connection: is it PostgreSQL?")
    return None
