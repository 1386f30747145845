"""The engine's model slots: depth, segmentation and detection, each filled by a configured architecture.

A slot's architecture is chosen by configuration (``EngineConfig.depth_model``,
``segmenter``, ``detector``) and must be the one its manifest entry names; its
weights come only from that entry, checked by sha256 (``weights.py``):

| slot | configuration value | manifest entry | architecture in the manifest |
|---|---|---|---|
| depth + classes | ``sis-dense`` (both) | ``dense`` | ``sis-dense/<backbone>/c<channels>/k17[/f<F>]`` |
| depth | ``depth-anything-v2-metric-vits`` (``-vitb``, ``-vitl``) | ``depth`` | the same, ``/max<max_depth_m>`` |
| classes | ``segformer-cityscapes`` | ``segmenter`` (a folder) | ``segformer-cityscapes`` |
| boxes | ``sis-centres``, torchvision builders on the engine's classes | ``detector`` | as ``models.detector_architecture`` |
| boxes | ``coco/<torchvision builder>`` | ``detector`` | ``coco/<builder>/k91`` |

Each slot reads the photo at its own size (``input_size``: the sis-* networks
the frame, ``EngineConfig.input_width`` x ``input_height``; Depth Anything V2
its 518 px short side; SegFormer its processor's; COCO detectors their
``min_size``), and its output is brought to the frame the geometry reads:
depth and class logits resized, boxes scaled.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from ..config import EngineConfig
from ..weights import WeightsEntry, WeightsError, load_into, verified_entry
from . import coco, depth_anything, segformer

SIS_DENSE = "sis-dense"
DAV2_PREFIX = "depth-anything-v2-metric-"
DEPTH_MODELS = (SIS_DENSE,) + tuple(DAV2_PREFIX + e for e in depth_anything.ENCODERS)
SEGMENTERS = (SIS_DENSE, segformer.ARCHITECTURE)


def depth_architecture(cfg: EngineConfig) -> str:
    """The manifest architecture of a Depth Anything V2 depth slot (its ``max_depth`` is part of it: the indoor
    and outdoor weights share a layout but not a range)."""
    return f"{cfg.depth_model}/max{cfg.max_depth_m:g}"


def coco_architecture(cfg: EngineConfig) -> str:
    return f"{cfg.detector}/k{coco.COCO_CLASSES}"


def build_depth(cfg: EngineConfig) -> depth_anything.DepthAnythingV2Metric:
    if not cfg.depth_model.startswith(DAV2_PREFIX):
        raise ValueError(f"unknown depth model {cfg.depth_model!r}; one of {', '.join(DEPTH_MODELS)}")
    return depth_anything.DepthAnythingV2Metric(cfg.depth_model[len(DAV2_PREFIX):], cfg.max_depth_m)


def build_coco(cfg: EngineConfig) -> nn.Module:
    """The torchvision model in its published layout (not yet wrapped to map labels)."""
    return coco.build(cfg.detector[len(coco.PREFIX):])


@dataclass
class Slot:
    """One loaded network and what it fills: ``roles`` among depth, seg, detections."""

    name: str                 # its manifest entry
    roles: tuple[str, ...]
    module: nn.Module
    entry: WeightsEntry
    size: tuple[int, int]     # (width, height) it reads photos at
    depth_focal_px: float | None = None   # the focal length (frame pixels) its depth's metres assume, if one


@dataclass
class Outputs:
    """One batch's outputs at the frame: depth (B, H, W) metres, classes (B, H, W) engine indices, boxes in
    frame pixels, and the focal length (frame pixels) the depth's metres assume, when the depth model has one."""

    depth: torch.Tensor
    seg: torch.Tensor
    detections: list
    depth_focal_px: float | None = None
    # (B,) each photo's focal length (frame pixels) as the dense network's focal head reads it, where it has one
    focal_guess_px: torch.Tensor | None = None
    timings: dict = field(default_factory=dict)


def _frame(cfg: EngineConfig) -> tuple[int, int]:
    return cfg.input_width, cfg.input_height


