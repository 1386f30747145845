"""The `sis` command as a user runs it: a real subprocess."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support import free_port

SIS = [sys.executable, "-m", "coordinator.cli"]


def run(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*SIS, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_help_lists_the_commands():
    out = run("--help")
    assert out.returncode == 0
    for cmd in ("serve", "migrate", "settings", "poll", "ingest", "datasets"):
        assert cmd in out.stdout
    serve = run("serve", "--help").stdout
    for flag in ("--host", "--port", "--database", "--demo"):
        assert flag in serve


def test_settings_lists_every_setting_with_a_default_and_help():
    out = run("settings")
    assert out.returncode == 0
    from coordinator.core.settings import Settings
    for name in Settings.model_fields:
        line = next(line for line in out.stdout.splitlines() if line.startswith(f"SIS_{name.upper()} "))
        assert len(line.split()) > 2


def test_settings_come_from_a_toml_file_and_the_environment(tmp_path, monkeypatch):
    from coordinator.core.settings import load
    cfg = tmp_path / "sis.toml"
    cfg.write_text('port = 9191\n[sources.usgs]\nfeed = "2.5_day"\n')
    monkeypatch.setenv("SIS_CONFIG", str(cfg))
    monkeypatch.setenv("SIS_SOURCE_TIMEOUT_S", "4")
    s = load()
    assert s.port == 9191 and s.sources["usgs"].model_extra == {"feed": "2.5_day"} and s.source_timeout_s == 4
    monkeypatch.setenv("SIS_SOURCES__USGS__FEED", "significant_week")
    assert load().sources["usgs"].model_extra == {"feed": "significant_week"}   # env wins over the file
    assert load(port=7000).port == 7000                           # flags win over both


def test_serve_demo_answers_and_stops_cleanly(tmp_path):
    port = free_port()
    proc = subprocess.Popen([*SIS, "serve", "--demo", "--port", str(port), "--database",
                             f"sqlite+aiosqlite:///{tmp_path}/sis.db"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "SIS_POLL_INTERVAL_S": "0"})
    try:
        line = proc.stdout.readline()
        assert f"serving on http://127.0.0.1:{port}" in line, proc.stderr.read() if proc.poll() else line
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/earth/events", timeout=20) as r:
            body = json.load(r)
        assert body["health"]["sourcesUsable"] == 2 and body["caveats"][0].startswith("Demo data")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=20) as r:
            assert json.load(r)["status"] == "ok"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


@pytest.mark.postgres
def test_serve_refuses_an_unmigrated_postgres_and_migrate_fixes_it(pg_database):
    if not pg_database:
        pytest.skip("PostgreSQL suite: set SIS_TEST_DATABASE_URL")
    import asyncio

    from tests.conftest import reset_postgres
    asyncio.run(reset_postgres(pg_database))
    out = run("serve", "--port", str(free_port()), "--database", pg_database)
    assert out.returncode == 2 and "run `sis migrate`" in out.stderr
    out = run("migrate", "--database", pg_database)
    assert out.returncode == 0, out.stderr


def test_serve_settles_the_collector_once_started():
    """Start-up objects are frozen out of the cyclic collector and young collections are
    rarer (``cli.settle_gc``): full collections no longer walk the whole process."""
    import gc

    from coordinator.cli import GC_YOUNG_THRESHOLD, settle_gc

    before = gc.get_threshold()
    try:
        settle_gc()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *before[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


# ---- start-up mistakes: one line on stderr, exit status 2, never a traceback ----

def one_line_refusal(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


def test_serve_takes_the_plain_sqlite_url_users_type(tmp_path):
    """``sqlite:///path`` (no driver) is read as the embedded SQLite the service uses."""
    port = free_port()
    proc = subprocess.Popen([*SIS, "serve", "--port", str(port), "--database", f"sqlite:///{tmp_path}/plain.db"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "SIS_POLL_INTERVAL_S": "0"})
    try:
        line = proc.stdout.readline()
        assert f"serving on http://127.0.0.1:{port} (embedded SQLite" in line, proc.stderr.read() if proc.poll() else line
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=20) as r:
            assert json.load(r)["status"] == "ok"
        assert (tmp_path / "plain.db").is_file()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


def test_the_url_is_normalised_for_every_subcommand(tmp_path):
    from coordinator.cli import main
    assert main(["migrate", "--database", f"sqlite:///{tmp_path}/m.db"]) == 0
    assert main(["keys", "list", "--database", f"sqlite:///{tmp_path}/m.db"]) == 0
    assert main(["nodes", "list", "--database", f"sqlite:///{tmp_path}/m.db"]) == 0


