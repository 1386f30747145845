"""Seen layer latency: GET /earth/seen with 1,000,000 approved facts loaded, on SQLite and
PostgreSQL. Prints p50/p99 latency and requests/s per radius.

    .venv/bin/python bench/seen.py [--facts 1000000] [--requests 1000] [--threads 4] [--layout jobs|uniform]
                                   [--pg URL] [--no-pg] [--no-sqlite]

The facts are spread evenly over a 0.5 x 0.5 degree square around Paris (about
2,000 km^2, some 500 facts per km^2: a densely swept city), in the ten kinds; every
H3 cell of the square is marked covered, so every answer is ``covered: true`` and
reads the coverage table as well as the facts. They are stored as the service
stores them (``--layout jobs``): an approved job's 50 facts together, within
120 m of each other, jobs in random places one after another; ``--layout uniform``
puts every fact anywhere in random order instead, the worst case for locality in
the tables. They are bulk loaded (executemany on SQLite, COPY then VACUUM ANALYZE
on PostgreSQL) after the schema is migrated, straight into ``seen_facts``, and their
tiles are made from it as migration 0007 makes them (``seen.tiles.rebuild``).

The coordinator under test is a real ``sis serve`` in a subprocess; the client sends
requests for random points in the square over keep-alive HTTP/1.1 connections from
this process: one connection in turn for latency, ``--threads`` connections at once
for throughput. Each radius (100, 450 = default, 1500 m) is measured apart; answers
over ``seen_max_facts`` (1000) are truncated to the nearest, which bounds latency.

PostgreSQL is measured in a database of its own, made and dropped by the run, on the
server named by --pg, SIS_BENCH_PG_URL or SIS_TEST_DATABASE_URL; SQLite in a temporary file.
"""
from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import math
import os
import random
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone

# bench/ holds a queue.py, which would shadow the standard library's: keep bench/ off the path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import h3  # noqa: E402
from sqlalchemy import create_engine  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402
from sqlalchemy.ext.asyncio import create_async_engine  # noqa: E402

from bench.speed import machine_speed  # noqa: E402
from coordinator.core.db import migrate as migrations  # noqa: E402
from coordinator.core.db.scratch import create_scratch_database, drop_scratch_database  # noqa: E402
from coordinator.seen import tiles  # noqa: E402
from coordinator.seen.publish import fact_doc  # noqa: E402
from coordinator.sweeps.coverage import RESOLUTION  # noqa: E402
from sweep_engine.schema import FACT_KINDS, PRIMARY_KEY  # noqa: E402

LAT0, LON0, SPAN = 48.60, 2.10, 0.5
RADII = (100, 450, 1500)
FACT_COLS = ("cell", "kind", "lat", "lon", "value", "unit", "confidence", "basis", "photos", "provider", "license",
             "observed_at", "job_id", "sweep_id", "doc", "approved_at")


JOB_FACTS, JOB_RADIUS_M = 50, 120


def facts(n: int, seed: int = 7, layout: str = "jobs"):
    """``n`` facts over the square. ``jobs`` (default) stores them as the service does:
    an approved job's facts are inserted together and lie near each other (a job is a
    few photos a few hundred metres apart), jobs in random places one after another.
    ``uniform`` draws every fact anywhere, in random order: the worst case for the
    database, whose rows of one neighbourhood then lie all over the file."""
    rng = random.Random(seed)
    at = datetime(2026, 11, 1, tzinfo=timezone.utc)
    m_lat = 111_195.0
    m_lon = m_lat * math.cos(math.radians(LAT0 + SPAN / 2))
    clat = clon = 0.0
    for i in range(n):
        if layout == "uniform":
            lat, lon = LAT0 + rng.random() * SPAN, LON0 + rng.random() * SPAN
        else:
            if i % JOB_FACTS == 0:
                clat, clon = LAT0 + rng.random() * SPAN, LON0 + rng.random() * SPAN
            while True:
                dy, dx = rng.uniform(-1, 1) * JOB_RADIUS_M, rng.uniform(-1, 1) * JOB_RADIUS_M
                lat, lon = clat + dy / m_lat, clon + dx / m_lon
                if LAT0 <= lat <= LAT0 + SPAN and LON0 <= lon <= LON0 + SPAN:
                    break
        kind = FACT_KINDS[i % len(FACT_KINDS)]
        cell = h3.str_to_int(h3.latlng_to_cell(lat, lon, RESOLUTION))
        row = {"kind": kind, "lat": lat, "lon": lon, "value": {PRIMARY_KEY[kind]: round(1 + rng.random() * 8, 2)},
               "unit": "m", "confidence": "high" if i % 3 else "low", "basis": "measured" if i % 4 else "modelled",
               "photos": [f"p{i}"], "provider": "panoramax", "license": "CC-BY-SA-4.0",
               "observed_at": "2026-06-01T08:00:00Z", "sweep_id": "sr_bench"}
        yield (cell, kind, lat, lon, json.dumps(row["value"]), row["unit"], row["confidence"], row["basis"],
               json.dumps(row["photos"]), row["provider"], row["license"], row["observed_at"], i // JOB_FACTS + 1,
               row["sweep_id"], fact_doc(row), at)


