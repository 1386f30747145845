"""Queue throughput: leases + submits per second with 32 concurrent nodes, on SQLite and
PostgreSQL, beside a bare claim loop measured in the same run.

Three figures per database, each over the same number of fresh jobs (one photo each,
trusted nodes, so one lease and one submit finish a job):

- bare claim: 32 workers each running only the claim transaction's SQL (pick the oldest
  queued job, FOR UPDATE SKIP LOCKED on PostgreSQL / BEGIN IMMEDIATE on SQLite, mark it
  done) - the database's ceiling for this queue shape;
- service: 32 simulated nodes calling the coordinator's own claim and submit functions
  in process (validation, replica logic, transition log included; no HTTP);
- http: 32 simulated nodes, in a process of their own, speaking the node protocol to a real
  coordinator on loopback (the coordinator's process does only the coordinator's work);
- http floor (once per run): the same nodes against a bare Tornado app that answers a lease
  and a result with canned bodies and does nothing else, the ceiling of the http figures
  on this machine.

The http nodes use the node agent's own protocol client, which keeps its connection
alive between requests as an agent does, and, as the agent does, asks for its next job
with each result (``?next=1``): one request per job after the first lease.

Beside jobs/s, each line gives two figures that load on a shared machine does not
disturb much: SQL statements per job (BEGIN and COMMIT not counted; an executemany counts
as one), and the CPU time of the measuring process per job (for bare and service it
includes the simulated nodes, which run in that process; for http, only the coordinator,
and the line before it gives the node client's process).
On PostgreSQL each line also gives the CPU per job of the server's own processes, where they
run on this machine (read from /proc, ended backends included). Each http line is followed
by where its CPU per job goes (coordinator, node client, PostgreSQL) and the cap that sets on
this machine: with every process sharing the CPUs, jobs/s can be no more than the CPUs'
seconds over the CPU one job costs them all, given as jobs/s, as a ratio to the floor, and
with how near the run came to it (one process and PostgreSQL take turns, so one process
stays near 0.6 of it; docs/node-protocol.md).
Service and http also give the mean number of requests per batch of the coordinator's
group commit (claims, submissions, token lookups; ``coordinator.sweeps.batching``; over
http the claims are the lease route's, each node's first: a result with ``?next=1`` has its
next claim served in its submission batch's transaction), and
each http line is followed by its ratios to the http floor of the run: jobs/s, and the
coordinator's CPU per job over the floor server's.

    .venv/bin/python bench/queue.py [--jobs 1000] [--nodes 32] [--pg URL] [--no-http] [--processes 1,2]

``--processes 1,2`` adds, on PostgreSQL, the http figure served by ``sis serve --workers N``
for each N, in processes of their own (N = 1 a plain ``sis serve``), with the CPU per job
summed across them and the ratios to the bare claim loop and to the http floor of the run.

PostgreSQL is measured in a database of its own, made and dropped by the run, on the
server named by --pg, SIS_BENCH_PG_URL or SIS_TEST_DATABASE_URL, and analysed after each
fill as a running service's autovacuum would have done (``fill``); SQLite in a temporary
file. The first and last lines time a plain Python loop, to tell a slow machine from slow code.
"""
from __future__ import annotations

import os
import sys

# This file is named queue.py, like the standard library module that asyncio and logging
# import: run as a script, its folder must not stand first on the path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import argparse
import asyncio
import json
import socket
import tempfile
import time

import orjson  # noqa: E402
from sqlalchemy import event, text, update  # noqa: E402
from sqlalchemy.ext.asyncio import create_async_engine  # noqa: E402
import tornado.web  # noqa: E402

from bench.speed import machine_speed  # noqa: E402
from coordinator.faces.app import make_app  # noqa: E402
from coordinator.core.db.models import Node, SweepJob  # noqa: E402
from coordinator.demo.photos import DEV_ENGINE_BUILD, FakePhotoProvider, honest_result  # noqa: E402
from coordinator.sweeps import nodes as registry
from coordinator.services import create_services  # noqa: E402
from coordinator.core.settings import Settings  # noqa: E402
from coordinator.core.db.scratch import create_scratch_database, drop_scratch_database  # noqa: E402
from coordinator.sweeps import leases, results  # noqa: E402
from coordinator.sweeps.jobs import job_document  # noqa: E402
from coordinator.sweeps.service import sweeps_of  # noqa: E402