@pytest.mark.parametrize("url", ["foo", "mysql://root@localhost/sis", "sqlite://", "http://example.org/db"])
@pytest.mark.parametrize("command", [["serve"], ["migrate"], ["poll"], ["keys", "list"], ["embed", "list"], ["prune"],
                                     ["nodes", "list"], ["reviewers", "list"], ["datasets", "list"]])
def test_a_url_that_is_no_database_is_refused_in_one_line(command, url, capsys):
    from coordinator.cli import main
    assert main([*command, "--database", url]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"sis {command[0]}: ") and "sqlite:///" in err[0], err


def test_a_bad_url_in_the_environment_is_refused_in_one_line():
    line = one_line_refusal(run("migrate", env={"SIS_DATABASE_URL": "foo"}))
    assert line.startswith("sis migrate: 'foo' is not a database URL")


def test_an_unreachable_postgres_is_said_in_one_line_naming_host_and_database():
    port = free_port()                                           # nothing listens there
    for command in (["migrate"], ["serve", "--port", str(free_port())], ["keys", "list"]):
        line = one_line_refusal(run(*command, "--database", f"postgresql://postgres@127.0.0.1:{port}/sis_x"))
        assert f"127.0.0.1:{port}" in line and "sis_x" in line and "cannot reach PostgreSQL" in line, line


def test_a_port_in_use_is_said_in_one_line_before_migrations_run(tmp_path):
    import socket
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = one_line_refusal(run("serve", "--port", str(port), "--database", f"sqlite:///{tmp_path}/s.db"))
    assert f"port {port}" in line and "in use" in line, line
    assert not (tmp_path / "s.db").exists()                      # nothing was opened nor migrated


@pytest.mark.postgres
def test_postgres_urls_without_the_driver_are_accepted(pg_database):
    if not pg_database:
        pytest.skip("PostgreSQL suite: set SIS_TEST_DATABASE_URL")
    rest = pg_database.split("://", 1)[1]
    for scheme in ("postgresql", "postgres"):
        out = run("migrate", "--database", f"{scheme}://{rest}")
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr


@pytest.mark.postgres
def test_a_missing_postgres_database_is_said_in_one_line(pg_database):
    if not pg_database:
        pytest.skip("PostgreSQL suite: set SIS_TEST_DATABASE_URL")
    server = pg_database.split("://", 1)[1].rsplit("/", 1)[0]
    for command in (["migrate"], ["serve", "--port", str(free_port())], ["nodes", "list"]):
        line = one_line_refusal(run(*command, "--database", f"postgresql://{server}/sis_no_such_database"))
        assert "no database 'sis_no_such_database'" in line and server.split("@")[-1] in line, line


def test_a_sqlite_file_whose_folder_cannot_be_made_is_said_in_one_line(tmp_path):
    (tmp_path / "taken").write_text("a file where the folder would be")
    line = one_line_refusal(run("migrate", "--database", f"sqlite:///{tmp_path}/taken/sis.db"))
    assert line == f"sis migrate: cannot make the folder of the SQLite file {tmp_path}/taken/sis.db: {tmp_path}/taken is a file"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, a folder no one can write")
def test_a_sqlite_file_in_a_folder_that_cannot_be_written_is_said_in_one_line():
    """aiosqlite stops the thread of a connection that failed to open without waiting for it: unless the
    coordinator waits, the thread's answer finds the event loop closed and prints tracebacks under the line."""
    for command in (["serve", "--port", str(free_port())], ["keys", "create", "--name", "x", "--scopes",
                                                           "earth.limits"], ["migrate"], ["migrate"], ["migrate"]):
        line = one_line_refusal(run(*command, "--database", "sqlite:////proc/sis-test.db"))
        assert line == f"sis {command[0]}: cannot open the SQLite file /proc/sis-test.db: its folder cannot be written"


def test_a_folder_named_as_the_sqlite_file_is_said_to_be_one(tmp_path):
    line = one_line_refusal(run("keys", "list", "--database", f"sqlite:///{tmp_path}"))
    assert line == f"sis keys: cannot open the SQLite file {tmp_path}: it is a folder; name a file in it (…/sis.db)"


def test_a_config_file_that_is_not_there_is_said_in_one_line(tmp_path):
    line = one_line_refusal(run("migrate", env={"SIS_CONFIG": str(tmp_path / "none.toml")}))
    assert line == f"sis migrate: SIS_CONFIG names {tmp_path}/none.toml, which is not a file"


