"""Briefs and site benchmark: event_brief cold and warm, site_intel cold at radius 3000 and
site_scan at the largest bbox (0.05 degrees), each through a real coordinator on loopback,
beside a hello-world Tornado handler on loopback measured in the same run (the baseline:
what any HTTP round trip costs here). Figures are printed as p50/p99 and as ratios to the
baseline's p50; nothing is asserted.

    .venv/bin/python bench/briefs.py [--side 0.1] [--trees 10] [--places 50000] [--n 20]
        [--postgres postgresql+asyncpg://postgres@127.0.0.1:5432/sis_bench]

The ground is the synthetic town (coordinator/features/synthetic.py) repeated over the
event's square (``--side`` degrees, the brief's area: SIS_EVENT_SQUARE_DEG), ``--places``
Overture-shaped places over it, and a 3-arc-second population grid (an Esri ASCII grid) over
it; the event is the GDACS flood of the recorded sample, served with the USGS feed and a
FIRMS CSV by the fake upstream on loopback. Cold requests clear the answer cache first;
site_intel and site_scan ask at random points and boxes inside the square.
"""
from __future__ import annotations

import argparse
import asyncio
import random
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)      # not bench/, whose queue.py would shadow the standard library

import tornado.web  # noqa: E402
from tornado.httpclient import AsyncHTTPClient  # noqa: E402

from coordinator.core.settings import Settings  # noqa: E402
from coordinator.datasets import ingest  # noqa: E402
from coordinator.demo.upstream import Canned, FakeUpstream  # noqa: E402
from coordinator.faces.app import make_app  # noqa: E402
from coordinator.features import synthetic  # noqa: E402
from coordinator.services import create_services  # noqa: E402
from coordinator.sources.registry import load_adapters  # noqa: E402

LAT, LON = -7.25, 112.75          # the recorded GDACS flood gdacs:FL:1103377
EVENT = "gdacs:FL:1103377"
CELL = 1 / 1200                   # 3 arc-seconds, WorldPop's resolution


def port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


class Hello(tornado.web.RequestHandler):
    def get(self) -> None:
        self.write({"hello": "world"})


def write_grid(path: Path, half: float) -> None:
    n = int(round(2 * half / CELL))
    rnd = random.Random(3)
    with open(path, "w") as f:
        f.write(f"ncols {n}\nnrows {n}\nxllcorner {LON - half!r}\nyllcorner {LAT - half!r}\ncellsize {CELL!r}\n"
                "NODATA_value -9999\n")
        for _ in range(n):
            f.write(" ".join(f"{rnd.random() * 80:.2f}" for _ in range(n)) + "\n")


async def timed(http: AsyncHTTPClient, url: str, before=None) -> float:  # noqa: ANN001
    if before is not None:
        before()
    t = time.perf_counter()
    r = await http.fetch(url, raise_error=False, request_timeout=120)
    took = (time.perf_counter() - t) * 1000
    if r.code != 200:
        raise SystemExit(f"{url}: HTTP {r.code} {r.body[:300]!r}")
    return took


def line(label: str, xs: list[float], base: float) -> None:
    p50, p99 = statistics.median(xs), pct(xs, 0.99)
    print(f"  {label:<40} p50 {p50:9.2f} ms  p99 {p99:9.2f} ms  ({p50 / base:8.1f} x baseline)")