CENTRE = (48.8566, 2.3522)


async def migrate(url: str) -> None:
    if url.startswith("sqlite"):
        return
    from coordinator.core.db import migrate as migrations
    eng = create_async_engine(url)
    try:
        await migrations.upgrade_async(eng, url)
    finally:
        await eng.dispose()


async def coordinator(url: str, photos: FakePhotoProvider):
    await migrate(url)
    # Per-minute windows counted but never refusing: all 32 nodes come from one address here.
    settings = Settings(database_url=url, poll_interval_s=0, engine_builds=DEV_ENGINE_BUILD, job_max_photos=1,
                        bench_unlimited=True,
                        lease_sweep_interval_s=0,
                        sources={"panoramax": {"base_url": photos.api_url}, "gdacs": {"base_url": "http://127.0.0.1:9"},
                                 "usgs": {"base_url": "http://127.0.0.1:9"}})
    return await create_services(settings, start_background=False)


async def fill(services, photos: FakePhotoProvider, n: int, round_: int) -> None:
    """n fresh jobs of one photo each, through a real sweep request. On PostgreSQL the
    tables are then analysed, as autovacuum does within a minute of a service's start:
    the run fills them faster than that, and without statistics the planner takes a table
    of thousands of leases for an empty one and scans it whole (each figure of a run then
    falls below the one before as the tables grow)."""
    from coordinator.sweeps import requests
    lat = CENTRE[0] + round_ * 0.05
    photos.scatter(lat, CENTRE[1], radius_m=950, n=n, seed=100 + round_)
    out = await requests.submit(sweeps_of(services), lat, CENTRE[1], 1000, None)  # no requester: unbounded
    assert out.queued and out.jobs == n, (out.jobs, n)
    if not services.db.is_sqlite:
        async with services.db.write_engine.connect() as conn:
            await conn.execute(text("ANALYZE"))
            await conn.commit()


async def bare_claims(services, workers: int) -> tuple[int, float]:
    db = sweeps_of(services).db      # the same write path as the coordinator's claims
    done = 0

    async def work() -> None:
        nonlocal done
        while True:
            async with db.write() as s:
                q = "SELECT id FROM sweep_jobs WHERE state = 'queued' ORDER BY id LIMIT 1"
                if not db.is_sqlite:
                    q += " FOR UPDATE SKIP LOCKED"
                jid = (await s.execute(text(q))).scalar_one_or_none()
                if jid is None:
                    return
                await s.execute(update(SweepJob).where(SweepJob.id == jid).values(state="in_review"))
            done += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(work() for _ in range(workers)))
    return done, time.perf_counter() - t0


async def trusted_nodes(services, n: int) -> list[tuple[Node, str]]:
    out = []
    for i in range(n):
        node, token = await registry.enrol(services.db, name=f"bench-{i}", platform="bench", gpu="none",
                                           engine_version="0.1.0", engine_build=DEV_ENGINE_BUILD)
        out.append((node, token))
    async with services.db.write() as s:
        await s.execute(update(Node).where(Node.id.in_([n.id for n, _ in out])).values(trusted=True, streak=10))
    for node, _ in out:
        node.trusted = True
    return out


async def service_loop(services, nodes) -> tuple[int, float]:
    sw = sweeps_of(services)
    done = 0

    async def work(node) -> None:
        nonlocal done
        while True:
            claim = await leases.claim(sw, node)
            if claim is None:
                return
            body = orjson.dumps(honest_result(job_document(claim.job).to_dict(), node.id))
            out = await results.submit(sw, node, claim.lease_id, body)
            assert out.job_state == "in_review", out
            done += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(work(n) for n, _ in nodes))
    return done, time.perf_counter() - t0


