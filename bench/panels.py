"""Panel benchmark: the cold first answer and the warm p50/p99 of each credentialed panel route,
beside a Tornado hello-world measured the same way in the same run.

    .venv/bin/python bench/panels.py [--requests 300]

One process holds the fake upstream (the panels' recorded samples), a coordinator on SQLite
with every panel's key set (demo keys the samples answer to), a PB2002 steps file ingested for
/plates, and the hello-world server; requests go one at a time over loopback HTTP (Tornado's
client, a connection per request, the same for the baseline), so the figures are a request's
latency through the whole stack (HTTP, the pipeline's access and caps, the cache) rather than
throughput. "Cold" is the first request of a
route (the upstream read; for /hazard-index the 202 and the polls until 200). The FIRMS clock is
set to the sample's day so /fires serves its detections. Figures are printed; nothing is asserted.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tornado.web  # noqa: E402
from tornado.httpclient import AsyncHTTPClient  # noqa: E402

from coordinator.datasets import ingest  # noqa: E402
from coordinator.demo.upstream import FakeUpstream  # noqa: E402
from coordinator.panels import fires  # noqa: E402
from tests.support import free_port, make_settings, start_coordinator, stop_coordinator  # noqa: E402

ROUTES = ("/hazard-index?lat=-6.1754&lon=106.8272", "/air-quality", "/marine", "/fires?bbox=113.75,-2.5,114,-2.25",
          "/coral?bbox=115,-8.25,115.25,-8", "/plates", "/volcano-alerts")
KEYS = {"firms": {"api_key": "DEMO_MAP_KEY"}, "magma": {"api_key": "bench"}, "waqi": {"api_key": "bench"}}
CLASSES = ("OSR", "OTF", "SUB", "CCB", "CRB", "CTF", "OCB")


class Hello(tornado.web.RequestHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish('{"hello":"world"}')


def steps_file(path: Path, boundaries: int = 230, steps_each: int = 25) -> Path:
    """A PB2002_steps.dat-format file about the size of the model (5,750 steps, 230 boundaries)."""
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    lines, seq = [], 0
    for b in range(boundaries):
        bid = f"{letters[b // 26 % 26]}{letters[b % 26]}-{letters[(b + 7) % 26]}{letters[(b // 3) % 26]}"
        lon, lat = -170 + b * 1.4, -60 + (b % 100) * 1.2
        for i in range(steps_each):
            seq += 1
            cont = ":" if i else " "
            lines.append(f"{seq:4d} {cont}{bid}  {lon + i * 0.1:8.3f} {lat:7.3f}  {lon + (i + 1) * 0.1:8.3f} {lat:7.3f}"
                         f"  11.1  90  20.0  90    1.0    1.0  -3000  10  {CLASSES[b % 7]}")
    path.write_text("\n".join(lines) + "\n")
    return path


async def timed(url: str, n: int) -> dict:
    client = AsyncHTTPClient()
    lat: list[float] = []
    statuses: set[int] = set()
    for _ in range(n):
        t0 = time.perf_counter()
        r = await client.fetch(url, raise_error=False)
        lat.append(time.perf_counter() - t0)
        statuses.add(r.code)
    q = statistics.quantiles(lat, n=100)
    return {"p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000, "statuses": sorted(statuses)}


async def cold(url: str) -> tuple[float, int]:
    """The first answer: for an accepted route, polled until it is not 202."""
    client = AsyncHTTPClient()
    t0 = time.perf_counter()
    while True:
        r = await client.fetch(url, raise_error=False)
        if r.code != 202:
            return (time.perf_counter() - t0) * 1000, r.code
        await asyncio.sleep(0.01)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=300)
    args = ap.parse_args()
    os.environ.setdefault("SIS_LOG_LEVEL", "WARNING")
    fires.utc_now = lambda: datetime(2026, 11, 25, 6, 0, tzinfo=timezone.utc)   # the sample's day

    hello_port = free_port()
    hello = tornado.web.Application([(r"/", Hello)]).listen(hello_port, "127.0.0.1")
    upstream = await FakeUpstream().load_recorded().start()
    tmp = Path(tempfile.mkdtemp(prefix="sis-bench-panels-"))
    c = await start_coordinator(make_settings(f"sqlite+aiosqlite:///{tmp}/sis.db", upstream, sources=KEYS,
                                              bench_unlimited=True))
    try:
        await ingest.run(c.services.db, "pb2002", steps_file(tmp / "PB2002_steps.dat"))
        rows = [("tornado hello-world (baseline)", None, await timed(f"http://127.0.0.1:{hello_port}/", args.requests))]
        for route in ROUTES:
            url = f"{c.base_url}/public/v1/anon{route}"
            first_ms, code = await cold(url)
            rows.append((f"GET {route.split('?')[0]}", (first_ms, code), await timed(url, args.requests)))
        base = rows[0][2]["p50_ms"]
        print(f"\nPanel benchmark: {args.requests} sequential requests per route, in process, "
              f"{os.cpu_count()} cores, python {sys.version.split()[0]}")
        print(f"{'route':32} {'cold ms':>8} {'p50 ms':>8} {'p99 ms':>8} {'p50 vs hello':>13}  statuses")
        for name, first, r in rows:
            cold_txt = f"{first[0]:8.1f}" if first else f"{'-':>8}"
            print(f"{name:32} {cold_txt} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {r['p50_ms'] / base:13.2f}  "
                  f"{','.join(map(str, r['statuses']))}")
    finally:
        await stop_coordinator(c)
        await upstream.stop()
        hello.stop()


if __name__ == "__main__":
    asyncio.run(main())
