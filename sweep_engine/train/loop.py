"""Training of the dense network (depth + classes) and the detector on generated scenes.

    python -m sweep_engine.train --out DIR --seed 0 --steps 600 --batch 8      # CPU, small
    python -m sweep_engine.train --out DIR --seed 0 --steps 20000 --batch 32 --device cuda
    python -m sweep_engine.train --assemble DIR     # after one --only dense and one --only detector run

Both networks are built by ``models.build_dense`` / ``models.build_detector``
from an ``EngineConfig`` (the architecture options below), with random init:
nothing is downloaded.  Each step renders ``batch`` fresh samples
(``data.sample(seed, step * batch + j)``), takes one AdamW step on the dense
network and one on the detector.  Given the seed, the options and the number
of torch threads, the run is deterministic (``torch.use_deterministic_algorithms``).

Losses: depth is L1 on log depth over pixels with known finite depth up to the
depth head's range (sky and unknown excluded), with ``--object-depth-weight``
weighing the pixels of standing objects (poles, signs, vehicles, people,
gates, entrances: a few pixels each, whose depth the object distances are
read from) against 1 for the rest; classes are cross-entropy
(unknown excluded); with ``--canonical-focal``, the focal head's is L1 on the
log of the scene's focal length over the frame's larger side; the detector's
are its own (``sis-centres``: a centre focal loss and an edge-distance
log-L1; torchvision's for theirs).
``--workers N`` renders the next batches in N other processes; the samples,
and so the weights, do not depend on it.  Every ``--log-every``
steps the mean losses go to ``train.log`` (JSON lines); every
``--checkpoint-every`` steps a checkpoint (``--resume`` continues it).
``--init MANIFEST`` starts from trained weights instead of random init
(fine-tuning; give it another ``--seed`` than the first run's, so that it sees
new scenes), and the provenance keeps their sha256.  ``--canonical-focal F``
(default 0.8) trains the depth for one focal length, F x the frame's larger
side (depth targets x that / the scene's own; the architecture says so,
``/fF``, and the engine reads it with ``dense_focal`` F, rescaled to each
photo's measured focal length) and adds the focal head, which learns each
scene's focal length; ``--init`` may then name weights trained the other way
(0: neither).  At the end the weights are written as float16 state dicts
with a manifest pinning their sha256, license and provenance (the command,
seed, generator version).
"""
from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
import os
import re
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from ..config import EngineConfig
from ..labels import SEG
from ..models import build_dense, build_detector, dense_architecture, dense_focal_px, detector_architecture
from ..weights import MANIFEST_VERSION, WeightsEntry, load_into, read_manifest, sha256_bytes
from . import augment
from .data import Variety, det_label_index, generator_id, sample

LICENSE = "Apache-2.0 (the project's own; trained only on this project's generated scenes)"


def batch_tensors(samples, max_depth_m: float, canonical_px: float | None = None):
    """A batch's tensors. With ``canonical_px`` (``--canonical-focal``) the depth targets are what a camera of
    that focal length (frame pixels) would read at each pixel's angle: depth x canonical / the scene's focal,
    so that the network reads angles, which the photo shows, and not a focal length it must guess (a plain
    road has nothing of known size to guess it from); the engine scales them back by the photo's own."""
    images = torch.from_numpy(np.stack([s.rgb for s in samples])).permute(0, 3, 1, 2).float() / 255.0
    depth = torch.from_numpy(np.stack([s.depth for s in samples]).astype(np.float32))
    if canonical_px:
        depth = depth * torch.tensor([canonical_px / s.info["focal_px"] for s in samples],
                                     dtype=torch.float32)[:, None, None]
    seg = torch.from_numpy(np.stack([s.seg for s in samples]).astype(np.int64))
    targets = [{"boxes": torch.from_numpy(s.boxes).reshape(-1, 4),
                "labels": torch.tensor([det_label_index(lab) for lab in s.labels], dtype=torch.int64)}
               for s in samples]
    valid = torch.isfinite(depth) & (depth > 0.1) & (depth <= max_depth_m)
    return images, depth, valid, seg, targets


def log_focal_targets(samples) -> torch.Tensor:
    """Each scene's focal length over its frame's larger side, in log units: what a focal head reads."""
    return torch.tensor([math.log(s.info["focal_px"] / max(s.rgb.shape[:2])) for s in samples], dtype=torch.float32)


