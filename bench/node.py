"""Node agent throughput: jobs/s of one agent working ahead and not, alternating in one run.

A job's time at a node is its photos' fetch from the street-photo provider and the
engine's run. Working ahead (``work_ahead``, the default) fetches the next job's
photos while the engine runs the current one, so a job costs about the longer of
the two instead of their sum. On a GPU the engine's part is a fraction of a second
per photo and the fetch, over the internet, is often the longer.

One agent, in this process, against a real coordinator on loopback (SQLite) and the
fake photo provider, which answers each photo after ``--latency`` seconds (a
provider's round trip and transfer; the agent fetches ``--photo-concurrency`` photos
of a job at once, 4 by default as the agent's own default).
Each round is a fresh sweep of ``--jobs`` jobs of ``--photos-per-job`` photos; rounds
alternate working ahead off and on. Engines:

- ``--engine sleep:S``: holds each photo S seconds and answers what a correct engine
  would (a GPU node's engine time, without a GPU, with nothing else in its way);
- ``--engine real``: the shipped sweep engine on this machine's CPU (a warm-up job
  first), its networks and geometry sharing the cores with the provider and coordinator.

Each line gives jobs/s, photos/s, and per job the mean fetch seconds the results
report and the engine's seconds as the agent counts them (its whole run of the job), and
the run ends with the ratio of working ahead to not.

    .venv/bin/python bench/node.py [--jobs 12] [--photos-per-job 8] [--latency 0.25] [--photo-concurrency 4]
                                   [--engine sleep:0.05 | real] [--rounds 2]
"""
from __future__ import annotations

import argparse
import asyncio
import io
import logging
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])   # not bench/, whose queue.py would shadow the standard library

from sqlalchemy import select  # noqa: E402
from tornado.httpserver import HTTPServer  # noqa: E402
from tornado.netutil import bind_sockets  # noqa: E402

from bench.speed import machine_speed  # noqa: E402
from coordinator.core.db.models import SweepResult  # noqa: E402
from coordinator.core.settings import Settings  # noqa: E402
from coordinator.demo.photos import DEMO_CENTRE, DEV_ENGINE_BUILD, FakePhotoProvider, honest_result  # noqa: E402
from coordinator.faces.app import make_app  # noqa: E402
from coordinator.services import create_services  # noqa: E402
from coordinator.sweeps import requests  # noqa: E402
from coordinator.sweeps.service import sweeps_of  # noqa: E402
from node_agent.config import Config, Paths  # noqa: E402
from node_agent.loop import Agent, Device  # noqa: E402
from node_agent.policy import Policy  # noqa: E402
from node_agent.progress import Progress  # noqa: E402
from sweep_engine.schema import Result  # noqa: E402

CPU = Device("cpu (bench)", False, "none: bench")


class SleepEngine:
    """Holds each photo ``per_photo_s`` seconds, then answers what a correct engine would."""

    version, build = "0.1.0", DEV_ENGINE_BUILD

    def __init__(self, per_photo_s: float, truth: dict):
        self.per_photo_s, self.truth = per_photo_s, truth

    def run_job(self, job, images: dict[str, bytes]) -> Result:
        time.sleep(self.per_photo_s * len(images))
        doc = job.to_dict()
        doc["photos"] = [p for p in doc["photos"] if p["id"] in images]
        return Result.from_dict(honest_result(doc, node_id="set-by-agent", truth=self.truth))


def real_engine():
    from node_agent.engine import load_engine
    return load_engine(CPU, "", cpu_threads=os.cpu_count() or 1)


def make_agent(home: Path, url: str, engine, work_ahead: bool, jobs: int, concurrency: int) -> Agent:
    config = Config(coordinator=url, work_ahead=work_ahead, photo_concurrency=concurrency,
                    pause_when_user_active=False, pause_on_battery=False, cpu_busy_percent=0.0, check_updates=False,
                    idle_poll_s=0.2).check()
    paths = Paths(home, home).ensure()
    policy = Policy(config, paths.pause_file, idle=lambda: None, battery=lambda: None, other_cpu=lambda: None)
    return Agent(config, paths, engine, CPU, policy=policy, progress=Progress(io.StringIO(), tty=False),
                 max_jobs=jobs)


