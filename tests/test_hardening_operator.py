"""What a new operator meets first, said in their terms: no traceback for a database not
yet migrated, a Redis URL without its scheme, a config file that is no TOML or a closed
pipe; a mistyped setting named where it was written (flag, variable, file and key) with
the closest name; mistyped SIS_ variables warned of; the reviewer key's prefix and state
the same everywhere; demo mode on a database of its own; the synthetic town's files
loadable with `sis ingest`."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import free_port

ROOT = Path(__file__).resolve().parents[1]
SIS = [sys.executable, "-m", "coordinator.cli"]


def run(*args: str, env: dict | None = None, drop: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in drop}
    return subprocess.run([*SIS, *args], capture_output=True, text=True, timeout=90, env={**environ, **(env or {})})


def one_line(out: subprocess.CompletedProcess, code: int = 2) -> str:
    assert out.returncode == code, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


@pytest.fixture
def clean_env(monkeypatch):
    """No settings of the surrounding environment (a developer's SIS_ variables)."""
    for key in list(os.environ):
        if key.upper().startswith("SIS_") and not key.upper().startswith("SIS_TEST_"):
            monkeypatch.delenv(key)
    return monkeypatch


def refused(argv: list[str], capsys) -> str:  # noqa: ANN001
    from coordinator.cli import main
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# ---- 1. no tracebacks ----

@pytest.mark.postgres
def test_poll_before_migrate_on_postgres_says_so_in_one_line(pg_database):
    if not pg_database:
        pytest.skip("PostgreSQL suite: set SIS_TEST_DATABASE_URL")
    import asyncio

    from coordinator.core.db import migrate
    from tests.conftest import reset_postgres
    asyncio.run(reset_postgres(pg_database))
    line = one_line(run("poll", "--database", pg_database))
    (head,) = migrate.head_revisions(pg_database)
    assert line == (f"sis poll: the database schema is at none (no schema yet), and this release's is {head}: "
                    "run `sis migrate` first")


def test_a_redis_url_without_its_scheme_is_refused_before_anything_starts(tmp_path):
    db = tmp_path / "never.db"
    line = one_line(run("serve", "--port", str(free_port()), "--database", f"sqlite:///{db}",
                        env={"SIS_REDIS_URL": "127.0.0.1:6379"}))
    assert line.startswith("sis serve: SIS_REDIS_URL=127.0.0.1:6379: a Redis URL starts with redis://, rediss:// "
                           "or unix://"), line
    assert not db.exists()


def test_the_redis_schemes_redis_takes_are_accepted(clean_env):
    from pydantic import ValidationError

    from coordinator.core.settings import load
    for url in ("", "redis://127.0.0.1:6379/0", "rediss://cache.example:6380", "unix:///run/redis.sock"):
        assert load(redis_url=url).redis_url == url
    for url in ("127.0.0.1:6379", "localhost", "http://127.0.0.1:6379"):
        with pytest.raises(ValidationError):
            load(redis_url=url)


def test_a_config_file_that_is_no_toml_is_named_in_one_line(tmp_path):
    cfg = tmp_path / "sis.toml"
    cfg.write_text("port = \n")
    line = one_line(run("migrate", "--database", f"sqlite:///{tmp_path}/m.db", env={"SIS_CONFIG": str(cfg)}))
    assert line == f"sis migrate: SIS_CONFIG file {cfg} is not valid TOML: Invalid value (at line 1, column 8)"


LISTS = [["settings"], ["settings", "--markdown"], ["datasets", "kinds"], ["keys", "list"], ["reviewers", "list"],
         ["nodes", "list"], ["jobs", "list"], ["datasets", "list"]]


@pytest.fixture(scope="module")
def migrated(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('lists')}/sis.db"
    assert run("migrate", "--database", url).returncode == 0
    return url


@pytest.mark.parametrize("command", LISTS, ids=" ".join)
def test_a_list_read_by_a_reader_that_went_away_ends_quietly(command, migrated):
    """`sis settings | head`: the reader closes the pipe before the list is written."""
    db = [] if command[0] == "settings" or command == ["datasets", "kinds"] else ["--database", migrated]
    proc = subprocess.Popen([*SIS, *command, *db], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()                               # before the interpreter has even started
    err = proc.stderr.read()
    assert proc.wait(timeout=90) == 141, err          # as a command killed by SIGPIPE
    assert err == "", err


# ---- 2. a mistyped setting named where it was written ----

def test_a_source_option_it_does_not_take_names_those_it_does(clean_env, tmp_path, capsys):
    clean_env.setenv("SIS_SOURCES__GDACS__BASEURL", "http://x")
    line = refused(["migrate", "--database", f"sqlite:///{tmp_path}/m.db"], capsys)
    assert line == ("sis migrate: SIS_SOURCES__GDACS__BASEURL is not a setting of source 'gdacs' (did you mean "
                    "SIS_SOURCES__GDACS__BASE_URL?); it takes SIS_SOURCES__GDACS__BASE_URL, "
                    "SIS_SOURCES__GDACS__TIMEOUT_S"), line
    clean_env.delenv("SIS_SOURCES__GDACS__BASEURL")
    clean_env.setenv("SIS_SOURCES__FIRMS__KEY", "x")          # a keyed source with an option of its own
    line = refused(["migrate", "--database", f"sqlite:///{tmp_path}/m.db"], capsys)
    assert ("it takes SIS_SOURCES__FIRMS__BASE_URL, SIS_SOURCES__FIRMS__TIMEOUT_S, SIS_SOURCES__FIRMS__API_KEY, "
            "SIS_SOURCES__FIRMS__API_KEY_FILE, SIS_SOURCES__FIRMS__PRODUCT") in line, line
    assert not (tmp_path / "m.db").exists()


def test_a_name_in_the_config_file_that_is_no_setting_is_named_with_the_closest(clean_env, tmp_path, capsys):
    cfg = tmp_path / "sis.toml"
    cfg.write_text("prot = 9090\n")
    clean_env.setenv("SIS_CONFIG", str(cfg))
    line = refused(["migrate", "--database", f"sqlite:///{tmp_path}/m.db"], capsys)
    assert line == f"sis migrate: {cfg}: prot is not a setting (did you mean port?)"
    cfg.write_text("zzzzzz = 1\n")
    line = refused(["migrate", "--database", f"sqlite:///{tmp_path}/m.db"], capsys)
    assert line == f"sis migrate: {cfg}: zzzzzz is not a setting (`sis settings` lists them, as SIS_<NAME>)"


def test_source_settings_in_the_config_file_are_named_as_the_file_writes_them(clean_env, tmp_path, capsys):
    cfg = tmp_path / "sis.toml"
    clean_env.setenv("SIS_CONFIG", str(cfg))
    cfg.write_text('[sources.usgs]\nfeeds = "2.5_day"\n')
    line = refused(["migrate", "--database", f"sqlite:///{tmp_path}/m.db"], capsys)
    assert line == (f"sis migrate: {cfg}: [sources.usgs] feeds is not a setting of source 'usgs' (did you mean "
                    "feed?); it takes base_url, timeout_s, feed"), line
    cfg.write_text('[sources.gdcas]\nbase_url = "http://x"\n')
    line = refused(["migrate", "--database", f"sqlite:///{tmp_path}/m.db"], capsys)
    assert line.startswith(f"sis migrate: {cfg}: [sources.gdcas] names no source (did you mean [sources.gdacs]?); "
                           "the sources are "), line
    cfg.write_text('[sources.usgs]\ntimeout_s = 500\n')
    line = refused(["migrate", "--database", f"sqlite:///{tmp_path}/m.db"], capsys)
    assert line == f"sis migrate: {cfg}: [sources.usgs] timeout_s = 500: must be at most 120", line


def test_a_value_out_of_range_is_named_by_its_flag_variable_or_file_key(clean_env, tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/m.db"
    line = refused(["serve", "--port", "80000", "--database", url], capsys)
    assert line == "sis serve: --port 80000: must be at most 65535"
    clean_env.setenv("SIS_PORT", "80000")
    assert refused(["serve", "--database", url], capsys) == "sis serve: SIS_PORT=80000: must be at most 65535"
    clean_env.setenv("SIS_PORT", "eighty")
    assert refused(["serve", "--database", url], capsys) == "sis serve: SIS_PORT=eighty: must be a whole number"
    clean_env.delenv("SIS_PORT")
    cfg = tmp_path / "sis.toml"
    cfg.write_text("port = 80000\n")
    clean_env.setenv("SIS_CONFIG", str(cfg))
    assert refused(["serve", "--database", url], capsys) == f"sis serve: {cfg}: port = 80000: must be at most 65535"
    assert not (tmp_path / "m.db").exists()


@pytest.mark.parametrize("name, value, said", [
    ("SIS_LOG_LEVEL", "verbose", "must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
    ("SIS_TRUSTED_PROXIES", "10.0.0.0/33", "not addresses or CIDR ranges"),
    ("SIS_HOST", "", "is empty: give an address (127.0.0.1 for this machine only"),
    ("SIS_DATA_DIR", " ", "is empty: give a folder"),
])
def test_a_setting_that_would_fail_later_or_quietly_is_refused_before_anything_starts(clean_env, tmp_path, capsys,
                                                                                      name, value, said):
    """An unknown log level or proxy range was a traceback after the migrations had run; an empty host
    listened on every interface and an empty data folder wrote into the working one."""
    clean_env.setenv(name, value)
    line = refused(["serve", "--database", f"sqlite:///{tmp_path}/m.db"], capsys)
    assert line.startswith(f"sis serve: {name}=") and said in line
    assert not (tmp_path / "m.db").exists()


def test_a_log_level_in_lower_case_is_taken(clean_env):
    from coordinator.core.settings import Settings
    clean_env.setenv("SIS_LOG_LEVEL", "debug")
    assert Settings().log_level == "DEBUG"


def test_a_secret_is_never_echoed_in_a_refusal(clean_env):
    from coordinator.core.settings_check import where
    clean_env.setenv("SIS_SOURCES__FIRMS__API_KEY", "s3cret")
    clean_env.setenv("SIS_NODE_ENROL_SECRET", "s3cret")
    assert where(("sources", "firms", "api_key"), {}) == "SIS_SOURCES__FIRMS__API_KEY=(value not shown)"
    assert where(("node_enrol_secret",), {}) == "SIS_NODE_ENROL_SECRET=(value not shown)"


# ---- 3. SIS_ variables that are no setting: warned of, not refused ----

def test_a_mistyped_variable_is_warned_of_with_the_closest_setting(clean_env, tmp_path, capsys):
    from coordinator.cli import main
    clean_env.setenv("SIS_PROT", "9090")
    clean_env.setenv("SIS_NODE_NAME", "volunteer")                 # the node agent's
    assert main(["migrate", "--database", f"sqlite:///{tmp_path}/m.db"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["sis migrate: warning: SIS_PROT is not a setting and is ignored (did you mean SIS_PORT?)"]


def test_other_programs_variables_are_left_alone_and_near_misses_are_not():
    from coordinator.core.settings_check import unknown_environment
    quiet = {"SIS_NODE_NAME": "x", "SIS_NODE_HOME": "x", "SIS_NODE_SOMETHING_NEW": "x", "SIS_ENGINE_DEVICE": "cpu",
             "SIS_TEST_DATABASE_URL": "x", "SIS_TEST_ANYTHING": "x", "SIS_FUZZ_SECONDS": "1", "SIS_BENCH_PG_URL": "x",
             "SIS_CHROMIUM": "x", "SIS_MANIFEST_KEY": "x", "SIS_CONFIG": "x", "SIS_PORT": "1",
             "SIS_NODE_ENROL_SECRET": "x", "SIS_ENGINE_BUILDS": "x", "SIS_SOURCES__USGS__FEED": "x",
             "SIS_GDACS_BASE_URL": "x", "PATH": "/bin"}
    assert unknown_environment(quiet) == []
    said = unknown_environment({"SIS_PROT": "1", "SIS_FOO": "1", "SIS_NODE_ENROL_SECRT": "x",
                                "SIS_SOURCE__GDACS__BASE_URL": "x", "sis_databse_url": "x"})
    assert said == [
        "SIS_FOO is not a setting and is ignored (`sis settings` lists the settings)",
        "SIS_NODE_ENROL_SECRT is not a setting of the coordinator and is ignored (did you mean SIS_NODE_ENROL_SECRET?)",
        "SIS_PROT is not a setting and is ignored (did you mean SIS_PORT?)",
        "SIS_SOURCE__GDACS__BASE_URL is not a setting and is ignored (did you mean SIS_SOURCES__GDACS__BASE_URL?)",
        "sis_databse_url is not a setting and is ignored (did you mean SIS_DATABASE_URL?)",
    ]


READS = [re.compile(r"""(?:environ\.get\(|environ\[|getenv\()\s*f?["'](SIS_[A-Z0-9_]+)["']"""),
         re.compile(r"""(?:^|[\s{,])["']?(SIS_[A-Z0-9_]+)["']?\s*[:=]""", re.M)]


def test_no_sis_variable_this_repository_reads_or_sets_is_warned_of():
    """Every SIS_ name read in the code (os.environ, getenv) or set by the Makefile, the CI
    script and the tests is a setting or another program's: none would be warned of."""
    from coordinator.core.settings_check import unknown_environment
    files = [ROOT / "Makefile", ROOT / ".ci" / "run"]
    for top in ("coordinator", "node_agent", "sweep_engine", "tests", "bench", "build"):
        files += sorted((ROOT / top).rglob("*.py"))
    names: set[str] = set()
    for f in files:
        if not f.is_file() or f.name == Path(__file__).name:
            continue
        text = f.read_text(errors="replace")
        for pattern in READS[:1] if f.suffix == ".py" else READS:
            names |= set(pattern.findall(text))
        if f.suffix == ".py":     # env={..., "SIS_X": ...} given to a process the tests start
            names |= set(re.findall(r"""["'](SIS_[A-Z0-9_]+)["']\s*:""", text))
    names = {n for n in names if not n.startswith("SIS_SOURCES__") and not n.endswith("_")}
    assert {"SIS_TEST_DATABASE_URL", "SIS_NODE_HOME", "SIS_FUZZ_SECONDS", "SIS_CHROMIUM"} <= names, names
    assert unknown_environment({n: "x" for n in names}) == []


# ---- 4. 5. the reviewer key as it is issued, and one word for its state ----

def test_the_review_page_and_its_document_show_the_prefix_keys_are_issued_with():
    from coordinator.core.access.credentials import KEY_PREFIX
    page = (ROOT / "coordinator" / "static" / "review" / "index.html").read_text()
    assert f'placeholder="reviewer key ({KEY_PREFIX}...)"' in page and "sisr_" not in page
    doc = (ROOT / "docs" / "review.md").read_text()
    assert f"/review/#key={KEY_PREFIX}..." in doc and "#key=sisr_" not in doc


def test_keys_list_and_reviewers_list_agree_on_a_keys_state_under_headers(clean_env, tmp_path, capsys):
    from coordinator.cli import main
    url = f"sqlite:///{tmp_path}/k.db"
    assert main(["reviewers", "create", "--name", "Rita", "--database", url]) == 0
    key_id = capsys.readouterr().out.split()[1]

    def states() -> tuple[str, str]:
        assert main(["keys", "list", "--database", url]) == 0
        keys = capsys.readouterr().out.splitlines()
        assert keys[0].split("\t") == ["id", "prefix", "plan", "state", "name", "scopes"]
        assert main(["reviewers", "list", "--database", url]) == 0
        reviewers = capsys.readouterr().out.splitlines()
        assert reviewers[0].split()[:3] == ["key", "prefix", "state"]
        key_state = next(ln for ln in keys if ln.startswith(key_id)).split("\t")[3].split()[0]
        reviewer_state = next(ln for ln in reviewers if ln.startswith(key_id)).split()[2]
        return key_state, reviewer_state

    assert states() == ("live", "live")
    assert main(["reviewers", "revoke", key_id, "--reason", "left", "--database", url]) == 0
    capsys.readouterr()
    assert states() == ("revoked", "revoked")


# ---- 8. demo mode on a database of its own ----

def _settings_of(argv: list[str]):
    from coordinator.cli import _settings, parser
    return _settings(parser().parse_args(argv))


def test_serve_demo_without_a_database_uses_the_demo_database(clean_env, tmp_path):
    from coordinator.core.db.urls import normalise
    from coordinator.core.settings import DEFAULT_DB, DEMO_DB
    assert DEMO_DB.endswith("var/demo.db") and DEMO_DB.rsplit("/", 1)[0] == DEFAULT_DB.rsplit("/", 1)[0]
    assert _settings_of(["serve", "--demo"]).database_url == normalise(DEMO_DB)
    assert _settings_of(["poll", "--demo"]).database_url == normalise(DEMO_DB)
    assert _settings_of(["serve"]).database_url == normalise(DEFAULT_DB)
    mine = f"sqlite+aiosqlite:///{tmp_path}/mine.db"
    assert _settings_of(["serve", "--demo", "--database", mine]).database_url == mine
    clean_env.setenv("SIS_DATABASE_URL", mine)
    assert _settings_of(["serve", "--demo"]).database_url == mine
    clean_env.delenv("SIS_DATABASE_URL")
    cfg = tmp_path / "sis.toml"
    cfg.write_text(f'database_url = "{mine}"\n')
    clean_env.setenv("SIS_CONFIG", str(cfg))
    assert _settings_of(["serve", "--demo"]).database_url == mine
    clean_env.delenv("SIS_CONFIG")
    clean_env.setenv("SIS_DEMO", "true")                 # demo mode by the environment: the same
    assert _settings_of(["serve"]).database_url == normalise(DEMO_DB)


def test_serve_help_says_where_the_demo_goes():
    out = run("serve", "--help")
    assert out.returncode == 0 and "var/demo.db" in " ".join(out.stdout.split())


# ---- 6. the synthetic town as files sis ingest loads ----

def test_the_synthetic_town_command_writes_files_that_ingest(clean_env, tmp_path, capsys):
    from coordinator.cli import main
    from coordinator.demo import town
    clean_env.setenv("SIS_DATA_DIR", str(tmp_path / "data"))
    assert town.main([str(tmp_path / "town")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [ln.split()[2] for ln in lines] == ["osm", "places", "places", "population"]
    url = f"sqlite:///{tmp_path}/t.db"
    import shlex
    for ln in lines:
        argv = shlex.split(ln)[1:]                      # the printed line, as a shell would split it
        assert main([*argv, "--database", url]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    for kind in ("osm", "places", "population"):
        assert re.search(rf"version \d+ of {kind} ready: [1-9]\d* records, 0 bad", out), out
    assert main(["datasets", "list", "--database", url]) == 0
    listed = capsys.readouterr().out
    assert listed.count(" ready ") == 4 and listed.count("demo: synthetic town") == 4     # the demo caveat's mark


def test_the_synthetic_town_command_refuses_a_file_for_a_folder(tmp_path, capsys):
    from coordinator.demo import town
    (tmp_path / "f").write_text("x")
    assert town.main([str(tmp_path / "f")]) == 2
    assert "is not a folder" in capsys.readouterr().err


# ---- operator commands given what they cannot use ----

def test_migrate_says_where_the_database_is_and_an_unknown_revision_in_one_line(tmp_path, clean_env):
    url = f"sqlite+aiosqlite:///{tmp_path}/m.db"
    out = run("migrate", "--database", url)
    assert out.returncode == 0 and re.match(r"database at \d{4}, \d+ migrations applied: ", out.stdout), out.stdout
    out = run("migrate", "--revision", "0001", "--database", url)     # it was at the newest: nothing went down
    assert out.returncode == 0 and "past 0001: sis migrate only upgrades" in out.stdout, out.stdout
    assert "Can't locate revision" in one_line(run("migrate", "--revision", "bogus", "--database", url))


def test_migrate_says_which_migrations_it_applied_and_what_they_did(tmp_path, clean_env):
    """`sis migrate` said "database at 0021" whether it applied eight migrations or none, and what
    a migration reported (jobs it drew again) was never shown: on PostgreSQL it is the only way
    an upgrade runs."""
    from coordinator.core.db import migrate
    (head,) = migrate.head_revisions("sqlite://")
    url = f"sqlite+aiosqlite:///{tmp_path}/m.db"
    assert run("migrate", "--revision", "0019", "--database", url).returncode == 0
    out = run("migrate", "--database", url)
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and lines[0] == f"database at {head}, 2 migrations applied: {url}", out.stdout
    assert lines[1] == "  0020  A seen fact's and a measurement's license as text of any length."
    assert lines[2].startswith("  0021  Jobs over a cell straddling the antimeridian") and len(lines) == 3
    again = run("migrate", "--database", url)
    assert again.returncode == 0 and again.stdout == f"database at {head}, nothing to apply: {url}\n", again.stdout


def test_a_tool_refuses_a_sqlite_database_of_an_earlier_release_and_leaves_it_as_it_was(tmp_path, clean_env):
    """Every `sis` tool migrated a SQLite database of an earlier release as it opened it, with
    nothing said (`sis keys list` too): the release that made it could then not open it. Only
    `sis serve` and `sis migrate` move it now; the others say where it is and what to run."""
    import asyncio

    from coordinator.core.db import migrate
    (head,) = migrate.head_revisions("sqlite://")
    url = f"sqlite+aiosqlite:///{tmp_path}/old.db"
    assert run("migrate", "--revision", "0019", "--database", url).returncode == 0
    for argv in (["keys", "list"], ["jobs", "list"], ["nodes", "list"], ["datasets", "list"],
                 ["reviewers", "list"], ["poll"]):
        line = one_line(run(*argv, "--database", url))
        assert f"the database schema is at 0019, and this release's is {head}: run `sis migrate` first" in line
        assert "copy the file first" in line, line
    assert asyncio.run(migrate._revisions_at(url)) == {"0019"}


def test_a_list_from_a_database_that_does_not_exist_makes_none(tmp_path, clean_env):
    """A mistyped path made an empty database and reported '0 jobs'."""
    url = f"sqlite+aiosqlite:///{tmp_path}/typo/x.db"
    for argv in (["jobs", "list"], ["nodes", "list"], ["datasets", "list"], ["keys", "list"], ["reviewers", "list"]):
        line = one_line(run(*argv, "--database", url))
        assert "no database at" in line and "sis migrate" in line, (argv, line)
    assert not (tmp_path / "typo").exists()


def test_blank_reasons_and_names_and_a_limit_under_one_are_refused(tmp_path, clean_env, capsys):
    url = f"sqlite+aiosqlite:///{tmp_path}/b.db"
    for argv, what in ((["nodes", "revoke", "nd_x", "--reason", "  "], "--reason: must not be blank"),
                       (["reviewers", "create", "--name", ""], "--name: must not be blank"),
                       (["reviewers", "revoke", "key_x", "--reason", ""], "--reason: must not be blank"),
                       (["jobs", "requeue", "1", "--reason", " "], "--reason: must not be blank"),
                       (["jobs", "list", "--limit", "0"], "--limit: must be at least 1")):
        from coordinator.cli import main
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--database", url])
        assert exit_.value.code == 2
        assert what in capsys.readouterr().err, argv


def test_a_refused_url_never_shows_its_password(tmp_path, clean_env):
    for value in (":s3cretPassw0rd@cache.internal:6379/0", "cache:s3cretPassw0rd@cache.internal:6379"):
        line = one_line(run("jobs", "list", "--database", f"sqlite+aiosqlite:///{tmp_path}/x.db",
                            env={"SIS_REDIS_URL": value}))
        assert "s3cretPassw0rd" not in line and "***@cache.internal" in line, line


def test_demo_mode_runs_in_one_process(tmp_path, clean_env):
    """Each worker started its own fake upstreams and photo provider and loaded the town again."""
    line = one_line(run("serve", "--demo", "--workers", "2", "--port", str(free_port()),
                        "--database", "postgresql+asyncpg://nobody@127.0.0.1:1/x"), code=2)
    assert "--demo runs in one process" in line


async def test_sis_nodes_list_shows_the_latest_seen_first_with_counts_a_state_and_a_limit(tmp_path, capsys):
    """It printed every node ever enrolled, oldest first ("1 nodes"), with last-seen times cut
    mid-microsecond and no zone; after a year of open enrolment the list only grew."""
    import asyncio
    from datetime import timedelta

    from coordinator.cli import main
    from coordinator.core.db import Database
    from coordinator.sweeps import nodes as registry, transitions as tr

    url = f"sqlite+aiosqlite:///{tmp_path}/n.db"
    assert await asyncio.to_thread(main, ["migrate", "--database", url]) == 0
    db = Database(url)
    made = []
    for i in range(3):
        node, _ = await registry.enrol(db, name=f"n{i}", platform="linux", gpu="g", engine_version="0.1.0",
                                       engine_build="b")
        made.append(node.id)
    async with db.write() as s:
        for i, nid in enumerate(made):                       # n0 seen last, n2 first
            (await s.get(registry.Node, nid)).last_seen_at = tr.utcnow() - timedelta(hours=i)
    await registry.revoke(db, made[1], "junk", "test", 3)
    await db.close()
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["nodes", "list", "--database", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:-1]] == made
    assert re.search(r" \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ", lines[1]) and lines[2].split()[1] == "revoked"
    assert lines[-1] == "3 nodes (0 trusted, 2 untrusted, 1 revoked)"
    assert await asyncio.to_thread(main, ["nodes", "list", "--state", "untrusted", "--limit", "1",
                                          "--database", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:-1]] == [made[0]]
    assert lines[-1] == "3 nodes (0 trusted, 2 untrusted, 1 revoked); the 1 seen last shown (--limit)"


def test_sis_poll_exits_1_when_no_source_answered(tmp_path):
    """A poll no source answered is recorded (the history shows the gap) but read 'poll 1: 0 events,
    0 changes' with status 0: a cron job took it for a quiet day."""
    db = f"sqlite:///{tmp_path}/p.db"
    assert run("migrate", "--database", db).returncode == 0
    nowhere = {"SIS_SOURCES__GDACS__BASE_URL": "http://127.0.0.1:9", "SIS_SOURCES__USGS__BASE_URL": "http://127.0.0.1:9",
               "SIS_SOURCE_TIMEOUT_S": "2"}
    out = run("poll", "--database", db, env=nowhere)
    assert out.returncode == 1, out
    assert out.stdout.startswith("poll 1: 0 events, 0 changes, sources usable 0/2 (GDACS: unreachable")
    assert "sis poll: no source answered" in out.stderr
    demo = run("poll", "--demo", "--database", f"sqlite:///{tmp_path}/d.db")
    assert demo.returncode == 0 and "sources usable 2/2" in demo.stdout, demo