# The classes whose depth the object distances are read from: a few pixels each, so that a mean over all
# pixels all but ignores them (``--object-depth-weight`` weighs them more).
OBJECT_SEG = tuple(SEG[c] for c in ("pole", "sign", "vehicle", "person", "gate", "entrance"))


def dense_loss(dense, images, depth, valid, seg, object_weight: float = 1.0,
               log_focal: torch.Tensor | None = None) -> dict:
    """Depth: mean |log error| over the valid pixels, those of ``OBJECT_SEG`` weighed ``object_weight``
    times; classes: cross-entropy; and, for a network with a focal head, its mean |log error| against
    ``log_focal`` (``log_focal_targets``)."""
    pred, logits, pred_focal = dense(images)
    d = (torch.log(pred[valid]) - torch.log(depth[valid])).abs()
    if not d.numel():
        l_depth = pred.sum() * 0
    elif object_weight == 1.0:
        l_depth = d.mean()
    else:
        w = 1.0 + (object_weight - 1.0) * torch.isin(seg[valid], torch.tensor(OBJECT_SEG, device=seg.device)).float()
        l_depth = (w * d).sum() / w.sum()
    losses = {"depth": l_depth, "seg": F.cross_entropy(logits, seg, ignore_index=augment.IGNORE)}
    if pred_focal is not None:
        losses["focal"] = (pred_focal - log_focal.to(pred_focal.device)).abs().mean()
    return losses


def lr_at(step: int, total: int, base: float, warmup: int = 30) -> float:
    if step < warmup:
        return base * (step + 1) / warmup
    return base * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))


def half_state(module: torch.nn.Module) -> dict:
    """The state dict with floating tensors stored as float16 (loading casts them back)."""
    return {k: (v.detach().cpu().half() if v.is_floating_point() else v.detach().cpu()).contiguous()
            for k, v in module.state_dict().items()}


def write_manifest(out: Path, modules: dict, provenance: dict, trained: bool = True,
                   manifest_name: str = "weights.json") -> Path:
    entries = []
    for name, (module, arch) in modules.items():
        buf = io.BytesIO()
        torch.save(half_state(module), buf)
        data = buf.getvalue()
        (out / f"{name}.pt").write_bytes(data)
        entry = dataclasses.asdict(WeightsEntry(name=name, file=f"{name}.pt", architecture=arch,
                                                sha256=sha256_bytes(data), license=LICENSE,
                                                provenance=provenance["text"], trained=trained))
        entry.update(sizeBytes=len(data), dtype="float16", build={k: v for k, v in provenance.items() if k != "text"})
        entries.append(entry)
    path = out / manifest_name
    path.write_text(json.dumps({"manifestVersion": MANIFEST_VERSION, "weights": entries}, indent=2) + "\n")
    return path


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sweep_engine.train", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="directory for weights.json, dense.pt, detector.pt, train.log")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=600, help="planned steps (the learning-rate schedule's length)")
    p.add_argument("--stop-after", type=int, default=None, help="stop after this many steps (default: --steps)")
    p.add_argument("--warmup", type=int, default=30, help="steps of linear learning-rate warm-up")
    p.add_argument("--budget-minutes", type=float, default=None,
                   help="fit the run into this many minutes: it times the second half of its warm-up (give it "
                        "one longer than the render workers' queue, 2 x --workers) and lowers --steps to what "
                        "fits, so its schedule, and so its weights, are those of a run given that --steps, which "
                        "the provenance's command names; a run that still overruns by a tenth stops there "
                        "(--stop-after in the command)")
    p.add_argument("--only", choices=("dense", "detector"), default=None,
                   help="train one network (two processes can then train both at once); --assemble joins them")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--detector-lr", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (part of what makes a run repeatable)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--backbone", default="mobilenetv3_small_100")
    p.add_argument("--detector", default="sis-centres")
    p.add_argument("--workers", type=int, default=0,
                   help="processes rendering samples ahead of the training step (0: in the training process); "
                        "the samples, and so the weights, are the same whatever this is")
    p.add_argument("--decoder-channels", type=int, default=64)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--height", type=int, default=192)
    p.add_argument("--augment", type=float, default=1.0, help="photometric augmentation strength (0: none)")
    p.add_argument("--object-depth-weight", type=float, default=1.0,
                   help="weight of the depth error at object pixels (poles, signs, vehicles, people, gates, "
                        "entrances) against 1 for the rest")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--canonical-focal", type=_focal_factor, default=0.8, metavar="F",
                   help="train the depth for one focal length, F x the frame's larger side (default 0.8, as the "
                        "shipped weights and the engine's default dense_focal; the generator's span 0.5-1.2), "
                        "with a focal head that reads each photo's; the engine rescales the depth to each photo's "
                        "measured focal length; 0: each scene's own, no focal head (the first five runs). --init "
                        "may name weights trained for each scene's own focal length, not for another F")
    p.add_argument("--init", default=None, metavar="MANIFEST",
                   help="start from these weights instead of random init (fine-tuning): a weights manifest, "
                        "whose sha256 of each network is kept in the provenance")
    return p


