"""Depth Anything V2, metric: a DINOv2 ViT (timm) and a DPT head, in the published checkpoints' key layout.

The published metric checkpoints (``depth_anything_v2_metric_vkitti_vits.pth``
and the others, docs/weights.md) are plain state dicts whose keys are
``pretrained.*`` (the DINOv2 encoder, named as in the official DINOv2 code) and
``depth_head.*`` (the DPT head).  This module builds the same architecture so
that such a file loads with ``load_state_dict(strict=True)``:

- ``pretrained`` is timm's ``vit_small_patch14_dinov2`` (or base/large), whose
  parameter names are DINOv2's own (``cls_token``, ``pos_embed``,
  ``patch_embed.proj``, ``blocks.N.{norm1,attn.qkv,attn.proj,ls1.gamma,norm2,
  mlp.fc1,mlp.fc2,ls2.gamma}``, ``norm``), plus DINOv2's ``mask_token``, which
  timm leaves out and the checkpoints carry (unused at inference).  No key map
  is needed beyond that one added parameter.
- The forward pass follows the official one, not timm's: position embeddings
  resized by ``scale_factor`` with DINOv2's 0.1 offset, bicubic, no
  anti-aliasing; the normed tokens of blocks (2, 5, 8, 11) for ViT-S/B
  ((4, 11, 17, 23) for ViT-L) feed the head.
- ``depth_head`` is the DPT head with the metric variant's last layer (a
  sigmoid times ``max_depth``: 80 m for the outdoor Virtual KITTI 2 models, 20 m
  for the indoor Hypersim ones).

Input: the photo resized, aspect kept, so that its shorter side is 518 px and
both sides are multiples of 14 (``input_size``: the official ``lower_bound``
resize), normalised with ImageNet's mean and standard deviation.

Focal length: a metric depth network reads distance from apparent size, so its
metres assume the focal length of the camera it was trained on, in its input's
pixels.  The outdoor models were trained on Virtual KITTI 2 (1242 x 375,
focal 725.0087 px) resized to a 518 px short side: 725.0087 x 518 / 375 =
1001.5 px at the network's input.  A photo whose focal length in the same
input pixels is ``f`` is read ``f / 1001.5`` times too near; ``focal_px``
gives that training focal length in any frame, and the engine rescales the
depth by the photo's focal length over it when that is measured (docs/engine.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import timm
import torch
from torch import nn
from torch.nn import functional as F

PATCH = 14
NATIVE_SIDE = 518
_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)
# Virtual KITTI 2's camera (fx = fy = 725.0087 px at 1242 x 375), resized to a 518 px short side for training.
VKITTI2_FOCAL_PX = 725.0087
VKITTI2_HEIGHT_PX = 375


@dataclass(frozen=True)
class Encoder:
    timm_name: str
    features: int
    out_channels: tuple[int, int, int, int]
    layers: tuple[int, int, int, int]


# The official model_configs (metric_depth/README.md) and intermediate_layer_idx.
ENCODERS: dict[str, Encoder] = {
    "vits": Encoder("vit_small_patch14_dinov2", 64, (48, 96, 192, 384), (2, 5, 8, 11)),
    "vitb": Encoder("vit_base_patch14_dinov2", 128, (96, 192, 384, 768), (2, 5, 8, 11)),
    "vitl": Encoder("vit_large_patch14_dinov2", 256, (256, 512, 1024, 1024), (4, 11, 17, 23)),
}


def _multiple_of_14(x: float, min_val: int) -> int:
    y = int(round(x / PATCH)) * PATCH
    return y if y >= min_val else int(math.ceil(x / PATCH)) * PATCH


def input_size(width: int, height: int, side: int = NATIVE_SIDE) -> tuple[int, int]:
    """(width, height) the network reads a ``width`` x ``height`` image at: the shorter side ``side``, aspect kept,
    multiples of 14 (the official ``Resize(keep_aspect_ratio=True, ensure_multiple_of=14, 'lower_bound')``)."""
    scale = max(side / height, side / width)
    return _multiple_of_14(scale * width, side), _multiple_of_14(scale * height, side)


class _ResidualConvUnit(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.conv1 = nn.Conv2d(features, features, 3, padding=1)
        self.conv2 = nn.Conv2d(features, features, 3, padding=1)

    def forward(self, x):
        return self.conv2(F.relu(self.conv1(F.relu(x)))) + x


class _FusionBlock(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.out_conv = nn.Conv2d(features, features, 1)
        self.resConfUnit1 = _ResidualConvUnit(features)
        self.resConfUnit2 = _ResidualConvUnit(features)

    def forward(self, x, skip=None, size=None):
        if skip is not None:
            x = x + self.resConfUnit1(skip)
        x = self.resConfUnit2(x)
        x = F.interpolate(x, **({"size": size} if size is not None else {"scale_factor": 2}), mode="bilinear",
                          align_corners=True)
        return self.out_conv(x)


class DPTHead(nn.Module):
    """The DPT head as Depth Anything V2 names it: ``projects``, ``resize_layers``, ``scratch.*``."""

    def __init__(self, embed_dim: int, features: int, out_channels: tuple[int, int, int, int]):
        super().__init__()
        self.projects = nn.ModuleList(nn.Conv2d(embed_dim, c, 1) for c in out_channels)
        self.resize_layers = nn.ModuleList([
            nn.ConvTranspose2d(out_channels[0], out_channels[0], 4, stride=4),
            nn.ConvTranspose2d(out_channels[1], out_channels[1], 2, stride=2),
            nn.Identity(),
            nn.Conv2d(out_channels[3], out_channels[3], 3, stride=2, padding=1),
        ])
        s = nn.Module()
        for i, c in enumerate(out_channels, 1):
            setattr(s, f"layer{i}_rn", nn.Conv2d(c, features, 3, padding=1, bias=False))
        for i in range(1, 5):
            setattr(s, f"refinenet{i}", _FusionBlock(features))
        s.output_conv1 = nn.Conv2d(features, features // 2, 3, padding=1)
        s.output_conv2 = nn.Sequential(nn.Conv2d(features // 2, 32, 3, padding=1), nn.ReLU(True),
                                       nn.Conv2d(32, 1, 1), nn.Sigmoid())
        self.scratch = s

    def forward(self, tokens: list[torch.Tensor], ph: int, pw: int) -> torch.Tensor:
        """Four (B, ph * pw, C) token maps -> (B, 1, 14 ph, 14 pw) in [0, 1]."""
        s = self.scratch
        maps = []
        for i, t in enumerate(tokens):
            x = t.permute(0, 2, 1).reshape(t.shape[0], t.shape[-1], ph, pw)
            maps.append(getattr(s, f"layer{i + 1}_rn")(self.resize_layers[i](self.projects[i](x))))
        l1, l2, l3, l4 = maps
        p = s.refinenet4(l4, size=l3.shape[2:])
        p = s.refinenet3(p, l3, size=l2.shape[2:])
        p = s.refinenet2(p, l2, size=l1.shape[2:])
        p = s.refinenet1(p, l1)
        out = F.interpolate(s.output_conv1(p), (ph * PATCH, pw * PATCH), mode="bilinear", align_corners=True)
        return s.output_conv2(out)


class DepthAnythingV2Metric(nn.Module):
    """Depth Anything V2 metric: (B, 3, H, W) floats in [0, 1], sides multiples of 14 -> (B, H, W) metres."""

    def __init__(self, encoder: str = "vits", max_depth: float = 80.0):
        super().__init__()
        if encoder not in ENCODERS:
            raise ValueError(f"unknown Depth Anything V2 encoder {encoder!r}; one of {', '.join(ENCODERS)}")
        spec = ENCODERS[encoder]
        self.pretrained = timm.create_model(spec.timm_name, pretrained=False, img_size=NATIVE_SIDE, num_classes=0)
        dim = self.pretrained.embed_dim
        self.pretrained.mask_token = nn.Parameter(torch.zeros(1, dim))  # DINOv2's; in the checkpoints, unused here
        self.depth_head = DPTHead(dim, spec.features, spec.out_channels)
        self.layers = spec.layers
        self.max_depth = float(max_depth)
        self.register_buffer("mean", torch.tensor(_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(_STD).view(1, 3, 1, 1), persistent=False)

    def _pos_embed(self, ph: int, pw: int, dtype) -> torch.Tensor:
        pos = self.pretrained.pos_embed
        n = pos.shape[1] - 1
        if n == ph * pw and ph == pw:
            return pos.to(dtype)
        g = int(math.sqrt(n))
        grid = pos[:, 1:].float().reshape(1, g, g, -1).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, scale_factor=((ph + 0.1) / g, (pw + 0.1) / g), mode="bicubic", antialias=False)
        if grid.shape[-2:] != (ph, pw):
            raise ValueError(f"position embedding resized to {tuple(grid.shape[-2:])}, not {(ph, pw)}")
        grid = grid.permute(0, 2, 3, 1).reshape(1, ph * pw, -1)
        return torch.cat([pos[:, :1].float(), grid], 1).to(dtype)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        b, _, h, w = images.shape
        if h % PATCH or w % PATCH:
            raise ValueError(f"Depth Anything V2 reads sides that are multiples of 14, not {w} x {h}")
        ph, pw = h // PATCH, w // PATCH
        vit = self.pretrained
        x = vit.patch_embed.proj((images - self.mean) / self.std).flatten(2).transpose(1, 2)
        x = torch.cat([vit.cls_token.expand(b, -1, -1).to(x.dtype), x], 1)
        x = x + self._pos_embed(ph, pw, x.dtype)
        taken = []
        for i, block in enumerate(vit.blocks):
            x = block(x)
            if i in self.layers:
                taken.append(vit.norm(x)[:, 1:])
        return (self.depth_head(taken, ph, pw) * self.max_depth)[:, 0]


def focal_px(input_height: int, frame_height: int) -> float:
    """The focal length, in pixels of a frame ``frame_height`` high, that the outdoor models' metres assume
    when the network reads that frame resized to ``input_height`` rows."""
    return VKITTI2_FOCAL_PX * NATIVE_SIDE / VKITTI2_HEIGHT_PX * frame_height / input_height