class Bench:
    """One coordinator, provider and engine; one node (one home), which takes every round's jobs."""

    def __init__(self, services, url: str, photos: FakePhotoProvider, engine, home: Path, truth: dict,
                 concurrency: int):
        self.services, self.url, self.photos, self.engine, self.home = services, url, photos, engine, home
        self.concurrency = concurrency
        self.truth = truth                # the photos' ground truth, for the sleep engine's answers
        self.rounds = 0
        self.seen: set[str] = set()       # jobs of earlier rounds
        self.done = {"photos": 0, "cpuSeconds": 0.0}   # the node's contribution before this round

    async def sweep(self, n_photos: int) -> int:
        """A fresh sweep of about ``n_photos`` photos (rendered now, so the provider answers after its
        delay alone); the number of jobs queued."""
        lat, lon = DEMO_CENTRE[0] + 0.05 * self.rounds, DEMO_CENTRE[1]
        for p in self.photos.scatter(lat, lon, radius_m=280, n=n_photos, seed=500 + self.rounds):
            self.photos.jpeg(p)
            self.truth[p.id] = p
        self.rounds += 1
        out = await requests.submit(sweeps_of(self.services), lat, lon, 300, None)  # no requester: unbounded
        assert out.queued, out
        return out.jobs

    async def round(self, work_ahead: bool, jobs: int, ppj: int) -> dict:
        queued = await self.sweep(jobs * ppj)
        agent = make_agent(self.home, self.url, self.engine, work_ahead, queued, self.concurrency)
        t0 = time.perf_counter()
        code = await agent.run()            # stops by itself after the round's jobs (max_jobs)
        seconds = time.perf_counter() - t0
        assert code == 0 and len(agent.spool) == 0, (code, len(agent.spool))
        async with self.services.db.read() as s:
            bodies = [b for b in (await s.execute(select(SweepResult.body))).scalars() if b["jobId"] not in self.seen]
        self.seen |= {b["jobId"] for b in bodies}
        total = agent.contribution.read()
        photos, engine_s = (total[k] - self.done[k] for k in ("photos", "cpuSeconds"))
        self.done = {k: total[k] for k in self.done}
        # The engine's time is the agent's own count (its run of each job, geometry included).
        return {"ahead": work_ahead, "jobs": len(bodies), "seconds": seconds, "photos": photos,
                "fetch_s": statistics.mean(b["timings"]["fetchS"] for b in bodies),
                "engine_s": engine_s / max(1, len(bodies))}


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=12, help="jobs per round")
    ap.add_argument("--photos-per-job", type=int, default=8)
    ap.add_argument("--latency", type=float, default=0.25, help="seconds before the provider answers each photo")
    ap.add_argument("--photo-concurrency", type=int, default=4, help="the agent's photo_concurrency")
    ap.add_argument("--engine", default="sleep:0.05", help="sleep:S (S seconds per photo) or real (this CPU)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of each mode, alternating")
    args = ap.parse_args()
    if args.engine != "real" and not args.engine.startswith("sleep:"):
        ap.error("--engine: sleep:S or real")
    logging.getLogger("sis").setLevel(logging.WARNING)

    truth: dict = {}
    engine = real_engine() if args.engine == "real" else SleepEngine(float(args.engine.split(":", 1)[1]), truth)
    photos = FakePhotoProvider()
    photos.delay_s = args.latency
    await photos.start()
    tmp = Path(tempfile.mkdtemp(prefix="sis-bench-node-"))
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp}/sis.db", poll_interval_s=0,
                        engine_builds=engine.build, job_max_photos=args.photos_per_job, bench_unlimited=True,
                        sources={"panoramax": {"base_url": photos.api_url},
                                 "gdacs": {"base_url": "http://127.0.0.1:9"},
                                 "usgs": {"base_url": "http://127.0.0.1:9"}})
    services = await create_services(settings, start_background=False)
    sockets = bind_sockets(0, "127.0.0.1", family=socket.AF_INET)
    server = HTTPServer(make_app(services))
    server.add_sockets(sockets)
    bench = Bench(services, f"http://127.0.0.1:{sockets[0].getsockname()[1]}", photos, engine, tmp / "node", truth,
                  args.photo_concurrency)
    print(f"machine: {machine_speed():.2f} s for the 5 M-addition loop; photo latency {args.latency:g} s, "
          f"{args.photo_concurrency} at once; {args.jobs} jobs of {args.photos_per_job} photos a round; engine {args.engine}", flush=True)
    try:
        if args.engine == "real":           # loads, enrols and warms up outside the timed rounds
            await bench.round(True, 1, args.photos_per_job)
        rows = []
        for _ in range(args.rounds):
            for ahead in (False, True):
                row = await bench.round(ahead, args.jobs, args.photos_per_job)
                rows.append(row)
                print(f"work ahead {'on ' if ahead else 'off'}: {row['jobs']} jobs, {row['photos']} photos in "
                      f"{row['seconds']:.2f} s: {row['jobs'] / row['seconds']:.2f} jobs/s, "
                      f"{row['photos'] / row['seconds']:.1f} photos/s; per job: fetch {row['fetch_s']:.2f} s, "
                      f"engine {row['engine_s']:.2f} s", flush=True)
        rate = {a: statistics.median(r["photos"] / r["seconds"] for r in rows if r["ahead"] is a)
                for a in (False, True)}
        print(f"median photos/s: off {rate[False]:.1f}, on {rate[True]:.1f}; on / off {rate[True] / rate[False]:.2f}")
        print(f"machine: {machine_speed():.2f} s for the 5 M-addition loop")
    finally:
        server.stop()
        await services.close()
        await photos.stop()
        close = getattr(engine, "close", None)
        if close:
            close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