async def run(url: str, files: dict, args: argparse.Namespace, tmp: Path) -> None:
    fake = await FakeUpstream().load_recorded().start()
    half = args.side / 2
    bbox = f"{LON - half:g},{LAT - half:g},{LON + half:g},{LAT + half:g}"
    csv = ("latitude,longitude,bright_ti4,scan,track,acq_date,acq_time,satellite,instrument,confidence,version,"
           "bright_ti5,frp,daynight\n" + "".join(
               f"{LAT + (i % 7 - 3) * half / 4:.4f},{LON + (i % 5 - 2) * half / 3:.4f},330.1,0.4,0.4,2026-10-05,"
               f"{100 + i},N,VIIRS,n,2.0NRT,290.0,{i % 9 + 1}.5,D\n" for i in range(40)))
    from coordinator.panels.fires import _deg
    w, s, e, n = LON - half, LAT - half, LON + half, LAT + half
    fake.set(f"/firms/BENCH_KEY/VIIRS_SNPP_NRT/{_deg(round(w, 6))},{_deg(round(s, 6))},{_deg(round(e, 6))},"
             f"{_deg(round(n, 6))}/2", Canned(200, csv.encode(), "text/csv"))
    sources = {name: {"base_url": f"{fake.base_url}/{name}"} for name in load_adapters()}
    sources["firms"]["api_key"] = "BENCH_KEY"
    settings = Settings(database_url=url, sources=sources, poll_interval_s=0, event_square_deg=args.side,
                        data_dir=str(tmp / "data"), source_timeout_s=10)
    services = await create_services(settings, None, start_background=False)
    db = services.db
    t = time.perf_counter()
    for kind in ("osm", "places", "population"):
        v = await ingest.run(db, kind, files[kind], data_dir=settings.data_dir)
        print(f"  loaded {kind}: {v.records:,} records")
    print(f"  (loads took {time.perf_counter() - t:.1f} s)")
    from coordinator.hazards import history
    await history.poll_once(db, services.sources)
    app = make_app(services)
    p = port()
    server = app.listen(p, "127.0.0.1")
    hello_port = port()
    hello = tornado.web.Application([(r"/", Hello)]).listen(hello_port, "127.0.0.1")
    http = AsyncHTTPClient(force_instance=True)
    base = f"http://127.0.0.1:{p}"
    rnd = random.Random(11)
    try:
        for _ in range(5):
            await timed(http, f"http://127.0.0.1:{hello_port}/")
        baseline = [await timed(http, f"http://127.0.0.1:{hello_port}/") for _ in range(args.n * 5)]
        b50 = statistics.median(baseline)
        print(f"\n  bbox {bbox} ({args.side} deg)")
        line("baseline: hello world (loopback)", baseline, b50)
        brief = f"{base}/earth/event-brief?id={EVENT}"
        body = (await http.fetch(brief)).body
        if b'"degraded":true' in body:
            raise SystemExit(f"the brief is degraded: {body[-800:]!r}")
        cold = [await timed(http, brief, services.cache.clear) for _ in range(args.n)]
        line("event_brief cold", cold, b50)
        warm = [await timed(http, brief) for _ in range(args.n * 5)]
        line("event_brief warm (cached)", warm, b50)

        def point(margin: float) -> tuple[float, float]:
            return (LAT + (rnd.random() * 2 - 1) * (half - margin), LON + (rnd.random() * 2 - 1) * (half - margin))

        intel = []
        for _ in range(args.n):
            la, lo = point(0.03)
            intel.append(await timed(http, f"{base}/earth/site-intel?lat={la:.6f}&lon={lo:.6f}&radius=3000",
                                     services.cache.clear))
        line("site_intel cold, radius 3000", intel, b50)
        scans = []
        for _ in range(max(3, args.n // 2)):
            la, lo = point(0.03)
            box = f"{lo - 0.025:.6f},{la - 0.025:.6f},{lo + 0.025:.6f},{la + 0.025:.6f}"
            scans.append(await timed(http, f"{base}/earth/site-scan?bbox={box}", services.cache.clear))
        line("site_scan cold, 0.05 x 0.05 deg", scans, b50)
        scan_body = (await http.fetch(f"{base}/earth/site-scan?bbox={box}")).body
        import json
        doc = json.loads(scan_body)
        print(f"  (a scan: {doc['count']} cells, {doc['scored']} scored)")
    finally:
        http.close()
        server.stop()
        hello.stop()
        await services.close()
        await fake.stop()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--side", type=float, default=0.1, help="the event square's side in degrees (the brief's area)")
    ap.add_argument("--trees", type=int, default=10, help="trees per block of the synthetic town")
    ap.add_argument("--places", type=int, default=50_000)
    ap.add_argument("--n", type=int, default=20, help="requests per figure")
    ap.add_argument("--postgres", default="", help="also run on this PostgreSQL URL (its public schema is reset)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        half = args.side / 2
        files = {"osm": tmp / "area.osm.pbf", "places": tmp / "places.parquet", "population": tmp / "pop.asc"}
        t = time.perf_counter()
        counts = synthetic.write_extract(files["osm"], (LAT, LON), half_deg=half, trees_per_block=args.trees)
        synthetic.write_geoparquet(files["places"], synthetic.places((LAT, LON), args.places, half_deg=half + 0.001))
        write_grid(files["population"], half + 0.002)
        print(f"files written in {time.perf_counter() - t:.1f} s: {sum(counts.values()):,} OSM features, "
              f"{args.places:,} places")
        print("\n[sqlite]")
        await run(f"sqlite+aiosqlite:///{tmp}/bench.db", files, args, tmp / "sqlite")
        if args.postgres:
            import sqlalchemy as sa
            from sqlalchemy.ext.asyncio import create_async_engine
            eng = create_async_engine(args.postgres)
            async with eng.begin() as conn:
                await conn.execute(sa.text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
            await eng.dispose()
            print("\n[postgresql]")
            await run(args.postgres, files, args, tmp / "pg")


if __name__ == "__main__":
    asyncio.run(main())
