"""torchvision's COCO detectors with their published 91-class heads, their labels mapped onto the engine's.

``coco/<builder>`` builds ``torchvision.models.detection.<builder>(weights=None,
weights_backbone=None, num_classes=91)``: the architecture of torchvision's
published COCO weights (``fasterrcnn_resnet50_fpn_v2_coco-dd69338a.pth`` and
the others, docs/weights.md), whose files are plain state dicts that load into
it with ``load_state_dict(strict=True)``.  Nothing is downloaded: the weights
come from the manifest.

Input: the detector's own transform resizes a photo so that its shorter side
is ``min_size`` (800 for the ResNet-50 models) unless the longer one would pass
``max_size`` (1333); the engine hands it the photo already at that size
(``input_size``), from the photo rather than from the smaller frame the
geometry reads, and scales the boxes back to the frame.

Labels: COCO's (``labels.COCO_TO_DET``) become the engine's detector labels
(1-based into ``labels.DET_CLASSES``); the other COCO classes are dropped.
"""
from __future__ import annotations

import torch
import torchvision
from torch import nn
from torchvision.models._meta import _COCO_CATEGORIES

from ..labels import COCO_TO_DET, DET_CLASSES

PREFIX = "coco/"
BUILDERS = ("fasterrcnn_resnet50_fpn_v2", "fasterrcnn_resnet50_fpn", "retinanet_resnet50_fpn_v2",
            "retinanet_resnet50_fpn", "fcos_resnet50_fpn", "fasterrcnn_mobilenet_v3_large_fpn",
            "fasterrcnn_mobilenet_v3_large_320_fpn", "ssdlite320_mobilenet_v3_large")
COCO_CLASSES = 91


def label_table() -> torch.Tensor:
    """COCO label (0..90) -> engine detector label (1..K), 0 where the engine has no use for the class."""
    table = torch.zeros(COCO_CLASSES, dtype=torch.long)
    for coco, ours in COCO_TO_DET.items():
        table[_COCO_CATEGORIES.index(coco)] = DET_CLASSES.index(ours) + 1
    return table


def build(builder: str) -> nn.Module:
    if builder not in BUILDERS:
        raise ValueError(f"unknown COCO detector {builder!r}; one of {', '.join(PREFIX + b for b in BUILDERS)}")
    ctor = getattr(torchvision.models.detection, builder)
    return ctor(weights=None, weights_backbone=None, num_classes=COCO_CLASSES)


class CocoDetector(nn.Module):
    """A torchvision COCO detector (``self.model``, in the published layout) whose outputs carry engine labels."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.register_buffer("table", label_table(), persistent=False)

    def forward(self, images) -> list[dict]:
        out = []
        for d in self.model(list(images)):
            labels = self.table.to(d["labels"].device)[d["labels"]]
            keep = labels > 0
            out.append({"boxes": d["boxes"][keep], "labels": labels[keep], "scores": d["scores"][keep]})
        return out

    def input_size(self, width: int, height: int) -> tuple[int, int]:
        """The size the detector's own transform would resize a ``width`` x ``height`` photo to."""
        t = self.model.transform
        if getattr(t, "fixed_size", None):
            fw, fh = t.fixed_size[1], t.fixed_size[0]
            return int(fw), int(fh)
        scale = min(float(t.min_size[-1]) / min(width, height), float(t.max_size) / max(width, height))
        return int(round(width * scale)), int(round(height * scale))
