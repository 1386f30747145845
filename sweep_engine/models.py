"""The networks: a dense network (timm encoder, depth and segmentation heads) and a detector.

The detector is either the project's own ``sis-centres`` (the same kind of
timm encoder and decoder as the dense network, with a centre-heatmap and box
head: small and quick to train from random init on a CPU) or a torchvision one.

Architectures are chosen by configuration and built with ``pretrained=False``
/ ``weights=None``: weights come only from files in the weights manifest
(``weights.py``).  The published models the engine can also load (Depth
Anything V2, a Cityscapes SegFormer, torchvision's COCO detectors) are in
``slots/``, which loads every configured slot.  Both take photos resized to the configured input size, so
depth, classes and boxes share one pixel frame, the one the geometry reads.
"""
from __future__ import annotations

import math

import timm
import torch
import torchvision
from torch import nn
from torch.nn import functional as F

from .config import EngineConfig
from .labels import DET_CLASSES, SEG_CLASSES
from .slots import SIS_DENSE, build_coco, build_depth, coco_architecture, depth_architecture, segformer
from .slots.coco import PREFIX as COCO_PREFIX
from .weights import WeightsError, load_into, pin, write_weights

_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)
CENTRES = "sis-centres"
DETECTORS = (CENTRES, "fasterrcnn_mobilenet_v3_large_320_fpn", "fasterrcnn_mobilenet_v3_large_fpn",
             "fasterrcnn_resnet50_fpn", "ssdlite320_mobilenet_v3_large")


class _EncoderDecoder(nn.Module):
    """A timm encoder (features at strides 4-32) and a top-down decoder to stride 4."""

    def __init__(self, backbone: str, channels: int):
        super().__init__()
        self.encoder = timm.create_model(backbone, pretrained=False, features_only=True, out_indices=(1, 2, 3, 4))
        self.stride = int(self.encoder.feature_info.reduction()[0])
        self.lateral = nn.ModuleList(nn.Conv2d(c, channels, 1) for c in self.encoder.feature_info.channels())
        self.smooth = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels),
                                    nn.ReLU(inplace=True))
        self.register_buffer("mean", torch.tensor(_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(_STD).view(1, 3, 1, 1), persistent=False)

    def decode_features(self, images: torch.Tensor) -> torch.Tensor:
        feats = self.encoder((images - self.mean) / self.std)
        y = self.lateral[-1](feats[-1])
        for feat, lateral in zip(reversed(feats[:-1]), reversed(self.lateral[:-1])):
            y = F.interpolate(y, size=feat.shape[-2:], mode="bilinear", align_corners=False) + lateral(feat)
        return self.smooth(y)


class DenseNet(_EncoderDecoder):
    """Shared encoder, a small top-down decoder, and two heads: metric depth and class logits; and, for a
    network whose depth is trained for one focal length (``--canonical-focal``), a third: the photo's focal
    length as the network reads it.

    Such a depth reads angles, so a wrong focal length given as measured rescales every depth cue with it and
    cancels out of the calibration's checks (a plain road has nothing else to contradict it). The focal head
    is what the network makes of the scene's scale (the apparent size of lanes, cars, doors, windows), kept
    apart from the depth so that the verdict can hold a measured focal length against it, and a photo that
    states none is solved from it. ``focal_prior``: that one focal length over the frame's larger side, where
    the head starts; 0: no head (a depth metric for each photo's own camera).
    """

    FOCAL_GRID = (3, 4)  # the decoder's features pooled to this grid (rows, columns) feed the focal head

    def __init__(self, backbone: str, n_classes: int, channels: int = 64, max_depth_m: float = 80.0,
                 focal_prior: float = 0.0):
        super().__init__(backbone, channels)
        self.depth_head = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(inplace=True),
                                        nn.Conv2d(channels, 1, 1))
        self.seg_head = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(inplace=True),
                                      nn.Conv2d(channels, n_classes, 1))
        self.max_depth_m = max_depth_m
        self.focal_head = None
        if focal_prior:
            cells = self.FOCAL_GRID[0] * self.FOCAL_GRID[1]
            self.focal_head = nn.Sequential(nn.Flatten(), nn.Linear(channels * cells, channels),
                                            nn.ReLU(inplace=True), nn.Linear(channels, 1))
            nn.init.zeros_(self.focal_head[-1].weight)   # it starts at the prior, so a fine-tune starts calm
            nn.init.constant_(self.focal_head[-1].bias, math.log(focal_prior))

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """``images``: (B, 3, H, W) floats in [0, 1].  Returns depth (B, H, W) metres, logits (B, K, H, W),
        and, with a focal head, the log of each photo's focal length over its larger side (B,); else None."""
        size = images.shape[-2:]
        y = self.decode_features(images)
        depth = self.max_depth_m * torch.sigmoid(self.depth_head(y)) + 0.05
        depth = F.interpolate(depth, size=size, mode="bilinear", align_corners=False)[:, 0]
        logits = F.interpolate(self.seg_head(y), size=size, mode="bilinear", align_corners=False)
        log_focal = None
        if self.focal_head is not None:
            log_focal = self.focal_head(F.adaptive_avg_pool2d(y, self.FOCAL_GRID))[:, 0]
        return depth, logits, log_focal


