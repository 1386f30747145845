"""Map-data benchmark: ingest about a million features, then time bbox and radius queries
of every size up to the largest bounds the contract allows, on SQLite and PostgreSQL.

    .venv/bin/python bench/features.py [--half-deg 0.3] [--trees 10] [--places 1000000]
        [--postgres postgresql+asyncpg://postgres@127.0.0.1:5432/sis_bench] [--queries 60]

The data is the synthetic town (coordinator/features/synthetic.py) repeated over a square
``2 * half-deg`` wide: a street grid every 0.002 degrees, ``--trees`` trees a block,
gates, masts, brand outlets, a power line; and ``--places`` Overture-shaped places over
the same square (GeoParquet). The files are written once into a temporary folder.

Each query runs the store's own code (``coordinator.features.store``: the grid key
ranges, the covering index, the exact test, the sample) at random positions inside the
data, one at a time; p50 and p99 are printed beside the same database's ``SELECT 1``
round trip measured in the same run (the baseline: what any query costs here). A bbox
query is timed up to its features encoded as JSON, as the tools serve them
(``geojson.bbox_feature``: the encodings stored at load joined, lines rendered), since
building 2,000 features was as much of an answer's cost as reading them; the rest of an
answer (caveats, health) is the same for every size. The ingest time is the whole
``sis ingest`` path (parse, rows, encodings, inserts, checksum).
Figures are printed, each query's beside the load average when it ended (on a shared
machine a neighbour's load doubles a 10 ms query); nothing is asserted.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)      # not bench/, whose queue.py would shadow the standard library

import orjson  # noqa: E402
import sqlalchemy as sa  # noqa: E402
from sqlalchemy.ext.asyncio import create_async_engine  # noqa: E402

from coordinator.cli import settle_gc  # noqa: E402
from coordinator.core.db import Database, migrate  # noqa: E402
from coordinator.datasets import ingest  # noqa: E402
from coordinator.features import classes, geojson, store, synthetic  # noqa: E402

CENTRE = (-6.9147, 107.6098)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


async def timed(fn, n: int) -> list[float]:  # noqa: ANN001
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


async def reset(url: str) -> None:
    if url.startswith("sqlite"):
        return
    eng = create_async_engine(url)
    async with eng.begin() as conn:
        await conn.execute(sa.text("DROP SCHEMA public CASCADE"))
        await conn.execute(sa.text("CREATE SCHEMA public"))
    await eng.dispose()


async def run_db(label: str, url: str, files: dict, args: argparse.Namespace) -> None:
    await reset(url)
    db = Database(url)
    await migrate.upgrade_async(db.write_engine, url)
    try:
        t = time.perf_counter()
        osm = await ingest.run(db, "osm", files["osm"])
        t_osm = time.perf_counter() - t
        t = time.perf_counter()
        places = await ingest.run(db, "places", files["places"])
        t_places = time.perf_counter() - t
        print(f"\n[{label}] ingest osm: {osm.records:,} features in {t_osm:.1f} s "
              f"({osm.records / t_osm:,.0f}/s); places: {places.records:,} in {t_places:.1f} s "
              f"({places.records / t_places:,.0f}/s)")
        async with db.engine.connect() as conn:
            rows = (await conn.execute(sa.text("SELECT count(*) FROM map_features"))).scalar_one()
        print(f"[{label}] map_features rows (points and line chunks): {rows:,}")

        # As `sis serve` does once its app is built (cli.settle_gc): what the load left alive
        # out of the collector's reach, young collections rarer. Without it a full collection
        # walked the whole heap once in some 60 queries, and every p99 read about 110 ms.
        settle_gc()

        async def select1() -> None:
            async with db.engine.connect() as conn:
                await conn.execute(sa.text("SELECT 1"))

        base = await timed(select1, args.queries * 2)
        b50 = statistics.median(base)
        print(f"[{label}] baseline SELECT 1: p50 {b50:.2f} ms, p99 {pct(base, 0.99):.2f} ms")
        rnd = random.Random(3)
        lat0, lon0 = CENTRE
        h = args.half_deg

        def spot(margin: float) -> tuple[float, float]:
            m = max(0.0, h - margin)
            return lat0 + rnd.uniform(-m, m), lon0 + rnd.uniform(-m, m)

        print(f"[{label}] {'query':44s} {'p50 ms':>8s} {'p99 ms':>8s} {'x base':>7s} {'matched (median)':>9s} {'load':>5s}")

        async def report(name: str, fn, matched) -> None:  # noqa: ANN001
            await fn()          # the first query of a version counts its levels and reads its top ones once (store._top)
            del matched[:]
            xs = await timed(fn, args.queries)
            print(f"[{label}] {name:44s} {statistics.median(xs):8.2f} {pct(xs, 0.99):8.2f} "
                  f"{statistics.median(xs) / b50:7.1f} {int(statistics.median(matched)):9,} {os.getloadavg()[0]:5.1f}")

        for side, what, kind_classes, version, limit in (
                (0.01, "places bbox", classes.PLACES, places.id, 2000),
                (0.1, "places bbox", classes.PLACES, places.id, 2000),
                (0.25, "places bbox", classes.PLACES, places.id, 2000),
                (0.6, "places bbox (ceiling, anon rows 2000)", classes.PLACES, places.id, 2000),
                (0.1, "infrastructure bbox", classes.INFRASTRUCTURE, osm.id, 2000),
                (0.6, "infrastructure bbox", classes.INFRASTRUCTURE, osm.id, 2000),
                (2.0, "infrastructure bbox (ceiling)", classes.INFRASTRUCTURE, osm.id, 2000)):
            matched = [0]

            async def q(side=side, kc=kind_classes, v=version, lim=limit, m=matched) -> None:  # noqa: ANN001
                la, lo = spot(side / 2) if side < 2 * h else (lat0, lon0)
                box = (lo - side / 2, la - side / 2, lo + side / 2, la + side / 2)
                found = await store.sample_box(db, v, kc, box, lim, docs=True)
                orjson.dumps([geojson.bbox_feature(r) for r in found.rows])
                m.append(found.total)

            await report(f"{what} {side:g} deg", q, matched)
        for radius, what, kind_classes in ((100, "environment radius", classes.ENVIRONMENT),
                                           (400, "environment radius", classes.ENVIRONMENT),
                                           (800, "environment radius (max)", classes.ENVIRONMENT),
                                           (400, "road geometry radius", classes.ROADS),
                                           (1000, "road geometry radius (max)", classes.ROADS)):
            matched = [0]

            async def q(radius=radius, kc=kind_classes, m=matched) -> None:  # noqa: ANN001
                la, lo = spot(0.02)
                m.append((await store.near(db, osm.id, kc, la, lo, radius, 2000)).total)

            await report(f"{what} {radius} m", q, matched)
    finally:
        await db.close()


def make_files(args: argparse.Namespace, d: Path) -> dict:
    t = time.perf_counter()
    counts = synthetic.write_extract(d / "bench.osm.pbf", CENTRE, args.half_deg, trees_per_block=args.trees)
    synthetic.write_geoparquet(d / "places.parquet", synthetic.places(CENTRE, args.places, half_deg=args.half_deg))
    print(f"files written in {time.perf_counter() - t:.1f} s: {sum(counts.values()):,} OSM features "
          f"({', '.join(f'{k} {v:,}' for k, v in sorted(counts.items()))}), {args.places:,} places")
    return {"osm": d / "bench.osm.pbf", "places": d / "places.parquet"}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--half-deg", type=float, default=0.3)
    ap.add_argument("--trees", type=int, default=10)
    ap.add_argument("--places", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--postgres", default="", help="a PostgreSQL URL to run on too (its public schema is reset)")
    ap.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = make_files(args, Path(tmp))
        if not args.no_sqlite:
            await run_db("sqlite", f"sqlite+aiosqlite:///{tmp}/bench.db", files, args)
        if args.postgres:
            await run_db("postgres", args.postgres, files, args)


if __name__ == "__main__":
    asyncio.run(main())