@pytest.mark.parametrize("env, said", [
    ({"SIS_GDACS_BASE_URL": "http://x"}, "SIS_GDACS_BASE_URL is now SIS_SOURCES__GDACS__BASE_URL"),
    ({"SIS_SOURCES__GDCAS__BASE_URL": "http://x"}, "SIS_SOURCES__GDCAS__... names no source"),
    ({"SIS_SOURCES__USGS__FED": "2.5_day"}, "SIS_SOURCES__USGS__FED is not a setting of source 'usgs'"),
    ({"SIS_SOURCES__USGS__API_KEY": "k"}, "SIS_SOURCES__USGS__API_KEY is not a setting of source 'usgs'"),
])
@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["poll"], ["migrate"]])
def test_wrong_source_settings_are_refused_in_one_line_before_anything_starts(tmp_path, env, said, command):
    db = tmp_path / "never.db"
    line = one_line_refusal(run(*command, "--database", f"sqlite:///{db}", env=env))
    assert said in line
    assert not db.exists()                                   # refused before migrations ran


@pytest.mark.parametrize("scopes", ["", ",", " , "])
def test_keys_create_refuses_an_empty_scope_list_naming_the_scopes(tmp_path, capsys, scopes):
    from coordinator.cli import main
    from coordinator.core.access.credentials import ALL_SCOPES
    url = f"sqlite:///{tmp_path}/k.db"
    assert main(["migrate", "--database", url]) == 0
    capsys.readouterr()
    assert main(["keys", "create", "--name", "none", "--scopes", scopes, "--database", url]) != 0
    out = capsys.readouterr()
    err = out.err.strip().splitlines()
    assert out.out == "" and len(err) == 1 and err[0].startswith("sis keys: a key needs at least one scope"), err
    assert all(s in err[0] for s in ALL_SCOPES)
    assert main(["keys", "list", "--database", url]) == 0
    assert capsys.readouterr().out.splitlines() == ["id\tprefix\tplan\tstate\tname\tscopes"]   # no key was made


def test_keys_create_takes_named_scopes_and_refuses_unknown_ones(tmp_path, capsys):
    from coordinator.cli import main
    url = f"sqlite:///{tmp_path}/k.db"
    assert main(["migrate", "--database", url]) == 0
    assert main(["keys", "create", "--name", "ev", "--scopes", "earth.events, earth.limits", "--database", url]) == 0
    assert main(["keys", "create", "--name", "x", "--scopes", "earth.limits,earth.nope", "--database", url]) == 1
    err = capsys.readouterr().err
    assert "unknown scope 'earth.nope': the scopes are earth.twin," in err
    assert main(["keys", "list", "--database", url]) == 0
    header, line = capsys.readouterr().out.strip().splitlines()
    assert header.split("\t") == ["id", "prefix", "plan", "state", "name", "scopes"]
    assert line.endswith("\tev\tearth.events,earth.limits") and "\tlive\t" in line


def _set_revision(url: str, revision: str) -> None:
    """Write ``revision`` into the database's alembic_version, as a newer release would."""
    import asyncio

    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    from coordinator.core.db.urls import normalise

    async def write() -> None:
        engine = create_async_engine(normalise(url))
        try:
            async with engine.begin() as conn:
                await conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": revision})
        finally:
            await engine.dispose()

    asyncio.run(write())


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_database_newer_than_the_code_is_said_so_not_sent_to_migrate(backend, tmp_path, pg_database):
    """A database migrated by a newer release: serve and the tools used to say "run `sis
    migrate` first", and sis migrate "Can't locate revision", each sending the operator to
    the other. Each says instead what the database is at and that a newer release is needed."""
    from coordinator.core.db.migrate import head_revisions

    if backend == "sqlite":
        url = f"sqlite:///{tmp_path}/newer.db"
    else:
        if not pg_database:
            pytest.skip("PostgreSQL suite: set SIS_TEST_DATABASE_URL")
        import asyncio

        from tests.conftest import reset_postgres
        asyncio.run(reset_postgres(pg_database))
        url = pg_database
    assert run("migrate", "--database", url).returncode == 0
    (head,) = head_revisions(url)
    newer = f"{int(head) + 1:04d}"
    _set_revision(url, newer)
    for command in (["migrate"], ["serve", "--port", str(free_port())], ["keys", "list"]):
        line = one_line_refusal(run(*command, "--database", url, env={"SIS_LOG_LEVEL": "WARNING"}))
        assert (f"the database is at {newer}, newer than this code's head {head}: it needs a newer release "
                "of the service" in line), line
    line = one_line_refusal(run("migrate", "--database", url, "--revision", "0001"))
    assert f"at {newer}, newer than" in line, line
    _set_revision(url, head)
    line = one_line_refusal(run("migrate", "--database", url, "--revision", "9999"))   # a typo is still a typo
    assert "Can't locate revision identified by '9999'" in line, line