class CentreDetector(_EncoderDecoder):
    """Objects as points: a per-class heatmap of box centres and, per cell, the distances to the box's edges.

    On the decoder's stride-4 grid.  Training (``forward(images, targets)``,
    torchvision's convention: boxes in pixels, labels 1..K) returns the losses:
    a focal loss on Gaussian centre targets (CenterNet) and an L1 loss on the
    log edge distances at the cells near each centre.  Inference returns, per
    image, ``{"boxes", "labels", "scores"}``: the heatmap's local maxima above
    ``score_thresh``, each box the heat-weighted mean of the boxes its 3 x 3
    neighbourhood predicts.
    """

    def __init__(self, backbone: str, n_classes: int, channels: int = 64, max_detections: int = 100,
                 score_thresh: float = 0.05):
        super().__init__(backbone, channels)
        self.n_classes = n_classes
        self.heat_head = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(inplace=True),
                                       nn.Conv2d(channels, n_classes, 1))
        self.box_head = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(inplace=True),
                                      nn.Conv2d(channels, 4, 1))
        nn.init.constant_(self.heat_head[-1].bias, -4.6)  # a prior of 1 % per cell: the focal loss starts calm
        self.max_detections, self.score_thresh = max_detections, score_thresh

    def heads(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Heat logits (B, K, h, w) and edge distances in pixels (B, 4, h, w): left, top, right, bottom."""
        y = self.decode_features(images)
        return self.heat_head(y), torch.exp(self.box_head(y).clamp(-4.0, 6.0)) * self.stride

    def forward(self, images, targets=None):
        x = torch.stack(list(images)) if isinstance(images, (list, tuple)) else images
        heat, ltrb = self.heads(x)
        if self.training:
            if targets is None:
                raise ValueError("training needs targets")
            return self.losses(heat, ltrb, targets)
        return self.decode(heat, ltrb, x.shape[-2:])

    def _targets(self, target: dict, h: int, w: int):
        """Heat (K, h, w), and per cell the box it regresses (h, w, 4, pixels) and its weight (h, w)."""
        s = self.stride
        heat = torch.zeros(self.n_classes, h, w)
        boxes = torch.zeros(h, w, 4)
        weight = torch.zeros(h, w)
        gy = (torch.arange(h, dtype=torch.float32) + 0.5)[:, None]
        gx = (torch.arange(w, dtype=torch.float32) + 0.5)[None, :]
        for box, label in zip(target["boxes"].float().cpu(), target["labels"].cpu()):
            x0, y0, x1, y1 = (float(c) for c in box)
            cx, cy = (x0 + x1) / 2 / s, (y0 + y1) / 2 / s
            sx, sy = max(0.5, (x1 - x0) / s / 6), max(0.5, (y1 - y0) / s / 6)
            g = torch.exp(-((gx - cx) ** 2) / (2 * sx * sx) - ((gy - cy) ** 2) / (2 * sy * sy))
            iy, ix = min(h - 1, max(0, int(cy))), min(w - 1, max(0, int(cx)))
            g[iy, ix] = 1.0
            k = int(label) - 1
            heat[k] = torch.maximum(heat[k], g)
            take = g > weight  # a cell regresses the object whose centre it is nearest
            boxes[take] = box.float()
            weight = torch.where(take, g, weight)
        return heat, boxes, weight

    def losses(self, heat: torch.Tensor, ltrb: torch.Tensor, targets) -> dict:
        b, _, h, w = heat.shape
        s = self.stride
        made = [self._targets(t, h, w) for t in targets]
        gt = torch.stack([m[0] for m in made]).to(heat.device)
        gboxes = torch.stack([m[1] for m in made]).to(heat.device)
        weight = torch.stack([m[2] for m in made]).to(heat.device)
        p = torch.sigmoid(heat).clamp(1e-4, 1 - 1e-4)
        pos = gt >= 1.0
        n = pos.sum().clamp(min=1)
        focal = -(torch.where(pos, (1 - p) ** 2 * torch.log(p), (1 - gt) ** 4 * p ** 2 * torch.log(1 - p))).sum() / n
        cy = (torch.arange(h, device=heat.device, dtype=torch.float32) + 0.5) * s
        cx = (torch.arange(w, device=heat.device, dtype=torch.float32) + 0.5) * s
        cy, cx = cy[:, None].expand(h, w), cx[None, :].expand(h, w)
        want = torch.stack([cx - gboxes[..., 0], cy - gboxes[..., 1], gboxes[..., 2] - cx, gboxes[..., 3] - cy], 1)
        use = (weight > 0.3) & (want.min(1).values > 0)  # cells inside their box, near its centre
        wts = weight * use
        err = (torch.log(ltrb) - torch.log(want.clamp(min=0.25))).abs().sum(1)
        box = (err * wts).sum() / wts.sum().clamp(min=1.0)
        return {"centre_focal": focal, "box_log_l1": box}

    @torch.no_grad()
    def decode(self, heat: torch.Tensor, ltrb: torch.Tensor, size) -> list[dict]:
        b, k, h, w = heat.shape
        s = self.stride
        p = torch.sigmoid(heat.float())
        ltrb = ltrb.float()
        peaks = p * (F.max_pool2d(p, 3, stride=1, padding=1) == p)
        cy = (torch.arange(h, device=p.device, dtype=torch.float32) + 0.5) * s
        cx = (torch.arange(w, device=p.device, dtype=torch.float32) + 0.5) * s
        cy, cx = cy[:, None].expand(h, w), cx[None, :].expand(h, w)
        boxes_all = torch.stack([cx - ltrb[:, 0], cy - ltrb[:, 1], cx + ltrb[:, 2], cy + ltrb[:, 3]], -1)  # B,h,w,4
        out = []
        for i in range(b):
            scores, idx = peaks[i].flatten().topk(min(self.max_detections, k * h * w))
            keep = scores >= self.score_thresh
            scores, idx = scores[keep], idx[keep]
            cls, yy, xx = idx // (h * w), (idx % (h * w)) // w, idx % w
            boxes = []
            for c, y, x in zip(cls.tolist(), yy.tolist(), xx.tolist()):
                y0, y1, x0, x1 = max(0, y - 1), min(h, y + 2), max(0, x - 1), min(w, x + 2)
                wt = p[i, c, y0:y1, x0:x1].reshape(-1, 1)
                boxes.append((boxes_all[i, y0:y1, x0:x1].reshape(-1, 4) * wt).sum(0) / wt.sum())
            boxes = torch.stack(boxes) if boxes else torch.zeros(0, 4, device=p.device)
            boxes[:, 0::2] = boxes[:, 0::2].clamp(0, float(size[1]))
            boxes[:, 1::2] = boxes[:, 1::2].clamp(0, float(size[0]))
            out.append({"boxes": boxes, "labels": cls + 1, "scores": scores})
        return out


def dense_architecture(cfg: EngineConfig) -> str:
    """The layout and what its depth means: ``/fF`` where it was trained for one focal length (F x the frame's
    larger side), so that weights trained either way are never read the other way; such a network also
    has the focal head (``DenseNet``)."""
    focal = f"/f{cfg.dense_focal:g}" if cfg.dense_focal else ""
    return f"sis-dense/{cfg.backbone}/c{cfg.decoder_channels}/k{len(SEG_CLASSES)}{focal}"


def dense_focal_px(cfg: EngineConfig) -> float | None:
    """The focal length (frame pixels) the dense network's depth assumes; None where it is each photo's own."""
    return cfg.dense_focal * max(cfg.input_width, cfg.input_height) if cfg.dense_focal else None


def detector_architecture(cfg: EngineConfig) -> str:
    if cfg.detector == CENTRES:
        return f"{CENTRES}/{cfg.backbone}/c{cfg.decoder_channels}/k{len(DET_CLASSES)}"
    return f"{cfg.detector}/k{len(DET_CLASSES) + 1}"


def build_dense(cfg: EngineConfig) -> DenseNet:
    """The dense network; one trained for one focal length (``dense_focal``) has a focal head too, starting at
    that focal length."""
    return DenseNet(cfg.backbone, len(SEG_CLASSES), cfg.decoder_channels, cfg.max_depth_m,
                    focal_prior=cfg.dense_focal)


def build_detector(cfg: EngineConfig) -> nn.Module:
    if cfg.detector not in DETECTORS:
        raise ValueError(f"unknown detector {cfg.detector!r}; one of {', '.join(DETECTORS)}")
    if cfg.detector == CENTRES:
        return CentreDetector(cfg.backbone, len(DET_CLASSES), cfg.decoder_channels)
    ctor = getattr(torchvision.models.detection, cfg.detector)
    extra = {"min_size": min(cfg.input_height, cfg.input_width),
             "max_size": max(cfg.input_height, cfg.input_width)} if cfg.detector.startswith("fasterrcnn") else {}
    return ctor(weights=None, weights_backbone=None, num_classes=len(DET_CLASSES) + 1, **extra)


def load_models(cfg: EngineConfig) -> tuple[DenseNet, nn.Module, dict]:
    """Both networks with their weights from the manifest, in eval mode on the CPU; and the manifest entries."""
    if not cfg.weights_manifest:
        raise WeightsError("no weights manifest configured "
                           "(EngineConfig.weights_manifest, SIS_ENGINE_WEIGHTS_MANIFEST, or --weights)")
    dense, detector = build_dense(cfg), build_detector(cfg)
    entries = {"dense": load_into(dense, cfg.weights_manifest, "dense", dense_architecture(cfg)),
               "detector": load_into(detector, cfg.weights_manifest, "detector", detector_architecture(cfg))}
    return dense.eval(), detector.eval(), entries


def random_weights(cfg: EngineConfig, out_dir, seed: int = 0, segmenter_side: int = segformer.DEFAULT_SIDE):
    """UNTRAINED weights from a seeded random init for every configured slot, in each architecture's published
    layout, with their manifest: for tests and benchmarks only.

    Facts from these are not meaningful; the manifest says ``trained: false``.
    """
    from pathlib import Path

    torch.manual_seed(seed)
    modules = {}
    if SIS_DENSE in (cfg.depth_model, cfg.segmenter):
        modules["dense"] = (build_dense(cfg), dense_architecture(cfg))
    if cfg.depth_model != SIS_DENSE:
        modules["depth"] = (build_depth(cfg), depth_architecture(cfg))
    if cfg.detector.startswith(COCO_PREFIX):
        modules["detector"] = (build_coco(cfg), coco_architecture(cfg))
    else:
        modules["detector"] = (build_detector(cfg), detector_architecture(cfg))
    provenance = f"random init, torch.manual_seed({seed}); untrained"
    path = write_weights(out_dir, modules, provenance=provenance, license="Apache-2.0", trained=False)
    if cfg.segmenter != SIS_DENSE:
        folder = segformer.random_folder(Path(out_dir) / "segmenter", side=segmenter_side)
        pin(path, "segmenter", folder, segformer.ARCHITECTURE, license="Apache-2.0", provenance=provenance,
            trained=False)
    return path
