"""The supervisor of ``sis serve --workers 2`` and its workers, as real processes on a real
PostgreSQL database: workers that do not stop after SIGTERM are killed STOP_GRACE_S later
(the supervisor used to wait for ever in ``os.wait`` when none of them ended), and
workers whose supervisor was killed stop by themselves and give the port back (they
used to serve on as orphans, and a restart found the port in use)."""
from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from tests.test_scale_workers import Workers

pytestmark = pytest.mark.postgres
GRACE_S = 2
NO_PHOTOS = "http://127.0.0.1:9/api"     # no job is asked for here: the photo provider is never called
# The supervisor with a short grace, so that the test does not wait the real 20 s.
SHORT_GRACE = ("-c", f"import sys; from coordinator import cli; cli.STOP_GRACE_S = {GRACE_S}; "
                     "sys.exit(cli.main(sys.argv[1:]))")


@pytest.fixture
async def pg_url(pg_database) -> str:
    if not pg_database:
        pytest.skip("PostgreSQL suite: set SIS_TEST_DATABASE_URL")
    from tests.conftest import fresh_postgres
    return await fresh_postgres(pg_database)


def gone(pid: int) -> bool:
    """Whether the process has ended (a zombie nobody has reaped yet has ended too)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def port_free(port: int) -> bool:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)     # as bind_sockets does: TIME_WAIT is no holder
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


async def test_workers_that_ignore_sigterm_are_killed_after_the_grace(pg_url):
    workers = Workers(pg_url, NO_PHOTOS, program=SHORT_GRACE)
    pids: list[int] = []
    try:
        await workers.ready()
        pids = workers.worker_pids()
        assert len(pids) == 2
        for pid in pids:                      # neither can act on SIGTERM now
            os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        workers.proc.send_signal(signal.SIGTERM)
        code = workers.proc.wait(GRACE_S + 15)
        took = time.monotonic() - t0
        log = workers.log()
        assert code == 0, log
        assert GRACE_S <= took < GRACE_S + 5, took
        for pid in pids:
            assert f"worker pid {pid} did not stop {GRACE_S} s after SIGTERM: killed" in log, log
            assert gone(pid)
    finally:
        kill_all(pids)
        if workers.proc.poll() is None:
            workers.proc.kill()


async def test_workers_stop_when_their_supervisor_is_killed(pg_url):
    workers = Workers(pg_url, NO_PHOTOS)
    pids: list[int] = []
    try:
        await workers.ready()
        pids = workers.worker_pids()
        assert len(pids) == 2
        assert not port_free(workers.port)
        workers.proc.kill()                   # SIGKILL: it cannot stop them itself
        workers.proc.wait(10)
        deadline = time.monotonic() + 20
        while not all(gone(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(gone(p) for p in pids), "the workers serve on as orphans"
        assert port_free(workers.port)        # a new `sis serve` may listen there
    finally:
        kill_all(pids)


def test_a_worker_is_given_up_on_only_for_restarts_close_together():
    """Counted over the supervisor's life, a fourth crash of a worker a week after the third
    stopped every worker; counted in a window, a worker failing as it starts is still given up
    on at once."""
    from coordinator.cli import Restarts
    now = [0.0]
    r = Restarts(2, limit=3, window_s=600, clock=lambda: now[0])
    assert [r.take(0) for _ in range(3)] == [1, 2, 3]
    assert r.take(0) is None                        # a fourth at once: it fails as it starts
    assert r.take(1) == 1                           # each worker its own count
    now[0] = 601.0
    assert r.take(0) == 1                           # the window passed: started again
    for day in range(1, 30):                        # killed once a day for a month: started again every time
        now[0] = 601.0 + day * 86400
        assert r.take(0) == 1


async def test_a_worker_killed_again_after_the_window_is_started_again(pg_url):
    """A real supervisor allowed one restart in 3 s: a worker killed, then killed again once
    the window has passed, is started again both times, and serving goes on."""
    program = ("-c", "import sys; from coordinator import cli; cli.WORKER_RESTARTS = 1; cli.RESTART_WINDOW_S = 3; "
                     "sys.exit(cli.main(sys.argv[1:]))")
    w = Workers(pg_url, NO_PHOTOS, program=program)
    try:
        await w.ready()
        victim = w.worker_pids()[0]
        for kill in range(2):                       # the same worker both times: each has a count of its own
            before = set(w.worker_pids())
            os.kill(victim, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while True:
                pids = w.worker_pids() if w.proc.poll() is None else []
                if len(pids) == 2 and victim not in pids:
                    (victim,) = set(pids) - before
                    break
                assert w.proc.poll() is None, "the supervisor gave up:\n" + w.log()
                assert time.monotonic() < deadline, "the worker was not started again:\n" + w.log()
                await asyncio.sleep(0.1)
            await asyncio.sleep(3.5)                # past the window before the next kill
        assert w.proc.poll() is None
    finally:
        w.stop()