class NotPostgres:
    """A listener on a loopback port that is not PostgreSQL: ``close`` accepts and closes at
    once, ``http`` answers PostgreSQL's first message as a web server would and closes,
    ``hang`` accepts and never answers, ``full`` never accepts (its backlog is full, so
    connection attempts go unanswered, as to a host that drops packets)."""

    def __init__(self, mode: str) -> None:
        import socket
        import threading

        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0 if mode == "full" else 16)
        self.port = self.sock.getsockname()[1]
        self.held: list = []
        if mode == "full":
            for _ in range(4):
                c = socket.socket()
                c.setblocking(False)
                c.connect_ex(("127.0.0.1", self.port))
                self.held.append(c)
        else:
            threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.mode == "hang":
                self.held.append(conn)
                continue
            if self.mode == "http":
                conn.recv(64)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            conn.close()

    def close(self) -> None:
        self.sock.close()
        for c in self.held:
            c.close()


@pytest.mark.parametrize("mode", ["close", "http"])
@pytest.mark.parametrize("command", [["migrate"], ["serve"], ["keys", "list"]])
def test_a_port_where_something_else_listens_is_said_in_one_line(command, mode, capsys):
    """Something that accepts and closes the connection, or answers as another protocol
    would: a 120-line traceback ending in asyncpg's "unexpected connection_lost() call" or
    "rejected SSL upgrade" before."""
    from coordinator.cli import main

    server = NotPostgres(mode)
    try:
        extra = ["--port", str(free_port())] if command == ["serve"] else []
        code = main([*command, *extra, "--database", f"postgresql://postgres@127.0.0.1:{server.port}/sis_x"])
    finally:
        server.close()
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert err.strip() == (f"sis {command[0]}: cannot open database 'sis_x': something at 127.0.0.1:{server.port} "
                           "accepted and closed the connection: is it PostgreSQL?"), err


@pytest.mark.parametrize("command", [["migrate"], ["serve"]])
def test_a_server_that_accepts_and_never_answers_is_not_said_to_be_absent(command, capsys, monkeypatch):
    """It waited asyncpg's 60 s (sis migrate) and said "nothing answers there; is the server
    running?": something does answer there, a connection at least. Both wait the service's
    connect timeout and say what happened; a port that never accepts is still nobody there."""
    from coordinator.cli import main
    from coordinator.core.db import urls

    monkeypatch.setattr(urls, "PG_CONNECT_TIMEOUT_S", 1.0)
    extra = ["--port", str(free_port())] if command == ["serve"] else []
    for mode, said in (("hang", "cannot open database 'sis_x': a server at 127.0.0.1:{port} accepted the "
                                "connection but did not answer within 1 s: is it PostgreSQL, and is it well?"),
                       ("full", "cannot reach PostgreSQL at 127.0.0.1:{port} (database 'sis_x'): nothing "
                                "answered within 1 s; is the server running, and the address right?")):
        server = NotPostgres(mode)
        t0 = time.monotonic()
        try:
            code = main([*command, *extra, "--database", f"postgresql://postgres@127.0.0.1:{server.port}/sis_x"])
        finally:
            server.close()
        err = capsys.readouterr().err
        assert code == 2 and err.strip() == f"sis {command[0]}: " + said.format(port=server.port), err
        assert time.monotonic() - t0 < 8          # the 1 s it says, and the second look: not asyncpg's 60 s


def test_a_second_serve_on_the_same_sqlite_file_is_refused_naming_the_first(tmp_path):
    """A second `make demo` on another port ran its own poller, lease sweeper and photo provider over the
    same SQLite file, unsaid."""
    port, db = free_port(), f"sqlite:///{tmp_path}/one.db"
    proc = subprocess.Popen([*SIS, "serve", "--port", str(port), "--database", db], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "SIS_POLL_INTERVAL_S": "0"})
    try:
        assert "serving on" in proc.stdout.readline()
        line = one_line_refusal(run("serve", "--port", str(free_port()), "--database", db))
        assert line == (f"sis serve: {tmp_path}/one.db is already served by another sis serve (pid {proc.pid}): "
                        "SQLite admits one serving process; stop that one, or name another database (--database)")
        assert run("keys", "list", "--database", db).returncode == 0           # the operator's commands beside it
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    port = free_port()
    second = subprocess.Popen([*SIS, "serve", "--port", str(port), "--database", db], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "SIS_POLL_INTERVAL_S": "0"})
    try:
        assert "serving on" in second.stdout.readline()                       # once it stopped, served again
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=20) as r:
            assert json.load(r)["status"] == "ok"
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=20) == 0