async def node_client(base: str, nodes: list[list[str]]) -> tuple[int, float]:
    """Simulated nodes speaking the node protocol over HTTP with the node agent's own
    client (``node_agent.protocol.Client``, one per node, each keeping its connection
    alive as an agent does), run in a process of their own."""
    from node_agent.protocol import Client, NoWork
    done = 0

    async def work(node_id: str, token: str) -> None:
        nonlocal done
        async with Client(base, token=token) as client:
            lease = await client.lease()
            while not isinstance(lease, NoWork):
                answer, lease = await client.submit_and_lease(lease.lease_id, honest_result(lease.job, node_id))
                assert answer.get("accepted") and lease is not None, answer
                done += 1

    t0, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(work(n, t) for n, t in nodes))
    return done, time.perf_counter() - t0, time.process_time() - cpu


async def http_loop(services, nodes) -> tuple[int, float]:
    """The coordinator serves in this process; the nodes run in another, as they would."""
    return await _serve_nodes(make_app(services), [[n.id, t] for n, t in nodes])


class _Canned(tornado.web.RequestHandler):
    """A lease, or a result's answer with the next lease in it (``null`` once ``left`` is spent)."""

    def initialize(self, state: dict) -> None:
        self.state = state

    def _next(self) -> bytes:
        if self.state["left"] <= 0:
            return b"null"
        self.state["left"] -= 1
        return self.state["lease"]

    def post(self, lease: str | None = None) -> None:
        nxt = self._next()
        if lease is None and nxt == b"null":
            self.set_status(204)
            return
        self.set_header("Content-Type", "application/json")
        self.finish(nxt if lease is None else
                    b'{"accepted":true,"resultState":"accepted","jobState":"in_review","reasons":[],'
                    b'"duplicate":false,"next":' + nxt + b"}")


FLOOR: list[float] = []     # the http floor of this run, jobs/s
FLOOR_CPU: list[float] = []  # and its server's CPU per job, ms
CLIENT_CPU: list[float] = []  # the node client's CPU per job in each http run, ms (the floor's first)


async def http_floor(jobs: int, workers: int) -> None:
    """The same node client against a bare Tornado app that answers a lease and a result
    (with the next lease in it) with canned bodies of the real size and does nothing else: what this machine's HTTP
    costs two processes before the coordinator does any work (the ceiling of the http
    figures)."""
    photo = {"id": "syn-0", "lon": CENTRE[1], "lat": CENTRE[0], "capturedAt": "2026-06-01T08:00:00+00:00",
             "width": 2048, "height": 1024, "url": "http://127.0.0.1:9/api/pictures/syn-0/hd.jpg",
             "license": "CC-BY-SA-4.0", "provider": "fake", "heading": 90.0}
    lease = orjson.dumps({"lease": {"leaseId": "ls_0", "expiresAt": "2026-06-01T08:10:00Z", "ttlS": 600},
                          "job": {"schemaVersion": 1, "jobId": "job-1", "sweepId": "sw_0", "photos": [photo],
                                  "area": {"type": "Polygon", "coordinates": []}, "centerLon": CENTRE[1],
                                  "centerLat": CENTRE[0], "radiusM": 80.0, "params": {}}})
    state = {"left": jobs, "lease": lease}
    app = tornado.web.Application([(r"/node/v1/lease", _Canned, {"state": state}),
                                   (r"/node/v1/leases/([^/]+)/result", _Canned, {"state": state})])
    cpu = time.process_time()
    done, secs = await _serve_nodes(app, [[f"nd_{i}", "token"] for i in range(workers)])
    FLOOR.append(done / secs)
    FLOOR_CPU.append(1000 * (time.process_time() - cpu) / done)
    print(f"{'http floor':21} {done:6d} jobs in {secs:6.2f} s = {done / secs:8.1f} jobs/s ({workers} concurrent; "
          f"a bare Tornado app answering canned bodies, {FLOOR_CPU[0]:4.1f} ms CPU per "
          "job: the ceiling of the http figures on this machine)", flush=True)


