"""The sweep engine as the job loop sees it: ``run_job(job, images) -> Result``, with its
version and build hash (which enrolment and every result carry).

The engine is part of the node app; it is never fetched. Its weights are files
pinned by sha256 in a weights manifest (``engine_weights``), loaded with
``torch.load(weights_only=True)`` by the engine itself. Photos reach it as the
bytes the agent already fetched, in memory, through the engine's ``fetch`` hook:
the engine reads nothing from the network on the agent's behalf.
"""
from __future__ import annotations

import asyncio
import os
from typing import Any

from sweep_engine.schema import Job, Result


class EngineMissing(RuntimeError):
    """This installation has no usable sweep engine; the message says what is missing."""


class EngineAdapter:
    """The real ``sweep_engine.pipeline.Engine`` behind the loop's synchronous call.

    The loop runs ``run_job`` in a thread of its own; the engine's coroutine runs
    there on a private event loop, so the agent's loop (heartbeats) never waits on it.
    """

    def __init__(self, engine: Any):
        self.engine = engine
        self.version = engine.version
        self.build = engine.build

    def run_job(self, job: Job, images: dict[str, bytes]) -> Result:
        from sweep_engine.photos import PhotoError

        by_url = {p.url: images.get(p.id) for p in job.photos}

        async def from_memory(url: str) -> bytes:
            data = by_url.get(url)
            if data is None:
                raise PhotoError("not fetched by the agent")
            return data

        return asyncio.run(self.engine.run_job(job, fetch=from_memory, node_id="pending"))

    def close(self) -> None:
        """Stop the engine's geometry worker processes, if it has any."""
        close = getattr(self.engine, "close", None)
        if close:
            close()


def load_engine(device, weights_manifest: str, cpu_threads: int = 1) -> EngineAdapter:
    """The real sweep engine on ``device`` (a ``loop.Device``), with the pinned weights.

    ``cpu_threads``, the CPU the volunteer gives the engine beside a GPU: beyond the job's own thread, each
    is a process measuring photos' geometry (``sweep_engine.geometry_pool``), which on a GPU is most of a
    photo's time. On the CPU the networks use those threads themselves, and the geometry stays in the job's
    thread. ``SIS_ENGINE_GEOMETRY_WORKERS``, where set, is taken as it is."""
    try:
        from sweep_engine.config import DEFAULT_WEIGHTS_MANIFEST, EngineConfig
        from sweep_engine.pipeline import Engine
        from sweep_engine.weights import WeightsError
    except ImportError as exc:
        raise EngineMissing(f"this installation has no sweep engine ({exc}): install the node app "
                            "(docs/node-app.md), or in a source checkout run `make install-full` (torch, "
                            "torchvision and timm)") from None
    # Unset means the weights shipped inside the engine (sweep_engine/default_weights).
    weights_manifest = weights_manifest or DEFAULT_WEIGHTS_MANIFEST
    where = device.label.split(" ", 1)[0] if device.on_gpu else "cpu"
    try:
        workers = {} if "SIS_ENGINE_GEOMETRY_WORKERS" in os.environ else {
            "geometry_workers": max(0, cpu_threads - 1) if device.on_gpu else 0}
        config = EngineConfig.from_env(device=where, weights_manifest=weights_manifest, **workers)
        return EngineAdapter(Engine(config))
    except (WeightsError, ValueError, TypeError) as exc:
        raise EngineMissing(f"the sweep engine cannot start: {exc}") from None
