"""Sweep engine throughput: photos/s end to end and model-only, by batch size, and where the time goes.

    .venv/bin/python bench/engine.py [--config shipped|dav2] [--photos 16] [--batch-sizes 1,4,8] [--device cpu]
        [--geometry-workers N]

Configurations: ``shipped`` (the default) is the architecture the engine ships
with (``mobilenetv3_small_100`` dense network + ``sis-centres`` detector at
256 x 192) and its shipped weights; ``dav2`` replaces the depth slot with
Depth Anything V2-S metric at its native 518 px short side (bf16 autocast on
CUDA; the CPU runs float32), its weights UNTRAINED (seeded random init in the
published layout: speed does not depend on training); classes and boxes stay
the shipped networks', on the shipped weights.  ``--backbone`` / ``--detector`` change the sis-*
architectures (random weights then).

End to end is ``Engine.run_job`` over a job of synthetic JPEGs served by the
loopback fake provider: fetch, decode, resize, every slot, calibration,
measurement, aggregation.  Model-only is the slots' forward passes over
batches already decoded and resized.  The geometry is also timed on
ground-truth inputs with real boxes and masks (an untrained network's share
of it says nothing).  Say which device gave the figures: the header prints it.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
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
from sweep_engine.config import DEFAULT_WEIGHTS_MANIFEST, EngineConfig  # noqa: E402
from sweep_engine.geometry import measure_photo  # noqa: E402
from sweep_engine.models import random_weights  # noqa: E402
from sweep_engine.weights import pin, read_manifest  # noqa: E402
from sweep_engine.photos import decode, fetch_all, http_fetch  # noqa: E402
from sweep_engine.pipeline import Engine  # noqa: E402
from sweep_engine.slots import run as run_slots  # noqa: E402
from sweep_engine.synth.provider import FakeProvider, jpeg, job_for, synth_frames  # noqa: E402


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def configuration(args) -> tuple[EngineConfig, bool]:
    """The engine configuration benchmarked, and whether it runs on the shipped weights."""
    shipped = EngineConfig()
    base = EngineConfig(backbone=args.backbone or shipped.backbone, detector=args.detector or shipped.detector,
                        device=args.device, input_width=args.input_width, input_height=args.input_height,
                        geometry_workers=args.geometry_workers)
    if args.config == "dav2":
        base = EngineConfig(**{**base.__dict__, "depth_model": "depth-anything-v2-metric-vits",
                               "depth_input_side": args.depth_side, "bf16": True})
    on_shipped = (base.backbone, base.detector, base.input_width, base.input_height) \
        == (shipped.backbone, shipped.detector, shipped.input_width, shipped.input_height)
    return base, on_shipped


def weights_for(base: EngineConfig, on_shipped: bool, tmp: str) -> tuple[str, str]:
    """The manifest to run on and what its weights are: the shipped ones where the configuration's sis-*
    networks are the shipped architecture, the rest (a Depth Anything V2 slot) UNTRAINED random init in its
    published layout."""
    if on_shipped and base.depth_model == "sis-dense":
        return DEFAULT_WEIGHTS_MANIFEST, "the shipped ones"
    manifest = random_weights(base, tmp, seed=0)
    if not on_shipped:
        return str(manifest), "UNTRAINED (random init in each architecture's layout)"
    for entry in read_manifest(DEFAULT_WEIGHTS_MANIFEST).values():  # the shipped dense and detector, re-pinned
        shutil.copy(Path(DEFAULT_WEIGHTS_MANIFEST).parent / entry.file, Path(tmp) / entry.file)
        pin(manifest, entry.name, Path(tmp) / entry.file, entry.architecture, license=entry.license,
            provenance=entry.provenance, trained=entry.trained)
    return str(manifest), ("the shipped dense network and detector; the depth slot UNTRAINED (random init, "
                           "published layout)")


async def bench(args) -> None:
    torch.set_num_threads(args.threads)
    base, on_shipped = configuration(args)
    frames = synth_frames(seed=11, n=min(args.photos, 16), width=args.photo_width, height=args.photo_height)
    frames = [frames[i % len(frames)] for i in range(args.photos)]
    photos = {f"p{i}": jpeg(f) for i, f in enumerate(frames)}
    provider = FakeProvider(photos)
    await provider.start()
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        manifest, weights_text = weights_for(base, on_shipped, tmp)
        engine = Engine(EngineConfig(**{**base.__dict__, "weights_manifest": str(manifest)}))
        job = job_for(frames, provider.base_url)
        print(f"sweep engine benchmark, configuration '{args.config}': {engine.device_text}")
        if engine.device.type != "cuda":
            print("  CPU FIGURES: no GPU was used for these numbers (bf16 applies on CUDA only; the CPU runs float32)")
        print(f"  load average at start: {os.getloadavg()[0]:.2f} (on {os.cpu_count()} cores: other work on the "
              "machine competes for them)")
        print(f"  machine: {platform.machine()}, {torch.get_num_threads()} torch threads; "
              f"{'CUDA ' + torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU'}")
        slots = ", ".join(f"{s.name} {s.entry.architecture} at {s.size[0]}x{s.size[1]}" for s in engine.slots)
        workers = base.geometry_workers
        print(f"  slots: {slots}; geometry frame {base.input_width}x{base.input_height}, geometry in "
              + (f"{workers} worker process{'es' * (workers > 1)}" if workers else "the job's thread"))
        print(f"  photos {args.photo_width}x{args.photo_height} JPEG "
              f"({statistics.mean(map(len, photos.values())) / 1e3:.0f} kB), {args.photos} per job; weights "
              + weights_text)
        images = [decode(photos[f"p{i}"], engine.device) for i in range(len(frames))]

        if workers:  # started once per session by a node, not per job: started before anything is timed
            await engine.run_job(job)
        names = [s.name for s in engine.slots]
        print(f"\n{'batch':>5} {'end-to-end ph/s':>16} {'model-only ph/s':>16} {'ratio e2e/model':>16}  "
              + "  ".join(f"{n + ' ms/ph':>16}" for n in names))
        rows = []
        for bs in sizes:
            engine.config = EngineConfig(**{**engine.config.__dict__, "batch_size": bs})
            prepared = [engine.prepare(images[i:i + bs]) for i in range(0, len(images), bs)]
            engine.forward(prepared[0])  # warm-up at this batch shape
            model_s, e2e_s, per_slot = [], [], []
            for _ in range(args.repeats):  # best of: the least disturbed run
                spent = dict.fromkeys(names, 0.0)
                _sync(engine.device)
                t = time.perf_counter()
                for batch in prepared:
                    with torch.inference_mode(), engine._autocast():
                        out = run_slots(engine.slots, batch.tensors, engine.frame, sync=engine._sync)
                    engine.to_outputs(out)
                    for k, v in out.timings.items():
                        spent[k] += v
                _sync(engine.device)
                model_s.append(time.perf_counter() - t)
                per_slot.append(spent)
                e2e_s.append((await engine.run_job(job)).timings.total_s)
            best = min(range(len(model_s)), key=model_s.__getitem__)
            model_ps, e2e_ps = len(images) / model_s[best], len(frames) / min(e2e_s)
            rows.append((bs, e2e_ps, model_ps))
            print(f"{bs:>5} {e2e_ps:>16.2f} {model_ps:>16.2f} {e2e_ps / model_ps:>16.2f}  "
                  + "  ".join(f"{1000 * per_slot[best][n] / len(images):>16.1f}" for n in names))

        best = max(rows, key=lambda r: r[1])[0]
        engine.config = EngineConfig(**{**engine.config.__dict__, "batch_size": best})
        stages = await breakdown(engine, job, photos, frames)
        total = sum(stages.values())
        print(f"\nwhere the time goes, end to end at batch {best} ({len(frames)} photos, {total:.2f} s):")
        for name, sec in stages.items():
            print(f"  {name:<66} {sec:8.3f} s  {100 * sec / total:5.1f} %  {1000 * sec / len(frames):8.2f} ms/photo")

        truth = synth_frames(seed=11, n=8, width=base.input_width, height=base.input_height)
        gt = [(f"g{i}", "2025-06-01T10:00:00Z", f.camera, f.depth, f.seg, f.detections()) for i, f in enumerate(truth)]
        t = time.perf_counter()
        pms = [measure_photo(*g, image=f.rgb)[0] for g, f in zip(gt, truth)]
        geo = time.perf_counter() - t
        t = time.perf_counter()
        aggregate(pms)
        agg = time.perf_counter() - t
        n_boxes = sum(len(g[5]) for g in gt) / len(gt)
        print(f"\ngeometry on ground-truth inputs ({n_boxes:.0f} boxes/photo, real masks): "
              f"{1000 * geo / len(gt):.1f} ms/photo calibrate+measure (road edge check included), "
              f"{1000 * agg / len(gt):.2f} ms/photo aggregate")
        print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
        engine.close()
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
    out["resize to each slot's input"] = 0.0
    for slot in engine.slots:
        out[f"{slot.name} ({slot.entry.architecture})"] = 0.0
    out["outputs to numpy"] = 0.0
    outs = []
    for i in range(0, len(images), bs):
        t = time.perf_counter()
        batch = engine.prepare(images[i:i + bs])
        _sync(engine.device)
        out["resize to each slot's input"] += time.perf_counter() - t
        with torch.inference_mode(), engine._autocast():
            res = run_slots(engine.slots, batch.tensors, engine.frame, sync=engine._sync)
        for slot in engine.slots:
            out[f"{slot.name} ({slot.entry.architecture})"] += res.timings[slot.name]
        t = time.perf_counter()
        outs.extend(engine.to_outputs(res))
        out["outputs to numpy"] += time.perf_counter() - t
    t = time.perf_counter()
    # With the photo, as a node's job measures it: the road edges' check against the photo's lines runs too.
    pms = [engine.measure(p, (img.shape[-1], img.shape[-2]), o, image=img)[0]
           for p, img, o in zip(job.photos, images, outs)]
    out["geometry (these weights' outputs, with the road edge check)"] = time.perf_counter() - t
    t = time.perf_counter()
    aggregate(pms)
    out["aggregate"] = time.perf_counter() - t
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", choices=("shipped", "dav2"), default="shipped",
                   help="shipped: the shipped architecture and weights; dav2: Depth Anything V2-S metric at 518")
    p.add_argument("--photos", type=int, default=16)
    p.add_argument("--batch-sizes", default="1,4,8")
    p.add_argument("--backbone", default=None, help="sis-* encoder (default: the shipped one)")
    p.add_argument("--detector", default=None, help="detector (default: the shipped sis-centres)")
    p.add_argument("--depth-side", type=int, default=518, help="dav2: the depth slot's short side, pixels")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--geometry-workers", type=int, default=0,
                   help="processes measuring photos' geometry beside the networks (0: in the job's thread)")
    p.add_argument("--repeats", type=int, default=1, help="timed runs per batch size; the best is reported")
    p.add_argument("--input-width", type=int, default=256)
    p.add_argument("--input-height", type=int, default=192)
    p.add_argument("--photo-width", type=int, default=640)
    p.add_argument("--photo-height", type=int, default=480)
    asyncio.run(bench(p.parse_args(argv)))


if __name__ == "__main__":
    main()