class _Batches(torch.utils.data.Dataset):
    """Batch ``i`` of a run: the samples ``data.sample(seed, i * batch + j)``, a pure function of ``i``."""

    def __init__(self, args, variety: Variety, start: int, stop: int):
        self.seed, self.batch, self.width, self.height = args.seed, args.batch, args.width, args.height
        self.variety, self.start, self.stop = variety, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, i: int):
        step = self.start + i
        # Without the synth.Frame (truth the loop does not read): a render worker sends a third of the bytes.
        return [dataclasses.replace(sample(self.seed, step * self.batch + j, width=self.width, height=self.height,
                                           variety=self.variety), frame=None)
                for j in range(self.batch)]


def _worker_init(_):
    torch.set_num_threads(1)


def _as_is(batch):
    return batch


def _batches(args, variety: Variety, start: int, stop: int):
    data = _Batches(args, variety, start, stop)
    if args.workers <= 0:
        return (data[i] for i in range(len(data)))
    loader = torch.utils.data.DataLoader(data, batch_size=None, shuffle=False, num_workers=args.workers,
                                         worker_init_fn=_worker_init, prefetch_factor=2,
                                         collate_fn=_as_is)  # a module function: spawned workers pickle it
    return iter(loader)


def config_for(args) -> EngineConfig:
    return EngineConfig(backbone=args.backbone, detector=args.detector, decoder_channels=args.decoder_channels,
                        input_width=args.width, input_height=args.height, device=args.device,
                        dense_focal=args.canonical_focal)