def _free_port() -> int:
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]


async def _serve_nodes(app, nodes: list[list[str]]) -> tuple[int, float]:
    """Serve ``app`` on loopback to the node client, run in a process of its own."""
    port = _free_port()
    server = app.listen(port, "127.0.0.1")
    try:
        return await _run_client(f"http://127.0.0.1:{port}", nodes)
    finally:
        server.stop()
        await server.close_all_connections()


async def _run_client(base: str, nodes: list[list[str]]) -> tuple[int, float]:
    """The node client, in a process of its own, against ``base``."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(nodes, f)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, os.path.abspath(__file__), "--client", base, "--tokens", f.name,
        stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    os.unlink(f.name)
    if proc.returncode != 0:
        raise RuntimeError(f"the node client failed ({proc.returncode})")
    doc = json.loads(out.decode().strip().splitlines()[-1])
    CLIENT_CPU.append(1000 * doc["cpu"] / max(1, doc["done"]))
    print(f"           (the node client's own process: {CLIENT_CPU[-1]:.1f} ms CPU per job)", flush=True)
    return doc["done"], doc["seconds"]


def postgres_cpu_s() -> float | None:
    """CPU seconds used so far by this machine's PostgreSQL: its live processes, and the
    backends that have ended (counted in the postmaster's children's time). None where no
    PostgreSQL process is visible (a server on another machine, or one /proc hides)."""
    procs = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            name, fields = _stat(int(pid))
        except (OSError, IndexError, ValueError):
            continue
        if name == "postgres":
            procs[int(pid)] = fields
    if not procs:
        return None
    ticks = 0
    for fields in procs.values():
        ticks += int(fields[11]) + int(fields[12])
        if int(fields[1]) not in procs:             # the postmaster: add its ended children
            ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def _per_job_ms(before: float | None, after: float | None, done: int) -> float | None:
    return None if before is None or after is None else 1000 * (after - before) / max(1, done)


def cpu_budget(rate: float, coordinator_ms: float, client_ms: float, postgres_ms: float | None,
               sqlite: bool = False) -> str:
    """Where an http figure's CPU goes, beside the floor's, and the most this machine's CPUs
    allow: every process of the run (coordinator, node client, PostgreSQL) shares them, so
    jobs/s can be no more than the CPUs' seconds over the CPU a job costs them all, however
    the work overlaps. SQLite's work is in the coordinator's process; a PostgreSQL on
    another machine is not counted."""
    total = coordinator_ms + client_ms + (postgres_ms or 0.0)
    floor = FLOOR_CPU[0] + CLIENT_CPU[0]
    cpus = os.cpu_count() or 1
    return (f"CPU per job: coordinator {coordinator_ms:.2f} + node client {client_ms:.2f}"
            + ("" if sqlite else f" + PostgreSQL {postgres_ms:.2f}" if postgres_ms is not None
               else " (PostgreSQL's own not seen: not on this machine)")
            + f" = {total:.2f} ms (the floor's {floor:.2f}); {cpus} CPUs cap that at {1000 * cpus / total:.0f} "
            f"jobs/s, {1000 * cpus / total / FLOOR[0]:.2f} of the floor's jobs/s; this ran at "
            f"{rate / (1000 * cpus / total):.2f} of its cap, the floor at "
            f"{FLOOR[0] / (1000 * cpus / floor):.2f} of its own")


def _stat(pid: int) -> tuple[str, list[str]]:
    """A process's name and the fields of /proc/PID/stat after it (state first)."""
    with open(f"/proc/{pid}/stat") as f:
        name, rest = f.read().split(" (", 1)[1].rsplit(")", 1)
    return name, rest.split()