def square_cells() -> list[int]:
    ring = [(LAT0, LON0), (LAT0, LON0 + SPAN), (LAT0 + SPAN, LON0 + SPAN), (LAT0 + SPAN, LON0)]
    cells = h3.polygon_to_cells(h3.LatLngPoly(ring), RESOLUTION)
    # and the cells at the edge, so that circles near the edge are covered too
    return sorted({h3.str_to_int(n) for c in cells for n in h3.grid_disk(c, 1)})


def load_sqlite(path: str, n: int, layout: str) -> None:
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=OFF")
    at = datetime(2026, 11, 1, tzinfo=timezone.utc).isoformat()
    batch = []
    q = f"INSERT INTO seen_facts ({','.join(FACT_COLS)}) VALUES ({','.join('?' * len(FACT_COLS))})"
    for row in facts(n, layout=layout):
        batch.append(row[:-1] + (at,))
        if len(batch) == 50_000:
            con.executemany(q, batch)
            batch.clear()
    if batch:
        con.executemany(q, batch)
    con.executemany("INSERT INTO coverage_cells (cell, state, request_id, updated_at, covered_at) "
                    "VALUES (?, 'covered', NULL, ?, ?)", [(c, at, at) for c in square_cells()])
    con.commit()
    con.close()
    eng = create_engine(make_url(f"sqlite:///{path}"))
    with eng.begin() as conn:
        tiles.rebuild(conn)
        conn.exec_driver_sql("ANALYZE")
    eng.dispose()


async def load_postgres(url: str, n: int, layout: str) -> None:
    import asyncpg
    u = make_url(url)
    con = await asyncpg.connect(user=u.username, password=u.password, host=u.host, port=u.port or 5432,
                                database=u.database)
    try:
        rows = list(facts(n, layout=layout))
        await con.copy_records_to_table("seen_facts", records=rows, columns=list(FACT_COLS))
        at = datetime(2026, 11, 1, tzinfo=timezone.utc)
        await con.copy_records_to_table("coverage_cells", records=[(c, "covered", None, at, at) for c in square_cells()],
                                        columns=["cell", "state", "request_id", "updated_at", "covered_at"])
    finally:
        await con.close()
    eng = create_async_engine(url)
    try:
        async with eng.begin() as conn:
            await conn.run_sync(tiles.rebuild)
        async with eng.connect() as conn:
            # What autovacuum gives a live database: statistics, and the visibility map that
            # lets index scans be index-only.
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.exec_driver_sql("VACUUM ANALYZE")
    finally:
        await eng.dispose()