def train(args, argv: list[str] | None = None) -> Path:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    if args.device.startswith("cuda"):  # cuBLAS is deterministic only with a fixed workspace (set before CUDA starts)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # On CUDA some backward passes (bilinear upsampling's) have no deterministic kernel: there the run warns
    # instead of failing, and is repeatable in its data and schedule but not to the bit.
    torch.use_deterministic_algorithms(True, warn_only=args.device.startswith("cuda"))
    torch.manual_seed(args.seed)
    cfg = config_for(args)
    device = torch.device(args.device)
    dense, detector = build_dense(cfg).to(device), build_detector(cfg).to(device)
    opt_d = torch.optim.AdamW(dense.parameters(), lr=args.lr, weight_decay=1e-4)
    opt_k = torch.optim.AdamW(detector.parameters(), lr=args.detector_lr, weight_decay=1e-4)
    names = (args.only,) if args.only else ("dense", "detector")
    stop = min(args.stop_after or args.steps, args.steps)
    variety = Variety(augment=args.augment)
    tag = f"-{args.only}" if args.only else ""
    ckpt, log_path = out / f"checkpoint{tag}.pt", out / f"train{tag}.log"
    step, spent = 0, 0.0
    if args.resume and ckpt.exists():
        state = torch.load(ckpt, map_location=device, weights_only=True)
        dense.load_state_dict(state["dense"]), detector.load_state_dict(state["detector"])
        opt_d.load_state_dict(state["opt_dense"]), opt_k.load_state_dict(state["opt_detector"])
        step, spent = int(state["step"]), float(state["seconds"])
    else:
        if log_path.exists():
            log_path.unlink()
        for name, module, arch in (("dense", dense, _init_architecture(args, cfg)),
                                   ("detector", detector, detector_architecture(cfg))):
            if args.init and name in names:
                # Weights for each photo's own focal length have no focal head: it starts at its init.
                load_into(module, args.init, name, arch,
                          absent=("focal_head.",) if arch != dense_architecture(cfg) else ())
    dense.train(), detector.train()
    sums: dict[str, float] = {}
    t_last = time.perf_counter()
    batches = _batches(args, variety, step, stop)
    timed = (args.warmup // 2, args.warmup - 1)   # with --budget-minutes: after the render queue's first fill
    timed_from = 0.0
    while step < stop:
        if args.budget_minutes and step == timed[0]:
            timed_from = spent
        if args.budget_minutes and step == timed[1] and step > timed[0]:
            # The learning rate has not yet left its warm-up, which does not depend on --steps: from here on the
            # run is the run of the --steps that fits, as if it had been given.
            rate = (timed[1] - timed[0]) / max(1e-9, spent - timed_from)
            args.steps = max(step + 1, min(args.steps, step + int(rate * (args.budget_minutes * 60 - spent))))
            stop = min(stop, args.steps)
            print(json.dumps({"step": step, "planned_steps": args.steps, "steps_per_s": round(rate, 2)}), flush=True)
        if args.budget_minutes and spent > args.budget_minutes * 66:
            stop = args.stop_after = step
            print(json.dumps({"step": step, "stopped": "over the time budget"}), flush=True)
            break
        samples = next(batches)
        images, depth, valid, seg, targets = batch_tensors(samples, cfg.max_depth_m, dense_focal_px(cfg))
        images, depth, valid, seg = images.to(device), depth.to(device), valid.to(device), seg.to(device)
        if "dense" in names:
            for g in opt_d.param_groups:
                g["lr"] = lr_at(step, args.steps, args.lr, args.warmup)
            losses = dense_loss(dense, images, depth, valid, seg, args.object_depth_weight,
                                log_focal_targets(samples))
            opt_d.zero_grad(set_to_none=True)
            sum(losses.values()).backward()
            torch.nn.utils.clip_grad_norm_(dense.parameters(), 5.0)
            opt_d.step()
            for k, v in losses.items():
                sums[k] = sums.get(k, 0.0) + float(v.detach())
        if "detector" in names:
            for g in opt_k.param_groups:
                g["lr"] = lr_at(step, args.steps, args.detector_lr, args.warmup)
            losses = detector(list(images), [{k: v.to(device) for k, v in t.items()} for t in targets])
            total = sum(losses.values())
            opt_k.zero_grad(set_to_none=True)
            total.backward()
            torch.nn.utils.clip_grad_norm_(detector.parameters(), 10.0)
            opt_k.step()
            for k, v in losses.items():
                sums[k] = sums.get(k, 0.0) + float(v.detach())
        step += 1
        now = time.perf_counter()
        spent += now - t_last
        t_last = now
        if step % args.log_every == 0 or step == stop:
            n = args.log_every if step % args.log_every == 0 else step % args.log_every
            row = {"step": step, "seconds": round(spent, 1), **{k: round(v / n, 5) for k, v in sums.items()}}
            with log_path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
            sums = {}
        if step % args.checkpoint_every == 0 or step == stop:
            torch.save({"dense": dense.state_dict(), "detector": detector.state_dict(), "opt_dense": opt_d.state_dict(),
                        "opt_detector": opt_k.state_dict(), "step": step, "seconds": spent}, ckpt)
    dense.eval(), detector.eval()
    # --resume continues a checkpoint of the same run to the same result (the data are indexed by step and
    # nothing draws on torch's generator after init), so the command that reproduces the weights omits it.
    command = "python -m sweep_engine.train " + " ".join(shlex.quote(a) for a in _reproducing(argv or [], args))
    prov = {"command": command, "seed": args.seed, "generator": generator_id(), "steps": step,
            "seconds": round(spent, 1), "device": str(device), "threads": args.threads,
            "torch": torch.__version__}
    this_run = (f"`{command}` (seed {args.seed}, generator {prov['generator']}, {step} steps, "
                f"{spent / 60:.1f} min on {device}, torch {torch.__version__})")
    prov["text"] = f"trained from random init on generated scenes only: {this_run}"
    if args.init:
        init = read_manifest(args.init)
        prov["init"] = {n: {"sha256": init[n].sha256} for n in names}
        earlier = earlier_runs([init[n].provenance for n in names])
        prov["text"] = ("fine-tuned from " + ", ".join(f"{n} sha256 {init[n].sha256[:16]}…" for n in names)
                        + ", which came from these runs in turn: "
                        + "; ".join(f"{i}) {r}" for i, r in enumerate(earlier, 1))
                        + f"; then this run, on generated scenes only: {this_run}")
    modules = {"dense": (dense.cpu(), dense_architecture(cfg)),
               "detector": (detector.cpu(), detector_architecture(cfg))}
    return write_manifest(out, {n: modules[n] for n in names}, prov,
                          manifest_name=f"weights-{args.only}.json" if args.only else "weights.json")


# One training run as a provenance names it (``train``'s ``this_run``; a test holds the two together): its
# command, then what it ran on. A provenance this module wrote starts with one of ``_OURS``.
_RUN = re.compile(r"`python -m sweep_engine\.train [^`]+` \(seed \d+, generator \S+, \d+ steps, "
                  r"[\d.]+ min on .+?, torch [^\s)]+\)")
_OURS = ("trained from random init on generated scenes only: ", "fine-tuned from ")


def earlier_runs(provenances: list[str]) -> list[str]:
    """The training runs the init networks' provenances name, each once, in the order the texts name them
    (each text names a run after the runs it came from). A fine-tune's provenance lists these instead of
    nesting each network's whole provenance, which doubled with every run (a 33 KB manifest after five). A
    provenance this module did not write (an operator's own weights, fine-tuned elsewhere) is kept whole,
    once: what it says beyond the runs it names is not ours to drop."""
    out: list[str] = []
    for text in provenances:
        for run in (_RUN.findall(text) if text.startswith(_OURS) else []) or [text]:
            if run not in out:
                out.append(run)
    return out


def _focal_factor(text: str) -> float:
    f = float(text)
    if not (math.isfinite(f) and 0.0 <= f <= 4.0):
        raise argparse.ArgumentTypeError(f"{text}: a multiple of the frame's larger side, 0 (none) or up to 4")
    return f


def _init_architecture(args, cfg: EngineConfig) -> str:
    """The dense architecture ``--init``'s weights must have: this run's, or, for a run that moves them to
    ``--canonical-focal``, the same layout with each photo's own focal length (the tensors are the same; what
    the depth means changes, which is what the run trains)."""
    entry = read_manifest(args.init).get("dense") if args.init and cfg.dense_focal else None
    own_focal = dense_architecture(dataclasses.replace(cfg, dense_focal=0.0))
    return own_focal if entry is not None and entry.architecture == own_focal else dense_architecture(cfg)


def _reproducing(argv: list[str], args) -> list[str]:
    """The arguments that reproduce the run: without --resume, with the --steps (and --stop-after) that
    --budget-minutes chose in its place, and --canonical-focal named even where its default was taken (the
    default has changed once)."""
    if not any(a.startswith("--canonical-focal") for a in argv):
        argv = [*argv, "--canonical-focal", f"{args.canonical_focal:g}"]
    if not args.budget_minutes:
        return [a for a in argv if a != "--resume"]
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in ("--budget-minutes", "--steps", "--stop-after"):
            skip = True
        elif a != "--resume" and not a.startswith(("--budget-minutes=", "--steps=", "--stop-after=")):
            out.append(a)
    return out + ["--steps", str(args.steps)] + (["--stop-after", str(args.stop_after)] if args.stop_after else [])


def assemble(out: str | Path) -> Path:
    """Join ``weights-dense.json`` and ``weights-detector.json`` (from two ``--only`` runs) into ``weights.json``."""
    out = Path(out)
    entries = []
    for name in ("dense", "detector"):
        entries += json.loads((out / f"weights-{name}.json").read_text())["weights"]
    path = out / "weights.json"
    path.write_text(json.dumps({"manifestVersion": MANIFEST_VERSION, "weights": entries}, indent=2) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--assemble"]:
        print(f"wrote {assemble(argv[1])}")
        return 0
    path = train(parser().parse_args(argv), argv)
    print(f"wrote {path}")
    return 0
