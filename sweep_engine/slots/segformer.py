"""Street segmentation: a Cityscapes SegFormer loaded by ``transformers`` from a local folder.

The folder is what ``save_pretrained`` writes and what the published models
hold (``config.json``, ``model.safetensors`` or ``pytorch_model.bin``, and
usually ``preprocessor_config.json``): e.g. NVIDIA's
``segformer-b0-finetuned-cityscapes-1024-1024`` (docs/weights.md for where and
on what terms).  The manifest pins the folder by ``weights.sha256_dir``; it is
checked before ``SegformerForSemanticSegmentation.from_pretrained(folder,
local_files_only=True, weights_only=True)`` reads it, so nothing is fetched and
no pickle runs code.  A folder whose weights do not fill the model exactly
(missing, unexpected or mismatched keys, which ``transformers`` would otherwise
fill with random values and a warning) is refused, naming the keys.

Classes: the model's ``config.id2label`` must be Cityscapes' 19 classes; each
maps onto an engine class by ``labels.CITYSCAPES_TO_SEG``.  A Mapillary Vistas
model has other labels and is refused rather than mapped by guess.

Input: the shorter side of ``preprocessor_config.json``'s size (1024 for the
``-1024-1024`` models; 1024 when the file says nothing), aspect kept, sides
multiples of 32, normalised with the processor's mean and standard deviation
(ImageNet's when absent).  The processor itself would squash a photo to a
square; the Cityscapes models were trained on crops of 2048 x 1024 frames, at
a scale the kept aspect preserves.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from ..labels import CITYSCAPES_CLASSES, CITYSCAPES_TO_SEG, SEG
from ..weights import WeightsError

ARCHITECTURE = "segformer-cityscapes"
DEFAULT_SIDE = 1024
_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)


def _side_and_norm(folder: Path) -> tuple[int, tuple, tuple]:
    path = folder / "preprocessor_config.json"
    if not path.exists():
        return DEFAULT_SIDE, _MEAN, _STD
    try:
        doc = json.loads(path.read_text())
    except ValueError as exc:
        raise WeightsError(f"{path} is not JSON: {exc}") from None
    size = doc.get("size", DEFAULT_SIDE)
    side = min(size.get("height", DEFAULT_SIDE), size.get("width", DEFAULT_SIDE)) if isinstance(size, dict) \
        else int(size)
    return int(side), tuple(doc.get("image_mean", _MEAN)), tuple(doc.get("image_std", _STD))


class CityscapesSegformer(nn.Module):
    """(B, 3, H, W) floats in [0, 1] -> engine class indices; SegFormer's logits (stride 4) resized first."""

    def __init__(self, model: nn.Module, side: int, mean, std):
        super().__init__()
        self.model = model
        self.side = side
        id2label = {int(k): str(v).strip().lower() for k, v in model.config.id2label.items()}
        names = tuple(id2label.get(i) for i in range(len(id2label)))
        if names != CITYSCAPES_CLASSES:
            raise WeightsError(f"the segmenter's classes are not Cityscapes' 19 in trainId order: {names}")
        self.register_buffer("table", torch.tensor([SEG[CITYSCAPES_TO_SEG[n]] for n in names]), persistent=False)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1), persistent=False)

    def forward(self, images: torch.Tensor, size=None) -> torch.Tensor:
        """Engine class indices (B, h, w) at ``size`` (default: the input's), from the logits resized there."""
        logits = self.model(pixel_values=(images - self.mean) / self.std).logits
        logits = F.interpolate(logits.float(), size=size or images.shape[-2:], mode="bilinear", align_corners=False)
        return self.table[logits.argmax(1)]

    def input_size(self, width: int, height: int) -> tuple[int, int]:
        scale = self.side / min(width, height)
        return max(32, int(round(width * scale / 32)) * 32), max(32, int(round(height * scale / 32)) * 32)


def load(folder: Path) -> CityscapesSegformer:
    """The verified folder's model (the caller has checked its sha256)."""
    try:
        from transformers import SegformerForSemanticSegmentation
    except ImportError:
        # The node app is built without transformers (docs/node-app.md): say so, not a traceback.
        raise WeightsError("the SegFormer segmentation slot needs the transformers package, which this "
                           "build does not carry: use the shipped segmentation, or run the engine from an "
                           "installation with the engine extra") from None

    if not (folder / "config.json").exists():
        raise WeightsError(f"segmenter folder {folder} has no config.json (a transformers model folder is needed)")
    try:
        model, info = SegformerForSemanticSegmentation.from_pretrained(
            str(folder), local_files_only=True, weights_only=True, output_loading_info=True)
    except (OSError, ValueError, RuntimeError) as exc:
        raise WeightsError(f"segmenter folder {folder} could not be loaded: {str(exc)[:400]}") from None
    parts = [f"{k.replace('_', ' ')}: {', '.join(sorted(map(str, v))[:8])}"
             for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v]
    if parts:
        raise WeightsError(f"segmenter weights in {folder} are not in the SegFormer layout its config.json "
                           f"describes: {'; '.join(parts)}")
    side, mean, std = _side_and_norm(folder)
    return CityscapesSegformer(model.eval(), side, mean, std)


def random_folder(folder: Path, side: int = DEFAULT_SIDE) -> Path:
    """An UNTRAINED SegFormer-B0 for Cityscapes (the published b0's configuration: depths 2-2-2-2, widths
    32-64-160-256, decoder 256, 19 classes) saved as ``save_pretrained`` writes it, with a processor config
    of ``side`` pixels: for tests and benchmarks (seed torch first)."""
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    id2label = dict(enumerate(CITYSCAPES_CLASSES))
    config = SegformerConfig(num_labels=len(CITYSCAPES_CLASSES), id2label=id2label,
                             label2id={v: k for k, v in id2label.items()})
    folder = Path(folder)
    SegformerForSemanticSegmentation(config).save_pretrained(str(folder))
    (folder / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "SegformerImageProcessor", "size": {"height": side, "width": side},
         "image_mean": list(_MEAN), "image_std": list(_STD), "do_normalize": True, "do_resize": True}, indent=2))
    return folder
