"""The networks: a dense network (timm encoder, depth and segmentation heads) and a torchvision detector.

Architectures are chosen by configuration and built with ``pretrained=False``
/ ``weights=None``: weights come only from files in the weights manifest
(``weights.py``).  Both take photos resized to the configured input size, so
depth, classes and boxes share one pixel frame, the one the geometry reads.
"""
from __future__ import annotations

import timm
import torch
import torchvision
from torch import nn
from torch.nn import functional as F

from .config import EngineConfig
from .labels import DET_CLASSES, SEG_CLASSES
from .weights import WeightsError, load_into, write_weights

_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)
DETECTORS = ("fasterrcnn_mobilenet_v3_large_320_fpn", "fasterrcnn_mobilenet_v3_large_fpn",
             "fasterrcnn_resnet50_fpn", "ssdlite320_mobilenet_v3_large")


class DenseNet(nn.Module):
    """Shared encoder, a small top-down decoder, and two heads: metric depth and class logits."""

    def __init__(self, backbone: str, n_classes: int, channels: int = 64, max_depth_m: float = 80.0):
        super().__init__()
        self.encoder = timm.create_model(backbone, pretrained=False, features_only=True, out_indices=(1, 2, 3, 4))
        self.lateral = nn.ModuleList(nn.Conv2d(c, channels, 1) for c in self.encoder.feature_info.channels())
        self.smooth = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels),
                                    nn.ReLU(inplace=True))
        self.depth_head = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(inplace=True),
                                        nn.Conv2d(channels, 1, 1))
        self.seg_head = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(inplace=True),
                                      nn.Conv2d(channels, n_classes, 1))
        self.max_depth_m = max_depth_m
        self.register_buffer("mean", torch.tensor(_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``images``: (B, 3, H, W) floats in [0, 1].  Returns depth (B, H, W) metres and logits (B, K, H, W)."""
        size = images.shape[-2:]
        feats = self.encoder((images - self.mean) / self.std)
        y = self.lateral[-1](feats[-1])
        for feat, lateral in zip(reversed(feats[:-1]), reversed(self.lateral[:-1])):
            y = F.interpolate(y, size=feat.shape[-2:], mode="bilinear", align_corners=False) + lateral(feat)
        y = self.smooth(y)
        depth = self.max_depth_m * torch.sigmoid(self.depth_head(y)) + 0.05
        depth = F.interpolate(depth, size=size, mode="bilinear", align_corners=False)[:, 0]
        logits = F.interpolate(self.seg_head(y), size=size, mode="bilinear", align_corners=False)
        return depth, logits


def dense_architecture(cfg: EngineConfig) -> str:
    return f"sis-dense/{cfg.backbone}/c{cfg.decoder_channels}/k{len(SEG_CLASSES)}"


def detector_architecture(cfg: EngineConfig) -> str:
    return f"{cfg.detector}/k{len(DET_CLASSES) + 1}"


def build_dense(cfg: EngineConfig) -> DenseNet:
    return DenseNet(cfg.backbone, len(SEG_CLASSES), cfg.decoder_channels, cfg.max_depth_m)


def build_detector(cfg: EngineConfig) -> nn.Module:
    if cfg.detector not in DETECTORS:
        raise ValueError(f"unknown detector {cfg.detector!r}; one of {', '.join(DETECTORS)}")
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


def random_weights(cfg: EngineConfig, out_dir, seed: int = 0):
    """UNTRAINED weights from a seeded random init, with their manifest: for tests and benchmarks only.

    Facts from these are not meaningful; the manifest says ``trained: false``.
    """
    torch.manual_seed(seed)
    return write_weights(out_dir, {"dense": (build_dense(cfg), dense_architecture(cfg)),
                                   "detector": (build_detector(cfg), detector_architecture(cfg))},
                         provenance=f"random init, torch.manual_seed({seed}); untrained", license="Apache-2.0",
                         trained=False)
