"""How ``sis serve`` stops, as a real process on loopback with a slow fake upstream behind it:
SIGTERM, SIGINT and SIGHUP let the requests in flight finish (up to ``cli.DRAIN_S``) and say
so in a line at the start and one at the end; those still running at the deadline are cut
off, counted and named. It used to stop at once: every request in flight was answered 500
(asyncio's CancelledError, with a traceback, or with a request id logged nowhere under
``--workers``), and SIGHUP (the terminal or ssh session closed) killed it without a word.
Log lines name their process, and SIS_LOG_LEVEL=DEBUG does not open the third-party loggers
(aiosqlite logged every statement with its parameters, API key digests among them)."""
from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from coordinator import cli
from coordinator.faces import server as faces_server
from tests.support import free_port

ROOT = Path(__file__).resolve().parent.parent
SIS = [sys.executable, "-m", "coordinator.cli"]
WIDGET = "/earth/w/cg-bitcoin?vs_currency="       # one CoinGecko price: one upstream request per currency


class SlowUpstream:
    """A CoinGecko that answers each price ``delay_s`` after it is asked (or when released)."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s, self.asked = delay_s, 0
        self.release = threading.Event()
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                with outer._lock:
                    outer.asked += 1
                outer.release.wait(outer.delay_s)
                query = parse_qs(urlparse(self.path).query)
                coin, vs = query.get("ids", ["bitcoin"])[0], query.get("vs_currencies", ["usd"])[0]
                body = json.dumps({coin: {vs: 62000.5, f"{vs}_market_cap": 1.2e12, f"{vs}_24h_vol": 3.4e10,
                                          f"{vs}_24h_change": 1.5, "last_updated_at": 1764700000}}).encode()
                with contextlib.suppress(OSError):
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_asked(self, n: int, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while self.asked < n:
            assert time.monotonic() < deadline, f"the upstream was asked {self.asked} times, not {n}"
            time.sleep(0.02)
        time.sleep(0.2)         # the coordinator's own requests reached, not only the upstream's

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstream():
    up = SlowUpstream(2.0)
    yield up
    up.close()


class Serve:
    """``sis serve`` as a child process, its stdout and stderr read together by a thread."""

    def __init__(self, args: list[str], env: dict, program: list[str] = SIS, preexec=None) -> None:  # noqa: ANN001
        self.port = free_port()
        self.proc = subprocess.Popen([*program, "serve", "--port", str(self.port), *args], cwd=ROOT,
                                     env={**os.environ, "SIS_POLL_INTERVAL_S": "0", "SIS_LOG_LEVEL": "INFO", **env},
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     preexec_fn=preexec)
        self.output: list[str] = []
        self._reader = threading.Thread(target=lambda: self.output.extend(self.proc.stdout), daemon=True)
        self._reader.start()

    def ready(self, lines: int = 1, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while sum("serving on" in line for line in list(self.output)) < lines:
            assert self.proc.poll() is None, "sis serve ended:\n" + self.log()
            assert time.monotonic() < deadline, "sis serve did not start:\n" + self.log()
            time.sleep(0.05)

    def log(self) -> str:
        if self.proc.poll() is not None:
            self._reader.join(10)
        return "".join(self.output)

    def wait(self, timeout: float = 30) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def ask(port: int, vs: str, results: dict, conn: http.client.HTTPConnection | None = None) -> threading.Thread:
    """GET the price in ``vs`` on a thread of its own (on ``conn``, a keep-alive connection, if
    given); ``results[vs]`` is (status, headers, body) or the exception."""
    def run() -> None:
        c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            c.request("GET", WIDGET + vs)
            r = c.getresponse()
            results[vs] = (r.status, dict(r.getheaders()), r.read())
        except Exception as exc:  # noqa: BLE001
            results[vs] = exc
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def sqlite_env(tmp_path: Path, up: SlowUpstream) -> dict:
    return {"SIS_DATABASE_URL": f"sqlite:///{tmp_path}/sis.db", "SIS_SOURCES__COINGECKO__BASE_URL": up.url,
            "SIS_SOURCE_TIMEOUT_S": "60"}


def connection_refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except ConnectionRefusedError:
        return True


def read_closed(c: http.client.HTTPConnection) -> bool:
    """Whether the server closed ``c`` (an idle keep-alive connection)."""
    c.sock.settimeout(5)
    try:
        return c.sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


# ---- one process ---------------------------------------------------------------------------

def test_sigterm_lets_the_requests_in_flight_finish(tmp_path, upstream):
    s = Serve([], sqlite_env(tmp_path, upstream))
    try:
        s.ready()
        idle = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        idle.request("GET", "/healthz")
        assert idle.getresponse().read()                 # a keep-alive connection, idle when the stop comes
        keep = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        results: dict = {}
        threads = [ask(s.port, "usd", results, conn=keep), ask(s.port, "eur", results)]
        upstream.wait_asked(2)
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert connection_refused(s.port), "still listening while it stops"
        assert read_closed(idle), "an idle keep-alive connection held open while it stops"
        for t in threads:
            t.join(30)
        assert s.wait() == 0, s.log()
        log = s.log()
        for vs in ("usd", "eur"):
            assert not isinstance(results[vs], Exception), (results, log)
            assert results[vs][0] == 200, (results[vs], log)
        assert results["usd"][1].get("Connection") == "close", results["usd"][1]    # its client is told
        assert "stopping (SIGTERM): 2 requests in flight, waiting up to 15 s" in log, log
        assert re.search(r"\] INFO sis: stopped$", log, re.M), log
        assert "Traceback" not in log and "CancelledError" not in log and " 500 " not in log, log
    finally:
        s.kill()


def test_sigterm_with_nothing_in_flight_stops_at_once(tmp_path, upstream):
    s = Serve([], sqlite_env(tmp_path, upstream))
    try:
        s.ready()
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGINT)
        assert s.wait() == 0, s.log()
        assert time.monotonic() - t0 < 5
        assert "stopping (SIGINT): 0 requests in flight, waiting up to 15 s" in s.log(), s.log()
    finally:
        s.kill()


def test_sighup_stops_as_sigterm_does(tmp_path, upstream):
    """The terminal or the ssh session closing: it was killed on the spot (status -1), its
    requests reset."""
    s = Serve([], sqlite_env(tmp_path, upstream))
    try:
        s.ready()
        results: dict = {}
        t = ask(s.port, "usd", results)
        upstream.wait_asked(1)
        s.proc.send_signal(signal.SIGHUP)
        t.join(30)
        assert s.wait() == 0, s.log()
        assert results["usd"][0] == 200, (results, s.log())
        assert "stopping (SIGHUP): 1 request in flight, waiting up to 15 s" in s.log(), s.log()
    finally:
        s.kill()


def test_sighup_ignored_at_start_stays_ignored(tmp_path, upstream):
    """``nohup sis serve``: SIGHUP was ignored on purpose, and is."""
    s = Serve([], sqlite_env(tmp_path, upstream), preexec=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        s.ready()
        s.proc.send_signal(signal.SIGHUP)
        time.sleep(1)
        assert s.proc.poll() is None, s.log()
        s.proc.send_signal(signal.SIGTERM)
        assert s.wait() == 0, s.log()
        assert "stopping (SIGTERM)" in s.log() and "SIGHUP" not in s.log(), s.log()
    finally:
        s.kill()


def test_requests_still_running_at_the_deadline_are_cut_off_and_counted(tmp_path):
    up = SlowUpstream(60.0)
    program = [sys.executable, "-c", "import sys; from coordinator import cli; cli.DRAIN_S = 1; "
                                     "sys.exit(cli.main(sys.argv[1:]))"]
    s = Serve([], sqlite_env(tmp_path, up), program=program)
    try:
        s.ready()
        results: dict = {}
        threads = [ask(s.port, vs, results) for vs in ("usd", "eur")]
        up.wait_asked(2)
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        assert s.wait() == 0, s.log()
        took = time.monotonic() - t0
        for t in threads:
            t.join(10)
        log = s.log()
        assert 1 <= took < 6, (took, log)
        assert "stopping (SIGTERM): 2 requests in flight, waiting up to 1 s" in log, log
        assert ("stopping: cutting off 2 requests still running after 1 s: GET /earth/w/cg-bitcoin, "
                "GET /earth/w/cg-bitcoin") in log, log
        assert re.search(r"\] INFO sis: stopped$", log, re.M), log
        assert_cut_off(results, ("usd", "eur"), log)
    finally:
        up.close()
        s.kill()


def assert_cut_off(results: dict, asked: tuple[str, ...], log: str) -> None:
    """Each request answered 503 with Retry-After and Connection: close, not reset, its id logged."""
    for vs in asked:
        assert not isinstance(results[vs], Exception), (results, log)
        status, headers, body = results[vs]
        assert status == 503, results[vs]
        assert headers.get("Retry-After") and headers.get("Connection") == "close", headers
        assert f"request {json.loads(body)['error']['details']['requestId']}: cut off" in log, log


def test_a_second_signal_cuts_the_requests_in_flight_off_at_once(tmp_path):
    """A second Ctrl-C or SIGTERM changed nothing: the stop still waited out its 15 s."""
    up = SlowUpstream(60.0)
    s = Serve([], sqlite_env(tmp_path, up))
    try:
        s.ready()
        results: dict = {}
        threads = [ask(s.port, "usd", results)]
        up.wait_asked(1)
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        s.proc.send_signal(signal.SIGINT)
        assert s.wait() == 0, s.log()
        took = time.monotonic() - t0
        for t in threads:
            t.join(10)
        log = s.log()
        assert took < 6, (took, log)
        assert "SIGINT again: the requests in flight are cut off now" in log, log
        assert "stopping: cutting off 1 request still running at a second signal: GET /earth/w/cg-bitcoin" in log, log
        assert_cut_off(results, ("usd",), log)
    finally:
        up.close()
        s.kill()


def test_the_stop_fits_in_the_supervisors_grace():
    """A worker's stop (the wait, the cut-off's grace, closing the connections) ends before the
    supervisor kills it STOP_GRACE_S after its SIGTERM, with seconds left to close the services."""
    assert cli.DRAIN_S + 3 * faces_server.CUT_OFF_GRACE_S <= cli.STOP_GRACE_S - 2


# ---- the log ------------------------------------------------------------------------------

def test_log_lines_name_their_process_and_debug_leaves_others_loggers_quiet(tmp_path, upstream):
    env = {**sqlite_env(tmp_path, upstream), "SIS_LOG_LEVEL": "DEBUG"}
    s = Serve([], env)
    try:
        s.ready()
        for _ in range(2):
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
            c.request("GET", "/earth/usage", headers={"X-Api-Key": "sis_not_a_real_key_0123456789"})
            c.getresponse().read()
            c.close()
        s.proc.send_signal(signal.SIGTERM)
        assert s.wait() == 0, s.log()
        lines = [line for line in s.log().splitlines() if re.match(r"\d{4}-\d\d-\d\d ", line)]
        assert lines, s.log()
        for line in lines:
            m = re.match(r"\S+ \S+ \[(\d+)\] (DEBUG|INFO|WARNING|ERROR|CRITICAL) (\S+): ", line)
            assert m, line
            assert int(m[1]) == s.proc.pid, line
            if m[2] in ("DEBUG", "INFO"):
                assert m[3].split(".")[0] in cli.OWN_LOGGERS, line
        assert any(" tornado.access: " in line for line in lines), lines
    finally:
        s.kill()


def test_setup_logging_sets_the_level_on_own_loggers_only():
    code = ("import logging; from coordinator.cli import setup_logging; setup_logging('debug'); "
            "[logging.getLogger(n).debug('said by %s', n) for n in "
            "('sis.http', 'tornado.access', 'coordinator.x', 'aiosqlite', 'sqlalchemy.engine.Engine', "
            "'asyncio', 'asyncpg', 'urllib3', 'httpx', 'somebody.else')]; "
            "logging.getLogger('aiosqlite').warning('warned by aiosqlite')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    said = out.stderr
    for name in ("sis.http", "tornado.access", "coordinator.x"):
        assert f"said by {name}" in said, said
    for name in ("aiosqlite", "sqlalchemy", "asyncio", "asyncpg", "urllib3", "httpx", "somebody.else"):
        assert f"said by {name}" not in said, said
    assert "warned by aiosqlite" in said, said
    assert re.search(r"\[\d+\] DEBUG sis\.http: said by sis\.http", said), said


# ---- --workers (PostgreSQL and Redis) ---------------------------------------------------------

@pytest.fixture
async def pg_url(pg_database) -> str:
    if not pg_database:
        pytest.skip("PostgreSQL suite: set SIS_TEST_DATABASE_URL")
    from tests.test_access_support import REDIS_URL
    if not REDIS_URL:
        pytest.skip("Redis tests: set SIS_TEST_REDIS_URL")
    from tests.conftest import fresh_postgres
    return await fresh_postgres(pg_database)


@pytest.mark.postgres
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_workers_let_their_requests_finish_and_name_their_pids(pg_url, upstream, sig):
    from tests.test_access_support import REDIS_URL, unique_prefix
    env = {"SIS_DATABASE_URL": pg_url, "SIS_REDIS_URL": REDIS_URL, "SIS_RATE_LIMIT_PREFIX": unique_prefix(),
           "SIS_SOURCES__COINGECKO__BASE_URL": upstream.url, "SIS_SOURCE_TIMEOUT_S": "60"}
    s = Serve(["--workers", "2"], env)
    try:
        s.ready(lines=3)                  # the supervisor's line and each worker's
        results: dict = {}
        currencies = ("usd", "eur", "gbp", "jpy")
        threads = [ask(s.port, vs, results) for vs in currencies]
        upstream.wait_asked(len(currencies))
        s.proc.send_signal(getattr(signal, sig))
        for t in threads:
            t.join(30)
        assert s.wait() == 0, s.log()
        log = s.log()
        for vs in currencies:
            assert not isinstance(results[vs], Exception), (results, log)
            assert results[vs][0] == 200, (results[vs], log)
        workers = re.findall(r"worker \d of 2 \(pid (\d+)\) serving", log)
        assert len(set(workers)) == 2, log
        assert f"[{s.proc.pid}] INFO sis: stopping ({sig}): 2 workers" in log, log
        counted = 0
        for pid in workers:                # each worker says its own stop, under its own pid
            m = re.search(rf"\[{pid}\] INFO sis: stopping \(SIG\w+\): (\d+) requests? in flight", log)
            assert m, log
            counted += int(m[1])
            assert f"[{pid}] INFO sis: stopped" in log, log
        assert counted == len(currencies), log
        assert f"[{s.proc.pid}] INFO sis: stopped" in log, log
        assert "Traceback" not in log and " 500 " not in log, log
    finally:
        s.kill()
