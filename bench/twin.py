"""Twin benchmark: the default twin cold and warm, beside a Tornado hello-world measured the
same way in the same run.

    .venv/bin/python bench/twin.py [--requests 300] [--cold 20] [--airports 20000]

One process holds the fake upstream (every twin adapter's recorded sample), a coordinator on
SQLite with the WAQI and TomTom keys set (so every layer with a source is served), the
reference files of coordinator/twin/samples/reference/ ingested with an airports.csv of
``--airports`` rows in OurAirports' format (so the anonymous plan's 800-point cut has work to
do), and the hello-world server. Requests go one at a time over loopback HTTP (Tornado's client,
a connection per request, the same for the baseline). Routes: ``/earth/w/twin_earth`` (every
layer) and ``/public/v1/anon/twin`` (the defaults: quakes, disasters, cyclones). "Cold" empties
the answer cache first, so every feed is read again from the fake upstream and the database;
"warm" is the same request again (twin_earth from its cached answer, /twin assembled anew from
the kept feeds, since its caps depend on the caller). Figures are printed; nothing is asserted.
The target of issue 23 is a warm p50 under 20 ms.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tornado.web  # noqa: E402
from tornado.httpclient import AsyncHTTPClient  # noqa: E402

from coordinator.datasets import ingest  # noqa: E402
from coordinator.demo.upstream import FakeUpstream  # noqa: E402
from tests.support import free_port, make_settings, start_coordinator, stop_coordinator  # noqa: E402

REFERENCE = ROOT / "coordinator" / "twin" / "samples" / "reference"
FILES = {"wpi": "UpdatedPub150.csv", "ne_countries": "countries.geojson", "ne_places": "places.geojson",
         "ne_rivers": "rivers.geojson"}
KEYS = {"waqi_map": {"api_key": "bench"}, "tomtom_traffic": {"api_key": "bench"}}
ROUTES = ("/earth/w/twin_earth", "/public/v1/anon/twin")
HEADER = ('"id","ident","type","name","latitude_deg","longitude_deg","elevation_ft","continent","iso_country",'
          '"iso_region","municipality","scheduled_service","icao_code","iata_code","gps_code","local_code",'
          '"home_link","wikipedia_link","keywords"')
TYPES = ("small_airport", "small_airport", "heliport", "medium_airport", "large_airport", "closed")


class Hello(tornado.web.RequestHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish('{"hello":"world"}')


def airports_file(path: Path, n: int) -> Path:
    rows = [f'{i},"B{i:06d}","{TYPES[i % 6]}","Field {i}",{-60 + (i * 7) % 120}.{i % 97},{-170 + (i * 13) % 340}.5,'
            f'{i % 3000},"AS","ID","ID-JB","Town {i}","{"yes" if i % 5 == 0 else "no"}",,,,,,,' for i in range(n)]
    path.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    return path


async def timed(url: str, n: int) -> dict:
    client = AsyncHTTPClient()
    lat: list[float] = []
    statuses: set[int] = set()
    size = 0
    for _ in range(n):
        t0 = time.perf_counter()
        r = await client.fetch(url, raise_error=False)
        lat.append(time.perf_counter() - t0)
        statuses.add(r.code)
        size = len(r.body or b"")
    q = statistics.quantiles(lat, n=100)
    return {"p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000, "statuses": sorted(statuses), "bytes": size}


async def cold(c, url: str, n: int) -> dict:  # noqa: ANN001
    """The request with the answer cache emptied before each: every feed read anew."""
    client = AsyncHTTPClient()
    lat: list[float] = []
    statuses: set[int] = set()
    for _ in range(n):
        c.services.cache.clear()
        t0 = time.perf_counter()
        r = await client.fetch(url, raise_error=False)
        lat.append(time.perf_counter() - t0)
        statuses.add(r.code)
    return {"p50_ms": statistics.median(lat) * 1000, "max_ms": max(lat) * 1000, "statuses": sorted(statuses)}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--cold", type=int, default=20)
    ap.add_argument("--airports", type=int, default=20000)
    args = ap.parse_args()
    os.environ.setdefault("SIS_LOG_LEVEL", "WARNING")

    hello_port = free_port()
    hello = tornado.web.Application([(r"/", Hello)]).listen(hello_port, "127.0.0.1")
    upstream = await FakeUpstream().load_recorded().start()
    tmp = Path(tempfile.mkdtemp(prefix="sis-bench-twin-"))
    c = await start_coordinator(make_settings(f"sqlite+aiosqlite:///{tmp}/sis.db", upstream, sources=KEYS,
                                              bench_unlimited=True))
    try:
        for kind, name in FILES.items():
            await ingest.run(c.services.db, kind, REFERENCE / name)
        await ingest.run(c.services.db, "ourairports", airports_file(tmp / "airports.csv", args.airports))
        base = await timed(f"http://127.0.0.1:{hello_port}/", args.requests)
        rows = []
        for route in ROUTES:
            url = c.base_url + route
            first = await cold(c, url, args.cold)
            await timed(url, 5)                                   # settle the feeds in the cache
            rows.append((route, first, await timed(url, args.requests)))
        print(f"\nTwin benchmark: {args.requests} warm and {args.cold} cold sequential requests per route, in process, "
              f"{os.cpu_count()} cores, python {sys.version.split()[0]}, {args.airports} airports loaded")
        print(f"{'route':28} {'cold p50':>9} {'cold max':>9} {'warm p50':>9} {'warm p99':>9} {'p50/hello':>10} "
              f"{'bytes':>8}  statuses")
        print(f"{'tornado hello-world':28} {'-':>9} {'-':>9} {base['p50_ms']:9.2f} {base['p99_ms']:9.2f} {1:10.2f} "
              f"{17:>8}  {','.join(map(str, base['statuses']))}")
        for route, first, warm in rows:
            print(f"{route:28} {first['p50_ms']:9.1f} {first['max_ms']:9.1f} {warm['p50_ms']:9.2f} "
                  f"{warm['p99_ms']:9.2f} {warm['p50_ms'] / base['p50_ms']:10.2f} {warm['bytes']:8d}  "
                  f"{','.join(map(str, sorted(set(first['statuses']) | set(warm['statuses']))))}")
    finally:
        await stop_coordinator(c)
        await upstream.stop()
        hello.stop()


if __name__ == "__main__":
    asyncio.run(main())