def load_slots(cfg: EngineConfig) -> list[Slot]:
    """Every configured slot, built and loaded from the manifest, in eval mode on the CPU."""
    from ..models import build_dense, build_detector, dense_architecture, dense_focal_px, detector_architecture

    if not cfg.weights_manifest:
        raise WeightsError("no weights manifest configured "
                           "(EngineConfig.weights_manifest, SIS_ENGINE_WEIGHTS_MANIFEST, or --weights)")
    if cfg.depth_model not in DEPTH_MODELS:
        raise WeightsError(f"unknown depth model {cfg.depth_model!r}; one of {', '.join(DEPTH_MODELS)}")
    if cfg.segmenter not in SEGMENTERS:
        raise WeightsError(f"unknown segmenter {cfg.segmenter!r}; one of {', '.join(SEGMENTERS)}")
    frame = _frame(cfg)
    slots = []
    dense_roles = tuple(r for r, m in (("depth", cfg.depth_model), ("seg", cfg.segmenter)) if m == SIS_DENSE)
    if dense_roles:
        dense = build_dense(cfg)
        slots.append(Slot("dense", dense_roles, dense.eval(),
                          load_into(dense, cfg.weights_manifest, "dense", dense_architecture(cfg)), frame,
                          dense_focal_px(cfg) if "depth" in dense_roles else None))
    if cfg.depth_model != SIS_DENSE:
        depth = build_depth(cfg)
        entry = load_into(depth, cfg.weights_manifest, "depth", depth_architecture(cfg))
        size = depth_anything.input_size(*frame, side=cfg.depth_input_side)
        slots.append(Slot("depth", ("depth",), depth.eval(), entry, size, depth_anything.focal_px(size[1], frame[1])))
    if cfg.segmenter != SIS_DENSE:
        folder, entry = verified_entry(cfg.weights_manifest, "segmenter", segformer.ARCHITECTURE)
        if not folder.is_dir():
            raise WeightsError(f"segmenter weights {folder} must be a transformers model folder")
        seg = segformer.load(folder)
        slots.append(Slot("segmenter", ("seg",), seg.eval(), entry, seg.input_size(*frame)))
    if cfg.detector.startswith(coco.PREFIX):
        inner = build_coco(cfg)
        entry = load_into(inner, cfg.weights_manifest, "detector", coco_architecture(cfg))
        det = coco.CocoDetector(inner).eval()
        slots.append(Slot("detector", ("detections",), det, entry, det.input_size(*frame)))
    else:
        det = build_detector(cfg)
        slots.append(Slot("detector", ("detections",), det.eval(),
                          load_into(det, cfg.weights_manifest, "detector", detector_architecture(cfg)), frame))
    return slots


def prepare(images: list[torch.Tensor], sizes, device: torch.device) -> dict[tuple[int, int], torch.Tensor]:
    """uint8 (3, h, w) images of any size -> one float batch in [0, 1] per distinct (width, height), resized
    from each image itself (antialiased), on the device."""
    out = {}
    for w, h in dict.fromkeys(sizes):
        out[(w, h)] = torch.cat([F.interpolate(img.to(device)[None].float(), size=(h, w), mode="bilinear",
                                               antialias=True, align_corners=False) for img in images]) / 255.0
    return out


def run(slots: list[Slot], batches: dict[tuple[int, int], torch.Tensor], frame: tuple[int, int],
        sync=None) -> Outputs:
    """Every slot over its batch; outputs brought to the frame.  ``sync`` (the device's synchronise) is called
    after each slot so that ``Outputs.timings`` (seconds per slot) are honest on a GPU."""
    import time

    fw, fh = frame
    depth = seg = dets = None
    focal = guess = None
    timings = {}
    for slot in slots:
        x = batches[slot.size]
        t = time.perf_counter()
        if slot.name == "dense":
            d, logits, log_focal = slot.module(x)
            if "depth" in slot.roles:
                depth, focal = d, slot.depth_focal_px
                if log_focal is not None:
                    guess = torch.exp(log_focal.float()) * max(fw, fh)
            if "seg" in slot.roles:
                seg = logits.argmax(1)
        elif slot.name == "depth":
            d = slot.module(x)
            depth = F.interpolate(d[:, None].float(), size=(fh, fw), mode="bilinear", align_corners=True)[:, 0]
            focal = slot.depth_focal_px
        elif slot.name == "segmenter":
            seg = slot.module(x, size=(fh, fw))
        else:
            dets = slot.module(list(x))
            if slot.size != frame:
                k = torch.tensor([fw / slot.size[0], fh / slot.size[1]] * 2, device=x.device)
                dets = [{**d, "boxes": d["boxes"] * k.to(d["boxes"].dtype)} for d in dets]
        if sync is not None:
            sync()
        timings[slot.name] = time.perf_counter() - t
    return Outputs(depth=depth, seg=seg, detections=dets, depth_focal_px=focal, focal_guess_px=guess,
                   timings=timings)

