"""End to end on the CPU: coordinator + fake photo provider + `sis-node run --allow-cpu` with the
real sweep engine take a sweep request to validated results.

The engine's weights here are UNTRAINED (seeded random init, pinned by sha256 in a
manifest, as the engine's own tests do): this proves the whole path and the wire
contract, not the accuracy of the facts."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from node_agent.engine import EngineAdapter

from .support import db_counts, make_agent, request_sweep, start_sweep_coordinator, stop_sweep_coordinator

SIS_NODE = str(Path(sys.executable).with_name("sis-node"))
TINY = dict(backbone="mobilenetv3_small_100", detector="ssdlite320_mobilenet_v3_large", batch_size=4,
            fetch_timeout_s=5.0, device="cpu")


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    from sweep_engine.config import EngineConfig
    from sweep_engine.models import random_weights
    return random_weights(EngineConfig(**TINY), tmp_path_factory.mktemp("weights"), seed=7)


@pytest.fixture(scope="module")
def real_engine(weights):
    from sweep_engine.config import EngineConfig
    from sweep_engine.pipeline import Engine
    return EngineAdapter(Engine(EngineConfig(**TINY, weights_manifest=str(weights))))


async def test_sweep_request_to_validated_results_with_the_real_engine_in_process(sqlite_url, photos, tmp_path,
                                                                                 real_engine):
    coord = await start_sweep_coordinator(sqlite_url, photos, engine_builds=real_engine.build)
    try:
        await request_sweep(coord)
        jobs = len((await db_counts(coord))["jobs"])
        agent = make_agent(tmp_path / "a", coord.base_url, real_engine)
        task = asyncio.create_task(agent.run())
        await agent.wait_until(lambda: agent.contribution.read()["jobs"] + agent.contribution.read()["rejected"]
                               == jobs, 120)
        agent.request_stop()
        assert await asyncio.wait_for(task, 30) == 0
        counts = await db_counts(coord)
        assert [r.state for r in counts["results"]] == ["pending"] * jobs
    finally:
        await stop_sweep_coordinator(coord)


async def test_two_sis_node_processes_take_a_sweep_request_to_jobs_in_review(sqlite_url, photos, tmp_path,
                                                                            weights, real_engine):
    """The shipped command, twice (an untrusted node's job needs a second replica): real
    processes, the real engine on the CPU, the real coordinator, the fake photo provider."""
    coord = await start_sweep_coordinator(sqlite_url, photos, engine_builds=real_engine.build)
    procs = []
    try:
        await request_sweep(coord)
        jobs = len((await db_counts(coord))["jobs"])
        env = {**os.environ, "SIS_NODE_ENGINE_WEIGHTS": str(weights), "SIS_ENGINE_BACKBONE": TINY["backbone"],
               "SIS_ENGINE_DETECTOR": TINY["detector"], "SIS_ENGINE_BATCH_SIZE": "4",
               "SIS_NODE_HEARTBEAT_INTERVAL_S": "1", "SIS_NODE_IDLE_POLL_S": "0.5", "SIS_NODE_CPU_BUSY_PERCENT": "0",
               "SIS_NODE_PAUSE_WHEN_USER_ACTIVE": "false", "SIS_NODE_PAUSE_ON_BATTERY": "false",
               "SIS_NODE_CHECK_UPDATES": "false"}
        for name in ("a", "b"):
            log = open(tmp_path / f"{name}.log", "wb")
            procs.append((await asyncio.create_subprocess_exec(
                SIS_NODE, "run", "--coordinator", coord.base_url, "--allow-cpu", "--name", f"volunteer-{name}",
                env={**env, "SIS_NODE_HOME": str(tmp_path / name),
                     # b measures its photos' geometry in two worker processes: its replicas must agree with a's
                     **({"SIS_ENGINE_GEOMETRY_WORKERS": "2"} if name == "b" else {})},
                stdout=log, stderr=log), tmp_path / f"{name}.log"))

        loop = asyncio.get_running_loop()
        end = loop.time() + 240
        while {j.state for j in (await db_counts(coord))["jobs"]} != {"in_review"}:
            for p, log in procs:
                assert p.returncode is None, log.read_text()[-3000:]
            assert loop.time() < end, "\n".join(log.read_text()[-2000:] for _, log in procs)
            await asyncio.sleep(0.2)  # two other processes: nothing here to await
        for p, _ in procs:
            p.send_signal(signal.SIGTERM)
        assert [await asyncio.wait_for(p.wait(), 60) for p, _ in procs] == [0, 0]

        counts = await db_counts(coord)
        assert sorted(r.state for r in counts["results"]) == ["accepted"] * (2 * jobs)
        for r in counts["results"]:
            body = r.body
            assert body["device"].startswith("cpu (development run, --allow-cpu")
            assert body["engineBuild"] == real_engine.build
            accounted = [m["photoId"] for m in body["measurements"]] + [k["photoId"] for k in body["skipped"]]
            assert len(accounted) == len(set(accounted)) > 0
        for name in ("a", "b"):
            out = subprocess.run([SIS_NODE, "status", "--json"], capture_output=True, text=True,
                                 env={**env, "SIS_NODE_HOME": str(tmp_path / name)})
            doc = json.loads(out.stdout)
            assert doc["contribution"]["jobs"] == jobs and doc["spooled"] == 0 and not doc["running"]
            assert "first run: new node identity" in (tmp_path / f"{name}.log").read_text()
            assert (tmp_path / name / "logs" / "sis-node.log").exists()
        assert "measuring photos' geometry in 2 worker processes" in (tmp_path / "b.log").read_text()
    finally:
        for p, _ in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()
        await stop_sweep_coordinator(coord)