def _cpu_s(pid: int) -> float:
    fields = _stat(pid)[1]
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def served_loop(url: str, photos: FakePhotoProvider, nodes, processes: int) -> tuple[int, float, float]:
    """The nodes over HTTP against ``sis serve --workers N`` in processes of its own (N = 1 is a
    plain ``sis serve``): jobs, seconds, and the CPU seconds of the serving processes."""
    port = _free_port()
    env = {**os.environ, "SIS_DATABASE_URL": url, "SIS_ENGINE_BUILDS": DEV_ENGINE_BUILD, "SIS_JOB_MAX_PHOTOS": "1",
           "SIS_POLL_INTERVAL_S": "0", "SIS_LEASE_SWEEP_INTERVAL_S": "0", "SIS_LOG_LEVEL": "WARNING",
           "SIS_SOURCES__PANORAMAX__BASE_URL": photos.api_url, "SIS_BENCH_UNLIMITED": "1"}
    env.pop("SIS_REDIS_URL", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "coordinator.cli", "serve", "--workers", str(processes), "--port", str(port),
        cwd=os.path.dirname(_HERE), env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        ready = 0
        while ready < processes:
            line = (await asyncio.wait_for(proc.stdout.readline(), 120)).decode()
            if not line:
                raise RuntimeError("sis serve ended before serving")
            ready += "serving on" in line and (processes == 1 or " worker " in line)
        pids = [proc.pid] if processes == 1 else [
            int(p) for p in open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split()]
        said: list[str] = []

        async def drain() -> None:      # read what it says, so that a full pipe never holds it up
            while line := await proc.stdout.readline():
                said.append(line.decode())

        reader = asyncio.create_task(drain())
        cpu0 = sum(_cpu_s(p) for p in pids)
        done, secs = await _run_client(f"http://127.0.0.1:{port}", [[n.id, t] for n, t in nodes])
        cpu = sum(_cpu_s(p) for p in pids) - cpu0
        if said:
            print(f"           (sis serve logged {len(said)} lines, the first: {said[0].strip()[:160]})", flush=True)
        return done, secs, cpu
    finally:
        proc.terminate()
        await proc.wait()
        if "reader" in locals():
            await reader


class StatementCount:
    """SQL statements sent (BEGIN and COMMIT not included), a measure that load on a shared
    machine does not disturb."""

    def __init__(self, db) -> None:
        self.n = 0
        for eng in {id(e): e for e in (db.engine, db.write_engine)}.values():
            event.listen(eng.sync_engine, "before_cursor_execute", self._count)

    def _count(self, *_a) -> None:
        self.n += 1


class BatchSizes:
    """Mean requests per batch of the coordinator's batchers since this was made."""

    def __init__(self, services) -> None:
        sw = sweeps_of(services)
        self.batchers = {"claims": sw.claims, "submits": sw.submits, "tokens": sw.tokens}
        self.start = {k: (b.batches, b.requests) for k, b in self.batchers.items()}

    def since(self) -> str:
        parts = []
        for k, b in self.batchers.items():
            n, r = b.batches - self.start[k][0], b.requests - self.start[k][1]
            if n:
                parts.append(f"{k} {r / n:.1f}")
        return "; per batch: " + ", ".join(parts) if parts else ""


async def bench_one(label: str, url: str, jobs: int, workers: int, http: bool,
                    processes: list[int] | None = None) -> dict:
    photos = await FakePhotoProvider().start()
    services = await coordinator(url, photos)
    statements = StatementCount(services.db)
    figures = {}
    try:
        nodes = await trusted_nodes(services, workers)
        runs = [("bare claim", lambda: bare_claims(services, workers)),
                ("service", lambda: service_loop(services, nodes))]
        if http:
            runs.append(("http", lambda: http_loop(services, nodes)))
        for i, (name, fn) in enumerate(runs):
            await fill(services, photos, jobs, i)
            before, cpu, batched = statements.n, time.process_time(), BatchSizes(services)
            pg = postgres_cpu_s() if not services.db.is_sqlite else None
            done, secs = await fn()
            cpu = time.process_time() - cpu
            pg_ms = _per_job_ms(pg, postgres_cpu_s(), done)
            assert done == jobs, (name, done, jobs)
            figures[name] = done / secs
            print(f"{label:10} {name:11} {done:6d} jobs in {secs:6.2f} s = {done / secs:8.1f} jobs/s "
                  f"({workers} concurrent; {(statements.n - before) / done:5.1f} SQL statements per job, "
                  f"{1000 * cpu / done:4.1f} ms CPU per job"
                  + (f", PostgreSQL's {pg_ms:.1f}" if pg_ms is not None else "") + f"{batched.since()})", flush=True)
            if name == "http" and FLOOR:
                print(f"{'':10} {'':11} over http: {figures[name] / FLOOR[0]:.2f} of the http floor's jobs/s, "
                      f"{1000 * cpu / done / FLOOR_CPU[0]:.1f} times its CPU per job", flush=True)
                budget = cpu_budget(figures[name], 1000 * cpu / done, CLIENT_CPU[-1], pg_ms, services.db.is_sqlite)
                print(f"{'':10} {'':11} {budget}", flush=True)
        for j, n in enumerate(processes or []):
            await fill(services, photos, jobs, len(runs) + j)
            pg = postgres_cpu_s()
            done, secs, cpu = await served_loop(url, photos, nodes, n)
            pg_ms = _per_job_ms(pg, postgres_cpu_s(), done)
            assert done == jobs, (n, done, jobs)
            name = f"http x{n}"
            figures[name] = done / secs
            print(f"{label:10} {name:11} {done:6d} jobs in {secs:6.2f} s = {done / secs:8.1f} jobs/s "
                  f"({workers} concurrent; `sis serve --workers {n}` in processes of its own, "
                  f"{1000 * cpu / done:4.1f} ms CPU per job across them; "
                  f"{figures[name] / figures['bare claim']:.2f} of the bare claim loop"
                  + (f", {figures[name] / FLOOR[0]:.2f} of the http floor)" if FLOOR else ")"), flush=True)
            if FLOOR:
                budget = cpu_budget(figures[name], 1000 * cpu / done, CLIENT_CPU[-1], pg_ms)
                print(f"{'':10} {'':11} {budget}", flush=True)
    finally:
        await services.close()
        await photos.stop()
    return figures


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--pg", default=os.environ.get("SIS_BENCH_PG_URL") or os.environ.get("SIS_TEST_DATABASE_URL", ""))
    ap.add_argument("--no-http", action="store_true")
    ap.add_argument("--only", choices=("sqlite", "postgres"))
    ap.add_argument("--processes", default="",
                    help="on PostgreSQL, also serve the http nodes from `sis serve --workers N` for each "
                         "comma-separated N (e.g. 1,2), each in processes of its own")
    ap.add_argument("--client", help=argparse.SUPPRESS)     # internal: run the HTTP nodes against this URL
    ap.add_argument("--tokens", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client:
        with open(args.tokens) as f:
            done, secs, cpu = await node_client(args.client, json.load(f))
        print(json.dumps({"done": done, "seconds": secs, "cpu": cpu}))
        return 0
    print(f"bench/queue.py: {args.jobs} jobs per figure, {args.nodes} concurrent nodes, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f} at start; a 5 M-addition loop takes {machine_speed():.2f} s")
    if not args.no_http:
        await http_floor(args.jobs, args.nodes)
    if args.only != "postgres":
        with tempfile.TemporaryDirectory() as d:
            await bench_one("sqlite", f"sqlite+aiosqlite:///{d}/bench.db", args.jobs, args.nodes, not args.no_http)
    if args.only != "sqlite":
        if not args.pg:
            print("postgres   skipped: name a server with --pg or SIS_TEST_DATABASE_URL")
        else:
            url = await create_scratch_database(args.pg, "sis_bench")
            try:
                await bench_one("postgres", url, args.jobs, args.nodes, not args.no_http,
                                [int(n) for n in args.processes.split(",") if n])
            finally:
                await drop_scratch_database(url)
    print(f"load average {os.getloadavg()[0]:.1f} and a 5 M-addition loop {machine_speed():.2f} s at the end "
          "(other work on this machine slows every figure alike; compare figures within one run)")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
