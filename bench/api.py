"""API benchmark: requests/s and latency percentiles of the coordinator beside a
Tornado hello-world measured in the same run, and the coordinator's peak memory.

    .venv/bin/python bench/api.py [--seconds 5] [--connections 16] [--rounds 3]

Each server runs in its own process; the load comes from a keep-alive HTTP/1.1
client in another process, so on a 2-core machine server and client each get
about one core. Beside requests/s, each row gives the server process's CPU time
per request (from /proc), which other work on the machine disturbs far less
than the rate. Every case is measured in each of ``--rounds`` rounds, its
ratios taken to the hello-world of the same round, and medians are printed;
nothing is asserted.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HELLO = """
import asyncio, sys, tornado.web
class H(tornado.web.RequestHandler):
    def get(self):
        self.set_header("Content-Type", "application/json")
        self.finish('{"hello":"world"}')
async def main():
    tornado.web.Application([(r"/", H)]).listen(int(sys.argv[1]), "127.0.0.1")
    print("ready", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, timeout: float = 60) -> None:
    end = time.time() + timeout
    while time.time() < end:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


async def _worker(host: str, port: int, path: str, stop_at: float, lat: list[float], errors: list[int],
                  key: str | None = None) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    req = (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n" + (f"X-Api-Key: {key}\r\n" if key else "")
           + "\r\n").encode()
    try:
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            writer.write(req)
            status_line = await reader.readline()
            length = 0
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                k, _, v = line.decode("latin-1").partition(":")
                if k.lower() == "content-length":
                    length = int(v)
            if length:
                await reader.readexactly(length)
            lat.append(time.perf_counter() - t0)
            if not status_line.startswith(b"HTTP/1.1 200"):
                errors.append(int(status_line.split()[1]))
    finally:
        writer.close()


async def _load(host: str, port: int, path: str, seconds: float, conns: int, key: str | None = None) -> dict:
    lat: list[float] = []
    errors: list[int] = []
    # warm-up, then the measured window
    await asyncio.gather(*(_worker(host, port, path, time.perf_counter() + 0.5, [], [], key) for _ in range(conns)))
    t0 = time.perf_counter()
    await asyncio.gather(*(_worker(host, port, path, t0 + seconds, lat, errors, key) for _ in range(conns)))
    wall = time.perf_counter() - t0
    lat.sort()
    q = statistics.quantiles(lat, n=100) if len(lat) > 100 else [lat[-1]] * 99
    return {"requests": len(lat), "rps": len(lat) / wall, "p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000,
            "errors": len(errors)}


def load(port: int, path: str, seconds: float, conns: int, key: str | None = None) -> dict:
    """Run the client in its own process so it does not share the server's core."""
    code = (f"import asyncio, json, sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); import api; "
            f"print(json.dumps(asyncio.run(api._load('127.0.0.1', {port}, {path!r}, {seconds}, {conns}, "
            f"{key!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(pid: int, port: int, path: str, seconds: float, conns: int, key: str | None = None) -> dict:
    before = cpu_s(pid)
    out = load(port, path, seconds, conns, key)
    out["cpu_us"] = (cpu_s(pid) - before) / max(1, out["requests"]) * 1e6
    return out


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3, help="every case measured this many times in turn")
    args = ap.parse_args()

    procs = []
    try:
        hello_port = free_port()
        hello = subprocess.Popen([sys.executable, "-c", HELLO, str(hello_port)], stdout=subprocess.PIPE)
        procs.append(hello)
        tmp = tempfile.mkdtemp(prefix="sis-bench-")
        sis_port = free_port()
        env = {**os.environ, "SIS_POLL_INTERVAL_S": "0", "SIS_LOG_LEVEL": "WARNING",
               "SIS_BENCH_UNLIMITED": "1"}
        db = f"sqlite+aiosqlite:///{tmp}/sis.db"
        made = subprocess.run([sys.executable, "-m", "coordinator.cli", "keys", "create", "--name", "bench",
                               "--database", db], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
        key = made.stdout.split()[-1]   # a real key (an unknown key is refused with 401)
        sis = subprocess.Popen([sys.executable, "-m", "coordinator.cli", "serve", "--demo", "--port", str(sis_port),
                                "--database", f"sqlite+aiosqlite:///{tmp}/sis.db"], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        procs.append(sis)
        wait_ready(f"http://127.0.0.1:{hello_port}/")
        wait_ready(f"http://127.0.0.1:{sis_port}/healthz")
        urllib.request.urlopen(f"http://127.0.0.1:{sis_port}/earth/events", timeout=10).read()  # warm the cache

        cases = [("tornado hello-world (baseline)", hello.pid, hello_port, "/", None)]
        cases += [(f"GET {path} keyless", sis.pid, sis_port, path, None) for path in ("/earth/limits", "/earth/events")]
        cases += [(f"GET {path} keyed", sis.pid, sis_port, path, key) for path in ("/earth/limits", "/earth/events")]
        # Rounds of every case in turn: each ratio is to the hello-world of its own round, so a
        # neighbour's load that comes and goes shifts both sides of it, and the median is shown.
        runs: dict[str, list[dict]] = {name: [] for name, *_ in cases}
        for _ in range(args.rounds):
            base = None
            for name, pid, port, path, k in cases:
                r = measured(pid, port, path, args.seconds, args.connections, k)
                base = base or r
                r["vs_hello"], r["cpu_vs_hello"] = r["rps"] / base["rps"], base["cpu_us"] / r["cpu_us"]
                runs[name].append(r)
        med = statistics.median
        print(f"\nAPI benchmark: {args.connections} keep-alive connections, {args.seconds:.0f} s each, "
              f"{args.rounds} rounds (medians), {os.cpu_count()} cores, python {sys.version.split()[0]}")
        print(f"{'route':34} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7} {'vs hello':>9} "
              f"{'cpu us/req':>11} {'cpu vs hello':>13}")
        for name, rs in runs.items():
            print(f"{name:34} {med(r['rps'] for r in rs):9.0f} {med(r['p50_ms'] for r in rs):8.2f} "
                  f"{med(r['p99_ms'] for r in rs):8.2f} {sum(r['errors'] for r in rs):7d} "
                  f"{med(r['vs_hello'] for r in rs):9.2f} {med(r['cpu_us'] for r in rs):11.0f} "
                  f"{med(r['cpu_vs_hello'] for r in rs):13.2f}")
        print(f"coordinator peak resident memory: {peak_rss_mb(sis.pid):.0f} MB")
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)


if __name__ == "__main__":
    main()
