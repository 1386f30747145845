"""``sis serve --workers 2``: two real coordinator processes sharing one port, one
PostgreSQL database and one Redis. 32 nodes across both lease every job once and lose
none; the anonymous per-minute limit is exact across both; a revoked key is refused by
every process at the next request; one worker killed mid-batch loses nothing. And
``--workers`` above 1 is refused on SQLite."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from coordinator import cli
from coordinator.core.access import credentials as creds
from coordinator.core.db import Database
from coordinator.core.db.models import Node, SweepJob, SweepLease, SweepResult
from coordinator.demo.photos import DEV_ENGINE_BUILD
from tornado.httpclient import HTTPClientError

from tests.support import Coordinator, Response, free_port
from tests.test_access_support import REDIS_URL, burst, unique_prefix
from tests.test_sweep_concurrency import run_nodes
from tests.test_sweeps_kit import CENTRE, SimNode, photos, request_sweep  # noqa: F401

pytestmark = pytest.mark.postgres
ROOT = Path(__file__).resolve().parent.parent
NODES = 32
JOBS = 400


@pytest.fixture
async def pg_url(pg_database) -> str:
    if not pg_database:
        pytest.skip("PostgreSQL suite: set SIS_TEST_DATABASE_URL")
    if not REDIS_URL:
        pytest.skip("Redis tests: set SIS_TEST_REDIS_URL")
    from tests.conftest import reset_postgres
    from tests.test_sweeps_kit import migrate
    await reset_postgres(pg_database)
    await migrate(pg_database)
    return pg_database


class Workers:
    """``sis serve --workers N`` as a child process of the test (``program``: what Python
    runs, ``-c`` code to change a constant of the supervisor first)."""

    def __init__(self, db_url: str, photos_url: str, n: int = 2, extra_env: dict | None = None,
                 program: tuple[str, ...] = ("-m", "coordinator.cli")) -> None:
        self.port = free_port()
        self.n = n
        env = {**os.environ, "SIS_DATABASE_URL": db_url, "SIS_REDIS_URL": REDIS_URL,
               "SIS_RATE_LIMIT_PREFIX": unique_prefix(), "SIS_ENGINE_BUILDS": DEV_ENGINE_BUILD,
               "SIS_SOURCES__PANORAMAX__BASE_URL": photos_url, "SIS_JOB_MAX_PHOTOS": "1",
               "SIS_NODE_ENROL_PER_MINUTE": str(NODES), "SIS_POLL_INTERVAL_S": "0",
               "SIS_LEASE_SWEEP_INTERVAL_S": "1", "SIS_LOG_LEVEL": "WARNING", **(extra_env or {})}
        self.proc = subprocess.Popen([sys.executable, *program, "serve", "--workers", str(n),
                                      "--port", str(self.port)], cwd=ROOT, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.output: list[str] = []
        self._reader: threading.Thread | None = None

    async def ready(self, timeout: float = 90) -> None:
        """Until every worker has said it serves. The output is read by a thread of its
        own, so the deadline holds even while a worker says nothing (a blocking read
        would wait past it), and the pipe never fills while the test runs."""
        if self._reader is None:
            self._reader = threading.Thread(target=self._read, daemon=True)
            self._reader.start()
        deadline = time.monotonic() + timeout
        while len(set(re.findall(r"worker (\d+) of \d+ \(pid \d+\) serving on", "".join(self.output)))) < self.n:
            assert self.proc.poll() is None, "sis serve ended:\n" + self.log()
            assert time.monotonic() < deadline, "workers did not start:\n" + "".join(self.output)
            await asyncio.sleep(0.05)

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.output.append(line)

    def log(self) -> str:
        """Everything the processes printed (whole once they have ended)."""
        if self._reader is not None:
            self._reader.join(10)
        return "".join(self.output)

    def worker_pids(self) -> list[int]:
        text = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        return [int(p) for p in text.split()]

    @staticmethod
    def cpu_s(pid: int) -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> int:
        try:
            workers = self.worker_pids()
        except OSError:                  # the supervisor has ended already
            workers = []
        self.proc.terminate()
        try:
            return self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                for pid in workers:      # orphans would hold the pipe, and so the reader thread, open
                    with contextlib.suppress(OSError):
                        os.kill(pid, 9)


async def trusted_nodes(c: Coordinator, db) -> list:  # noqa: ANN001
    """NODES simulated nodes enrolled through the coordinator and marked trusted (no replicas)."""
    nodes = []
    for _ in range(NODES):
        node = SimNode(c)
        assert (await node.enrol()).status == 201
        nodes.append(node)
    async with db.write() as s:
        await s.execute(update(Node).where(Node.id.in_([n.node_id for n in nodes])).values(trusted=True))
    return nodes


def remote(base_url: str) -> Coordinator:
    """The test client of ``tests.support`` pointed at a coordinator this test did not start."""
    return Coordinator(services=None, base_url=base_url, server=None)   # type: ignore[arg-type]


async def test_two_worker_processes_share_jobs_limits_and_revocation(pg_url, photos):  # noqa: F811
    photos.scatter(*CENTRE, radius_m=950, n=JOBS, seed=5)
    workers = Workers(pg_url, photos.api_url)
    db = Database(pg_url)
    try:
        await workers.ready()
        pids = workers.worker_pids()
        assert len(pids) == 2
        c = remote(workers.base_url)

        # 32 nodes across both processes: every job leased once, none lost.
        body = (await request_sweep(c, radius=1000)).json()
        assert body["jobs"] == JOBS
        nodes = await trusted_nodes(c, db)
        cpu0 = {p: workers.cpu_s(p) for p in pids}
        leased, violations = await run_nodes(nodes)
        used = {p: workers.cpu_s(p) - cpu0[p] for p in pids}
        print(f"\n{NODES} nodes, {JOBS} jobs over 2 workers: CPU s per worker {sorted(used.values())}")
        assert violations == []
        assert len(leased) == JOBS and set(leased.values()) == {1}          # 0 leased twice, 0 lost
        async with db.read() as s:
            states = dict((await s.execute(select(SweepJob.state, func.count()).group_by(SweepJob.state))).all())
            per_job = (await s.execute(select(SweepLease.job_id, func.count()).group_by(SweepLease.job_id))).all()
            results = dict((await s.execute(select(SweepResult.state, func.count())
                                            .group_by(SweepResult.state))).all())
        assert states == {"in_review": JOBS}
        assert len(per_job) == JOBS and {n for _, n in per_job} == {1}
        assert results == {"accepted": JOBS}
        total = sum(used.values())
        assert all(u > 0.1 * total for u in used.values()), used            # both processes served

        # The anonymous window of 120 a minute, exact across both (the sweep request above was one).
        statuses = await burst(workers.base_url, "/earth/limits", clients=64, per_client=4)
        got = Counter(statuses)
        print(f"anonymous: {got[200]} of {len(statuses)} allowed across 2 workers (119 left of 120)")
        assert set(got) <= {200, 429}
        assert 118 <= got[200] <= 120

        # A key used on both processes (each has it in its credential cache), revoked: refused at
        # the next request, whichever process answers it.
        secret, rec = await creds.create_key(db, "scale test", "Pro")
        cpu1 = {p: workers.cpu_s(p) for p in pids}
        before = await burst(workers.base_url, "/earth/limits", clients=32, per_client=8,
                             headers={"X-Api-Key": secret})
        served = {p: workers.cpu_s(p) - cpu1[p] for p in pids}
        assert Counter(before) == {200: 256}
        assert all(u > 0 for u in served.values()), served                  # both processes served the key
        await creds.revoke_key(db, rec.id)
        after = await burst(workers.base_url, "/earth/limits", clients=16, per_client=2,
                            headers={"X-Api-Key": secret})
        assert Counter(after) == {401: 32}
    finally:
        code = workers.stop()
        await db.close()
    assert code == 0, workers.log()


def test_more_than_one_worker_is_refused_on_sqlite_in_one_line(tmp_path, capsys):
    code = cli.main(["serve", "--workers", "2", "--port", str(free_port()),
                     "--database", f"sqlite:///{tmp_path}/sis.db"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "--workers above 1 needs PostgreSQL" in err
    assert not (tmp_path / "sis.db").exists()            # refused before anything was made


async def test_a_worker_killed_mid_batch_loses_nothing(pg_url, photos):  # noqa: F811
    """SIGKILL one of two workers while 32 nodes lease and submit through both: requests in
    flight on it fail (the nodes retry, as the agent does), a lease it granted whose answer
    never arrived lapses and is swept back to the queue by whichever process leads the
    sweeper, the supervisor starts a new worker, and every job ends with one accepted result."""
    jobs = 200
    photos.scatter(*CENTRE, radius_m=950, n=jobs, seed=7)
    workers = Workers(pg_url, photos.api_url, extra_env={"SIS_LEASE_TTL_S": "3", "SIS_LEASE_SWEEP_INTERVAL_S": "0.5"})
    db = Database(pg_url)
    try:
        await workers.ready()
        first = workers.worker_pids()
        c = remote(workers.base_url)
        assert (await request_sweep(c, radius=1000)).json()["jobs"] == jobs
        nodes = await trusted_nodes(c, db)

        submitted = 0
        failed_requests = 0
        killed = asyncio.Event()

        async def unfinished() -> int:
            async with db.read() as s:
                return await s.scalar(select(func.count()).select_from(SweepJob).where(SweepJob.state != "in_review"))

        async def post(path: str, body, headers: dict) -> Response:  # noqa: ANN001
            """A request that died with its worker reads as 599, as Tornado's client says it."""
            try:
                return await c.post(path, body, headers=headers)
            except (HTTPClientError, OSError) as exc:
                return Response(599, {}, str(exc).encode())

        async def work(node: SimNode) -> None:
            nonlocal submitted, failed_requests
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                r = await post("/node/v1/lease", {}, node.auth)
                if r.status >= 500:                      # 599: the connection died with its worker
                    failed_requests += 1
                    await asyncio.sleep(0.05)
                    continue
                if r.status == 204:
                    if not await unfinished():
                        return
                    await asyncio.sleep(0.5)             # orphaned leases come back when they lapse
                    continue
                assert r.status == 200, r.body
                doc = r.json()
                lease_id, body = doc["lease"]["leaseId"], node.honest(doc)
                while True:
                    r = await post(f"/node/v1/leases/{lease_id}/result", json.dumps(body),
                                   {**node.auth, "Content-Type": "application/json"})
                    if r.status >= 500:
                        failed_requests += 1
                        await asyncio.sleep(0.05)
                        continue
                    assert r.status in (200, 409), r.body   # 409: the lease lapsed meanwhile
                    break
                submitted += 1
                if submitted == jobs // 4 and not killed.is_set():
                    killed.set()
                    os.kill(first[0], 9)
            raise AssertionError("the nodes did not finish in 120 s")

        await asyncio.gather(*(work(n) for n in nodes))
        assert killed.is_set()
        async with db.read() as s:
            states = dict((await s.execute(select(SweepJob.state, func.count()).group_by(SweepJob.state))).all())
            accepted = (await s.execute(select(SweepResult.job_id, func.count())
                                        .where(SweepResult.state == "accepted").group_by(SweepResult.job_id))).all()
            lapsed = await s.scalar(select(func.count()).select_from(SweepLease).where(SweepLease.state == "lapsed"))
        print(f"\nworker {first[0]} killed after {jobs // 4} submissions: {failed_requests} requests failed, "
              f"{lapsed} leases lapsed and were swept back; states {states}")
        assert states == {"in_review": jobs}                                   # nothing lost
        assert len(accepted) == jobs and {n for _, n in accepted} == {1}       # nothing counted twice
        now = workers.worker_pids()
        assert len(now) == 2 and first[0] not in now and first[1] in now       # the supervisor restarted it
    finally:
        code = workers.stop()
        await db.close()
    assert code == 0, workers.log()
