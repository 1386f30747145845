"""Bathymetry benchmark: statistics under a 1 x 1 degree ring and a 500-point profile on a
synthetic 15 arc-second grid in the GEBCO layout, beside baselines measured in the same run.

    .venv/bin/python bench/bathymetry.py [--repeats 30] [--side 4]

The grid (``coordinator.grids.synthetic``: rolling depths, half the cells multibeam, half
gravity-predicted) is written once as netCDF-3 classic (GEBCO's user-area files) and once as
zlib-chunked netCDF-4 (like the global file), ``--side`` degrees square at 1/240 degree.

- stats: ``coverage`` + ``stats`` under a slanted five-sided ring inside a 1 x 1 degree box;
  baseline: the bare read of that box's window (elevation and TID), the floor any method pays.
- profile: 500 bilinear samples along a great circle; cold (a freshly opened grid, so every
  tile is read) and warm (tiles cached); baseline: 500 nearest-cell reads, one netCDF read
  per cell per variable, the naive way.

Figures are the median of ``--repeats`` runs, in ms; targets (issue 26): stats < 100 ms,
profile < 20 ms. Nothing is asserted.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from coordinator.grids import bathymetry, synthetic  # noqa: E402
from coordinator.grids.reader import Grid  # noqa: E402
from coordinator.grids.shapes import ring_polygon  # noqa: E402


def timed(fn, repeats: int) -> float:  # noqa: ANN001
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t) * 1000)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--side", type=float, default=4.0, help="grid side in degrees (at 1/240 degree)")
    a = ap.parse_args()
    box = (120.0, -8.0, 120.0 + a.side, -8.0 + a.side)
    cx, cy = box[0] + a.side / 2, box[1] + a.side / 2

    def depth(lon, lat):
        return np.round(-3000 - 1500 * np.sin(lon * 3) * np.cos(lat * 2))

    def tid(lon, lat):
        return np.where(lon < cx, 11, 40)

    ring = [(cx - 0.5, cy - 0.5), (cx + 0.45, cy - 0.5), (cx + 0.5, cy + 0.1), (cx, cy + 0.5), (cx - 0.5, cy + 0.3)]
    poly = ring_polygon(ring)
    rw, rs, re_, rn = poly.bounds
    with tempfile.TemporaryDirectory() as tmp:
        print(f"grid {a.side:g} x {a.side:g} deg at 15 arc-seconds: {round(a.side * 240) ** 2:,} cells; "
              f"median of {a.repeats} runs, ms")
        for fmt in ("NETCDF3_CLASSIC", "NETCDF4"):
            e, t = synthetic.write_pair(Path(tmp) / fmt, box, 1 / 240, depth, tid, fmt=fmt)
            g = Grid(e, t)
            i0, i1 = math.floor(g.row(np.array(rs))), math.ceil(g.row(np.array(rn)))
            j0, j1 = math.floor(g.column(np.array(rw))), math.ceil(g.column(np.array(re_)))
            floor_ms = timed(lambda: g.window(i0, i1, j0, j1), a.repeats)
            stats_ms = timed(lambda: bathymetry.stats(bathymetry.coverage(g, poly)), a.repeats)
            st = bathymetry.stats(bathymetry.coverage(g, poly))

            d, lons, lats = bathymetry.sample_path([(cx - 1.2, cy - 0.9), (cx + 1.2, cy + 0.9)], 1.0)
            length = float(d[-1])
            d, lons, lats = bathymetry.sample_path([(cx - 1.2, cy - 0.9), (cx + 1.2, cy + 0.9)], length / 499)

            def cold():
                fresh = Grid(e, t)
                bathymetry.profile(fresh, lons, lats)
                fresh.close()

            open_ms = timed(lambda: Grid(e, t).close(), a.repeats)
            cold_ms = timed(cold, a.repeats) - open_ms
            bathymetry.profile(g, lons, lats)
            warm_ms = timed(lambda: bathymetry.profile(g, lons, lats), a.repeats)
            rows = np.floor(g.row(lats)).astype(int)
            cols = np.floor(g.column(lons)).astype(int)

            def naive():
                for r, c in zip(rows, cols):
                    g.elev.read(int(r), int(r) + 1, int(c), int(c) + 1)
                    g.tid.read(int(r), int(r) + 1, int(c), int(c) + 1)

            naive_ms = timed(naive, max(3, a.repeats // 5))
            print(f"\n{fmt}")
            print(f"  stats, 1x1 deg ring ({st['cells']:,} cells):  {stats_ms:7.2f}   "
                  f"baseline bare window read {floor_ms:6.2f}  ratio {stats_ms / floor_ms:5.1f}x   target < 100")
            print(f"  profile, {lons.size} samples, {length / 1000:.0f} km: warm {warm_ms:6.2f}  cold {cold_ms:6.2f}   "
                  f"baseline naive per-cell reads {naive_ms:7.2f}  ratio warm {warm_ms / naive_ms:5.3f}x, "
                  f"cold {cold_ms / naive_ms:5.3f}x   target < 20")
            g.close()


if __name__ == "__main__":
    main()
