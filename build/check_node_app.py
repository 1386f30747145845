"""Check a built node app as a volunteer would use it: `--version`, then one synthetic
job on the CPU against a local demo coordinator.

    make node-app-check                      # after `make node-app`
    python build/check_node_app.py [--binary build/out/sis-node-linux-x86_64]

Steps: start `sis serve --demo` (its fake photo provider serves generated street
scenes) on a free port with a throwaway database; ask for a sweep of the demo
centre; run `BINARY run --allow-cpu --max-jobs 1` with a throwaway node home; then
read what the agent says it contributed (`BINARY status --json`) and what the
coordinator recorded (`sis nodes list`). Exits non-zero unless the binary enrolled,
leased a job, ran the engine compiled into it and the coordinator validated the
result. The second node measures its photos' geometry in a worker process
(``SIS_ENGINE_GEOMETRY_WORKERS=1``, as a GPU node with ``cpu_threads`` 2 does), which
the compiled binary must start (spawn) and keep alive: its log must say the worker
started and none died. Prints a JSON record of the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What sweep_engine.geometry_pool logs when its workers start, and when one dies.
WORKER_STARTED = "measuring photos' geometry in 1 worker process"
WORKER_DIED = "a geometry worker process died"
sys.path.insert(0, str(ROOT / "build"))
from node_app import artefact_name  # noqa: E402

DEMO_CENTRE = (-6.9147, 107.6098)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str) -> dict:
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def step(what: str) -> None:
    print(f"-- {what}", file=sys.stderr, flush=True)


def says_what_it_carries(version: str, binary: Path) -> bool:
    """--version names the engine build and every weights file of the build record (written
    beside the binary by build/node_app.py), and its compute backends."""
    record_file = binary.with_name(binary.name + ".json")
    if not record_file.exists():
        print(f"no build record {record_file}: --version not checked against it", file=sys.stderr)
        return "backends:" in version
    built = json.loads(record_file.read_text())
    missing = [w["name"] for w in built.get("weights", []) if w["sha256"][:16] not in version]
    if built["engineBuild"][:16] not in version or missing or "backends:" not in version:
        print(f"--version does not say what the build carries (weights missing: {missing}):\n{version}",
              file=sys.stderr)
        return False
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default=str(ROOT / "build" / "out" / artefact_name()))
    ap.add_argument("--timeout", type=int, default=900, help="seconds the job may take (default 900)")
    args = ap.parse_args()
    binary = Path(args.binary).resolve()
    if not binary.is_file():
        print(f"no binary at {binary}: run `make node-app` first", file=sys.stderr)
        return 2
    record: dict = {"binary": str(binary), "sizeBytes": binary.stat().st_size}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "SIS_NODE_HOME": f"{tmp}/node"}
        step("--version")
        t0 = time.time()
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, env=env, timeout=600)
        record["version"] = out.stdout.strip() or out.stderr.strip()
        record["versionSeconds"] = round(time.time() - t0, 1)     # the first start unpacks the payload
        if out.returncode != 0:
            print(out.stdout, out.stderr, file=sys.stderr)
            return 1
        t0 = time.time()
        subprocess.run([binary, "--version"], capture_output=True, env=env, timeout=600, check=True)
        record["versionSecondsCached"] = round(time.time() - t0, 2)

        port = free_port()
        db = f"sqlite+aiosqlite:///{tmp}/coordinator.db"
        sis = str(Path(sys.executable).parent / "sis")
        step(f"sis serve --demo on port {port}")
        server = subprocess.Popen([sis, "serve", "--demo", "--port", str(port), "--database", db],
                                  stdout=open(f"{tmp}/serve.log", "w"), stderr=subprocess.STDOUT, cwd=ROOT)
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(120):
                try:
                    http("GET", f"{base}/earth/limits")
                    break
                except OSError:
                    time.sleep(0.5)
            else:
                print(Path(f"{tmp}/serve.log").read_text(), file=sys.stderr)
                return 1
            lat, lon = DEMO_CENTRE
            sweep = http("POST", f"{base}/earth/sweep-request?lat={lat}&lon={lon}&radius=200")
            record["sweep"] = {k: sweep.get(k) for k in ("queued", "jobs", "photos")}
            step(f"sweep requested: {record['sweep']}")
            # Two volunteers: a node not yet trusted is checked by a replica on a second node, so
            # the job reaches review only when the two binaries' results agree.
            for n, name in enumerate(("check-a", "check-b")):
                node_env = {**env, "SIS_NODE_HOME": f"{tmp}/{name}"}
                if name == "check-b":
                    node_env["SIS_ENGINE_GEOMETRY_WORKERS"] = "1"
                step(f"{name}: sis-node run --allow-cpu --max-jobs 1")
                t0 = time.time()
                run = subprocess.run([binary, "run", "--allow-cpu", "--coordinator", base, "--max-jobs", "1",
                                      "--name", name], capture_output=True, text=True, env=node_env,
                                     timeout=args.timeout)
                status = subprocess.run([binary, "status", "--json"], capture_output=True, text=True,
                                        env=node_env, timeout=120)
                doc = json.loads(status.stdout) if status.returncode == 0 else {}
                said = run.stdout + run.stderr
                record[name] = {"exit": run.returncode, "seconds": round(time.time() - t0, 1),
                                "contribution": doc.get("contribution"), "nodeId": doc.get("nodeId"),
                                "geometryWorker": {"started": WORKER_STARTED in said, "died": WORKER_DIED in said},
                                "logTail": said.strip().splitlines()[-4:]}
            record["queue"] = http("GET", f"{base}/earth/sweep-queue?state=all").get("requests")
            nodes = subprocess.run([sis, "nodes", "list", "--database", db], capture_output=True, text=True,
                                   cwd=ROOT, timeout=120)
            record["coordinatorNodes"] = nodes.stdout.strip().splitlines()
        finally:
            server.terminate()
            server.wait(30)
    print(json.dumps(record, indent=1))
    nodes = record.get("coordinatorNodes", [])[1:-1]
    ok = (says_what_it_carries(record["version"], binary)
          and all(record[n]["exit"] == 0 and (record[n]["contribution"] or {}).get("jobs") == 1
                  for n in ("check-a", "check-b"))
          and len(nodes) == 2 and all(line.split()[3] == "1" for line in nodes)      # valid results: 1 each
          and record["check-b"]["geometryWorker"] == {"started": True, "died": False})
    print("node app check:", "passed" if ok else "FAILED", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
