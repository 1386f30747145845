"""Widgets benchmark: ``GET /earth/widgets.json`` warm (p50 against the issue's 20 ms) and a
warm widget read beside a Tornado hello-world measured the same way in the same run.

    .venv/bin/python bench/widgets.py [--seconds 5] [--connections 16] [--rounds 3]

The pattern of bench/api.py (whose servers and load client it uses): the coordinator
(``sis serve --demo``, sources at the bundled samples) and the hello-world each run in their
own process; the keep-alive load client runs in a third. Latency of the manifest is taken with
one connection (requests one after another, so p50 is a request's own time), plain and with
``Accept-Encoding: gzip`` (Tornado compresses each answer again); rates with ``--connections``.
The widget read is a NOAA SWPC widget whose answer the demo serves from its recorded sample,
warm in the pipeline's cache. Each ratio is to the hello-world of its own round; medians of
``--rounds`` rounds are printed, nothing is asserted. Targets (issue 27): manifest p50 < 20 ms;
widget read >= 0.5 of hello-world's rate.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import api  # noqa: E402  (bench/api.py: servers, load client, CPU accounting)

WIDGET = "/earth/w/swpc-noaa-planetary-k-index"
MANIFEST = "/earth/widgets.json"


async def _sequential(port: int, path: str, n: int, gzip: bool) -> dict:
    """``n`` requests one after another on one keep-alive connection: p50 and p99 in ms."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    req = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
           + ("Accept-Encoding: gzip\r\n" if gzip else "") + "\r\n").encode()
    lat, size = [], 0
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            writer.write(req)
            await reader.readline()
            length = 0
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                k, _, v = line.decode("latin-1").partition(":")
                if k.lower() == "content-length":
                    length = int(v)
            size = len(await reader.readexactly(length)) if length else 0
            lat.append(time.perf_counter() - t0)
    finally:
        writer.close()
    q = statistics.quantiles(lat, n=100)
    return {"p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000, "bytes": size}


def sequential(port: int, path: str, n: int, gzip: bool) -> dict:
    code = (f"import asyncio, json, sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); import widgets; "
            f"print(json.dumps(asyncio.run(widgets._sequential({port}, {path!r}, {n}, {gzip!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=200, help="sequential manifest requests per round")
    args = ap.parse_args()
    procs = []
    try:
        hello_port, sis_port = api.free_port(), api.free_port()
        hello = subprocess.Popen([sys.executable, "-c", api.HELLO, str(hello_port)], stdout=subprocess.PIPE)
        procs.append(hello)
        tmp = tempfile.mkdtemp(prefix="sis-bench-")
        env = {**os.environ, "SIS_POLL_INTERVAL_S": "0", "SIS_LOG_LEVEL": "WARNING", "SIS_BENCH_UNLIMITED": "1"}
        sis = subprocess.Popen([sys.executable, "-m", "coordinator.cli", "serve", "--demo", "--port", str(sis_port),
                                "--database", f"sqlite+aiosqlite:///{tmp}/sis.db"], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        procs.append(sis)
        api.wait_ready(f"http://127.0.0.1:{hello_port}/")
        api.wait_ready(f"http://127.0.0.1:{sis_port}/healthz")
        for path in (WIDGET, MANIFEST):     # warm: the widget's read cached, the manifest encoded
            body = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{sis_port}{path}", timeout=30).read())
            assert "health" not in body or not body["health"]["degraded"], (path, body["caveats"])

        rate_cases = [("tornado hello-world (baseline)", hello.pid, hello_port, "/"),
                      (f"GET {WIDGET} warm", sis.pid, sis_port, WIDGET)]
        rates: dict[str, list[dict]] = {name: [] for name, *_ in rate_cases}
        lat: dict[str, list[dict]] = {"hello-world, 1 connection": [], "widgets.json plain": [],
                                      "widgets.json gzip": [], "widget read, 1 connection": []}
        for _ in range(args.rounds):
            base = None
            for name, pid, port, path in rate_cases:
                r = api.measured(pid, port, path, args.seconds, args.connections)
                base = base or r
                r["vs_hello"], r["cpu_vs_hello"] = r["rps"] / base["rps"], base["cpu_us"] / r["cpu_us"]
                rates[name].append(r)
            lat["hello-world, 1 connection"].append(sequential(hello_port, "/", args.requests, False))
            lat["widgets.json plain"].append(sequential(sis_port, MANIFEST, args.requests, False))
            lat["widgets.json gzip"].append(sequential(sis_port, MANIFEST, args.requests, True))
            lat["widget read, 1 connection"].append(sequential(sis_port, WIDGET, args.requests, False))
        med = statistics.median
        print(f"\nWidgets benchmark: {args.rounds} rounds (medians), {os.cpu_count()} cores, "
              f"python {sys.version.split()[0]}")
        print(f"\nrates, {args.connections} keep-alive connections, {args.seconds:.0f} s each")
        print(f"{'route':52} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7} {'vs hello':>9} "
              f"{'cpu us/req':>11}")
        for name, rs in rates.items():
            print(f"{name:52} {med(r['rps'] for r in rs):9.0f} {med(r['p50_ms'] for r in rs):8.2f} "
                  f"{med(r['p99_ms'] for r in rs):8.2f} {sum(r['errors'] for r in rs):7d} "
                  f"{med(r['vs_hello'] for r in rs):9.2f} {med(r['cpu_us'] for r in rs):11.0f}")
        print(f"\nlatency, one request after another ({args.requests} per round)")
        print(f"{'request':52} {'p50 ms':>8} {'p99 ms':>8} {'bytes':>10}")
        for name, rs in lat.items():
            print(f"{name:52} {med(r['p50_ms'] for r in rs):8.2f} {med(r['p99_ms'] for r in rs):8.2f} "
                  f"{rs[-1]['bytes']:10d}")
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)


if __name__ == "__main__":
    main()