async def migrate(url: str) -> None:
    eng = create_async_engine(url)
    try:
        await migrations.upgrade_async(eng, url)
    finally:
        await eng.dispose()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(url: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = {**os.environ, "SIS_POLL_INTERVAL_S": "0", "SIS_LEASE_SWEEP_INTERVAL_S": "0", "SIS_LOG_LEVEL": "WARNING",
           "SIS_PHOTO_PROVIDER_BASE_URL": "http://127.0.0.1:9/api",
           # One client IP sends every request: the per-IP limit counts but never refuses.
           "SIS_BENCH_UNLIMITED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "coordinator.cli", "serve", "--port", str(port),
                             "--database", url], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/healthz")
            if c.getresponse().status == 200:
                return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the coordinator did not start:\n" + proc.stdout.read().decode(errors="replace"))


def points(k: int, radius: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    my = radius / 111_000 + 0.002
    mx = radius / (111_000 * math.cos(math.radians(LAT0 + SPAN))) + 0.002
    return [f"/earth/seen?lat={LAT0 + my + rng.random() * (SPAN - 2 * my):.6f}"
            f"&lon={LON0 + mx + rng.random() * (SPAN - 2 * mx):.6f}&radius={radius}" for _ in range(k)]


def run_one(conn: http.client.HTTPConnection, path: str, out: list[float], sizes: list[tuple[int, bool, bool]]) -> None:
    t = time.perf_counter()
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read()
    out.append(time.perf_counter() - t)
    if r.status != 200:
        raise SystemExit(f"{path}: HTTP {r.status} {body[:300]!r}")
    doc = json.loads(body)
    sizes.append((doc["count"], doc["covered"], doc["truncated"]))


def measure(port: int, radius: int, n: int, threads: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for p in points(50, radius, 1):                     # warm up
        run_one(conn, p, [], [])
    lat: list[float] = []
    sizes: list[tuple[int, bool, bool]] = []
    for p in points(n, radius, 2):
        run_one(conn, p, lat, sizes)
    conn.close()
    lat.sort()
    paths = points(n, radius, 3)
    share = [paths[i::threads] for i in range(threads)]
    done: list[float] = []

    def worker(ps: list[str]) -> None:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for p in ps:
            run_one(c, p, done, [])
        c.close()

    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker, args=(s,)) for s in share]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    return {"radius": radius, "p50_ms": lat[len(lat) // 2] * 1000, "p99_ms": lat[int(len(lat) * 0.99) - 1] * 1000,
            "mean_ms": statistics.fmean(lat) * 1000, "rps_1": n / sum(lat), "rps_n": len(done) / wall,
            "facts_mean": statistics.fmean(s[0] for s in sizes),
            "covered": all(s[1] for s in sizes), "truncated_share": sum(s[2] for s in sizes) / len(sizes)}


def report(label: str, load_s: float, rows: list[dict], threads: int, speeds: tuple[float, float]) -> None:
    la = os.getloadavg()
    print(f"\n{label}: load {load_s:.1f} s; machine load average now {la[0]:.1f} / {la[1]:.1f} / {la[2]:.1f} "
          f"on {os.cpu_count()} cpus (other work on the machine inflates these figures); a 5 M-addition loop "
          f"took {speeds[0]:.2f} s before the requests and {speeds[1]:.2f} s after")
    print(f"  {'radius':>6} {'p50 ms':>7} {'p99 ms':>7} {'mean ms':>8} {'req/s (1 conn)':>15} "
          f"{f'req/s ({threads} conns)':>16} {'facts/answer':>13} {'truncated':>9} covered")
    for r in rows:
        print(f"  {r['radius']:6d} {r['p50_ms']:7.2f} {r['p99_ms']:7.2f} {r['mean_ms']:8.2f} {r['rps_1']:15.0f} "
              f"{r['rps_n']:16.0f} {r['facts_mean']:13.0f} {r['truncated_share']:9.0%} {r['covered']}")


def bench(label: str, url: str, load, args) -> None:
    t = time.perf_counter()
    load()
    load_s = time.perf_counter() - t
    proc, port = serve(url)
    try:
        before = machine_speed()
        rows = [measure(port, r, args.requests, args.threads) for r in RADII]
        after = machine_speed()
    finally:
        proc.terminate()
        proc.wait(10)
    report(label, load_s, rows, args.threads, (before, after))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--facts", type=int, default=1_000_000)
    ap.add_argument("--requests", type=int, default=1000, help="requests per radius, per measure")
    ap.add_argument("--threads", type=int, default=4, help="connections at once for the throughput figure")
    ap.add_argument("--pg", default=os.environ.get("SIS_BENCH_PG_URL") or os.environ.get("SIS_TEST_DATABASE_URL"))
    ap.add_argument("--no-pg", action="store_true")
    ap.add_argument("--no-sqlite", action="store_true")
    ap.add_argument("--layout", choices=("jobs", "uniform"), default="jobs",
                    help="how facts lie in the tables: by job as the service stores them (default), or each "
                         "anywhere in random order (the worst case)")
    args = ap.parse_args()
    print(f"seen layer bench: {args.facts:,} facts over {SPAN} x {SPAN} deg, layout {args.layout}, "
          f"{args.requests} requests per radius, cpu count {os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    if not args.no_sqlite:
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite+aiosqlite:///{tmp}/seen.db"
            asyncio.run(migrate(url))
            bench("SQLite", url, lambda: load_sqlite(f"{tmp}/seen.db", args.facts, args.layout), args)
    if args.pg and not args.no_pg:
        url = asyncio.run(create_scratch_database(args.pg, "sis_bench_seen"))
        try:
            asyncio.run(migrate(url))
            bench("PostgreSQL", url, lambda: asyncio.run(load_postgres(url, args.facts, args.layout)), args)
        finally:
            asyncio.run(drop_scratch_database(url))
    elif not args.no_pg:
        print("\nPostgreSQL: skipped (no --pg, SIS_BENCH_PG_URL or SIS_TEST_DATABASE_URL)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
