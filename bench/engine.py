"""Sweep engine throughput: photos/s end to end and model-only, by batch size, and where the time goes.

    .venv/bin/python bench/engine.py [--photos 64] [--batch-sizes 1,2,4,8,16,32,64] [--device cpu]

End to end is ``Engine.run_job`` over a job of synthetic JPEGs served by the
loopback fake provider: fetch, decode, resize, both networks, calibration,
measurement, aggregation.  Model-only is the two networks' forward passes over
batches already decoded and resized.  The weights are UNTRAINED (seeded random
init, written to a temp dir): speed does not depend on training, but the
geometry's share does (an untrained detector finds nothing above the score
threshold, an untrained segmenter paints noise), so the geometry is also
timed on ground-truth inputs with real boxes and masks.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, bench/ comes first on the path, where bench/queue.py would shadow the standard
# library's queue (which torch imports): the repository root replaces it.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from sweep_engine.aggregate import aggregate  # noqa: E402
from sweep_engine.config import EngineConfig  # noqa: E402
from sweep_engine.geometry import measure_photo  # noqa: E402
from sweep_engine.models import random_weights  # noqa: E402
from sweep_engine.photos import decode, fetch_all, http_fetch  # noqa: E402
from sweep_engine.pipeline import Engine  # noqa: E402
from sweep_engine.synth.provider import FakeProvider, jpeg, job_for, synth_frames  # noqa: E402


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


async def bench(args) -> None:
    base = EngineConfig(backbone=args.backbone, detector=args.detector, device=args.device,
                        input_width=args.input_width, input_height=args.input_height)
    frames = synth_frames(seed=11, n=min(args.photos, 16), width=args.photo_width, height=args.photo_height)
    frames = [frames[i % len(frames)] for i in range(args.photos)]
    photos = {f"p{i}": jpeg(f) for i, f in enumerate(frames)}
    provider = FakeProvider(photos)
    await provider.start()
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        manifest = random_weights(base, tmp, seed=0)
        engine = Engine(EngineConfig(**{**base.__dict__, "weights_manifest": str(manifest)}))
        job = job_for(frames, provider.base_url)
        print(f"sweep engine benchmark: {engine.device_text}")
        print(f"  load average at start: {os.getloadavg()[0]:.2f} (on {os.cpu_count()} cores: other work on the "
              "machine competes for them)")
        print(f"  machine: {platform.machine()}, {torch.get_num_threads()} torch threads; "
              f"{'CUDA ' + torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU'}")
        print(f"  models: {base.backbone} dense + {base.detector}, input {base.input_width}x{base.input_height}; "
              f"photos {args.photo_width}x{args.photo_height} JPEG ({statistics.mean(map(len, photos.values())) / 1e3:.0f} kB), "
              f"{args.photos} per job; weights UNTRAINED (random init)")
        images = [decode(photos[f"p{i}"], engine.device) for i in range(len(frames))]

        print(f"\n{'batch':>5} {'end-to-end ph/s':>16} {'model-only ph/s':>16} {'ratio e2e/model':>16}")
        rows = []
        for bs in sizes:
            engine.config = EngineConfig(**{**engine.config.__dict__, "batch_size": bs})
            prepared = [engine.prepare(images[i:i + bs]) for i in range(0, len(images), bs)]
            engine.forward(prepared[0])  # warm-up at this batch shape
            model_s, e2e_s = [], []
            for _ in range(args.repeats):  # best of: the least disturbed run
                _sync(engine.device)
                t = time.perf_counter()
                for batch in prepared:
                    engine.forward(batch)
                _sync(engine.device)
                model_s.append(time.perf_counter() - t)
                e2e_s.append((await engine.run_job(job)).timings.total_s)
            model_ps, e2e_ps = len(images) / min(model_s), len(frames) / min(e2e_s)
            rows.append((bs, e2e_ps, model_ps))
            print(f"{bs:>5} {e2e_ps:>16.2f} {model_ps:>16.2f} {e2e_ps / model_ps:>16.2f}")

        best = max(rows, key=lambda r: r[1])[0]
        engine.config = EngineConfig(**{**engine.config.__dict__, "batch_size": best})
        stages = await breakdown(engine, job, photos, frames)
        total = sum(stages.values())
        print(f"\nwhere the time goes, end to end at batch {best} ({len(frames)} photos, {total:.2f} s):")
        for name, sec in stages.items():
            print(f"  {name:<34} {sec:8.3f} s  {100 * sec / total:5.1f} %  {1000 * sec / len(frames):8.2f} ms/photo")

        gt = [(f"g{i}", "2025-06-01T10:00:00Z", f.camera, f.depth, f.seg, f.detections()) for i, f in
              enumerate(synth_frames(seed=11, n=8, width=base.input_width, height=base.input_height))]
        t = time.perf_counter()
        pms = [measure_photo(*g)[0] for g in gt]
        geo = time.perf_counter() - t
        t = time.perf_counter()
        aggregate(pms)
        agg = time.perf_counter() - t
        n_boxes = sum(len(g[5]) for g in gt) / len(gt)
        print(f"\ngeometry on ground-truth inputs ({n_boxes:.0f} boxes/photo, real masks): "
              f"{1000 * geo / len(gt):.1f} ms/photo calibrate+measure, {1000 * agg / len(gt):.2f} ms/photo aggregate")
        print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
    await provider.stop()


async def breakdown(engine: Engine, job, photos, frames) -> dict[str, float]:
    """The run_job stages timed one by one, on the same engine and job."""
    out: dict[str, float] = {}
    t = time.perf_counter()
    raw = await fetch_all({p.id: p.url for p in job.photos}, http_fetch(), concurrency=engine.config.fetch_concurrency)
    out["fetch (loopback HTTP)"] = time.perf_counter() - t
    t = time.perf_counter()
    images = [decode(raw[p.id], engine.device) for p in job.photos]
    out["decode (JPEG)"] = time.perf_counter() - t
    bs = engine.config.batch_size
    out["resize to input"] = out["dense network"] = out["detector"] = out["outputs to numpy, argmax"] = 0.0
    outs = []
    for i in range(0, len(images), bs):
        t = time.perf_counter()
        batch = engine.prepare(images[i:i + bs])
        _sync(engine.device)
        out["resize to input"] += time.perf_counter() - t
        with torch.inference_mode(), engine._autocast():
            t = time.perf_counter()
            depth, logits = engine.dense(batch)
            _sync(engine.device)
            out["dense network"] += time.perf_counter() - t
            t = time.perf_counter()
            dets = engine.detector(list(batch))
            _sync(engine.device)
            out["detector"] += time.perf_counter() - t
        t = time.perf_counter()
        outs.extend(engine.to_outputs(depth, logits, dets))
        out["outputs to numpy, argmax"] += time.perf_counter() - t
    t = time.perf_counter()
    pms = [engine.measure(p, (img.shape[-1], img.shape[-2]), o)[0] for p, img, o in zip(job.photos, images, outs)]
    out["geometry (untrained outputs)"] = time.perf_counter() - t
    t = time.perf_counter()
    aggregate(pms)
    out["aggregate"] = time.perf_counter() - t
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--photos", type=int, default=64)
    p.add_argument("--batch-sizes", default="1,2,4,8,16,32,64")
    p.add_argument("--backbone", default="resnet18")
    p.add_argument("--detector", default="fasterrcnn_mobilenet_v3_large_320_fpn")
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeats", type=int, default=2, help="timed runs per batch size; the best is reported")
    p.add_argument("--input-width", type=int, default=256)
    p.add_argument("--input-height", type=int, default=192)
    p.add_argument("--photo-width", type=int, default=640)
    p.add_argument("--photo-height", type=int, default=480)
    asyncio.run(bench(p.parse_args(argv)))


if __name__ == "__main__":
    main()
