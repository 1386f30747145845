"""What the image evidence costs a submission: body size and validation time of one result with the
engine's evidence (each object's box, a road width's rows) beside the same result without it, measured
in the same run.

    .venv/bin/python bench/evidence.py [--photos 20] [--objects 8] [--rows 32] [--repeat 300]

The result is a job of ``--photos`` synthetic photos (256 x 192, the engine's frame), each with a road
width and ``--objects`` objects; the evidence is what ``sweep_engine.geometry.to_schema`` sends at most
(``ROAD_ROWS_SENT`` rows). Validation is ``coordinator.sweeps.validation.validate_result``, all of it
(parse, schema, place, bounds, the evidence's fit to its photo), as a submission runs it. Prints the
median of ``--repeat`` runs of each, and their ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

# bench/ holds a queue.py, which would shadow the standard library's: keep bench/ off the path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

from coordinator.demo.photos import DEV_ENGINE_BUILD, honest_result  # noqa: E402
from coordinator.sweeps import coverage  # noqa: E402
from coordinator.sweeps.jobs import _plan  # noqa: E402
from coordinator.sweeps.validation import validate_result  # noqa: E402
from sweep_engine.schema import PhotoRef  # noqa: E402

CENTRE = (48.8566, 2.3522)
NOW = datetime(2026, 11, 22, tzinfo=timezone.utc)
SETTINGS = SimpleNamespace(engine_builds=DEV_ENGINE_BUILD, fact_margin_m=25.0, object_margin_m=150.0, demo=False,
                           manifests_dir="")


def job(n: int) -> SimpleNamespace:
    cells = sorted(coverage.circle_cells(CENTRE[0], CENTRE[1], 200))
    photos = []
    for i in range(n):
        la, lo = coverage.offset(CENTRE[0], CENTRE[1], 6 * (i % 10), 6 * (i // 10))
        photos.append(PhotoRef(id=f"p{i}", lon=lo, lat=la, captured_at="2026-06-01T08:00:00+00:00", width=256,
                               height=192, url=f"http://127.0.0.1:9/p{i}.jpg", license="CC0-1.0", provider="bench"))
    plan = _plan(cells, photos)
    return SimpleNamespace(id=7, area=plan.area, center_lat=plan.center_lat, center_lon=plan.center_lon,
                           photos=[p.to_dict() for p in photos])


def results(j, n_objects: int, n_rows: int) -> tuple[bytes, bytes]:
    doc = honest_result({"jobId": f"job-{j.id}", "photos": j.photos}, "nd_bench")
    for m, p in zip(doc["measurements"], j.photos):
        m["roadWidth"]["samples"] = max(n_rows, 1)
        for k in range(n_objects):
            m["objects"].append({"label": "pole", "distanceM": 8.0 + k, "size": {"widthM": 0.3, "heightM": 6.0},
                                 "bearingDeg": 10.0 * k, "lon": p["lon"], "lat": p["lat"] + 0.00005 * k,
                                 "heightIsLowerBound": False, "widthIsLowerBound": False, "score": 0.9})
    bare = json.dumps(doc).encode()
    for m in doc["measurements"]:
        m["roadWidth"]["rows"] = [{"v": round(100.5 + k * 1.9, 1), "uLeft": round(120.0 - k * 2.4, 1),
                                   "uRight": round(136.0 + k * 2.4, 1)} for k in range(n_rows)]
        for k, o in enumerate(m["objects"]):
            o["box"] = [10.0 + 25 * k, 20.0, 14.5 + 25 * k, 120.0]
    return bare, json.dumps(doc).encode()


def timed(bodies: list[bytes], j, repeat: int) -> list[float]:
    """Median validation time of each body, the bodies taken in turn so that a loaded machine's noise
    falls on all of them alike."""
    times: list[list[float]] = [[] for _ in bodies]
    for _ in range(repeat):
        for body, out in zip(bodies, times):
            t = time.perf_counter()
            _, reasons = validate_result(body, j, "nd_bench", NOW - timedelta(seconds=30), NOW, SETTINGS)
            out.append(time.perf_counter() - t)
            assert reasons == [], reasons
    return [statistics.median(t) for t in times]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", type=int, default=20)
    ap.add_argument("--objects", type=int, default=8)
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=300)
    a = ap.parse_args()
    j = job(a.photos)
    bare, evidenced = results(j, a.objects, a.rows)
    timed([bare, evidenced], j, 20)                      # warm
    t_bare, t_ev = timed([bare, evidenced], j, a.repeat)
    print(f"result of {a.photos} photos, {a.objects} objects each, {a.rows} road rows each (median of {a.repeat})")
    print(f"  body      without evidence {len(bare) / 1024:8.1f} KiB   with {len(evidenced) / 1024:8.1f} KiB"
          f"   ratio {len(evidenced) / len(bare):.2f}")
    print(f"  validate  without evidence {t_bare * 1e3:8.2f} ms    with {t_ev * 1e3:8.2f} ms"
          f"    ratio {t_ev / t_bare:.2f}")


if __name__ == "__main__":
    main()
