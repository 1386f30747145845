"""Variety the scene generator does not draw itself: roll, lighting, textures, blur, noise, rain, JPEG.

Every function takes a ``numpy.random.Generator`` and is deterministic in it.
Photometric changes touch only the RGB; roll rotates RGB, depth, classes and
instances together about the image centre (a rotation about the optical axis
leaves z-depth unchanged), so the truth stays exact.  Pixels rotated in from
outside the frame are marked unknown: class ``IGNORE``, depth NaN, no instance.
"""
from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

IGNORE = 255


def roll(rgb, depth, seg, inst, degrees: float):
    """Rotate all four maps by ``degrees`` (counter-clockwise) about the image centre."""
    if abs(degrees) < 1e-6:
        return rgb, depth, seg, inst
    out_rgb = np.asarray(Image.fromarray(rgb).rotate(degrees, Image.BILINEAR, fillcolor=(0, 0, 0)))
    d = np.where(np.isfinite(depth), depth, 1e9).astype(np.float32)
    out_d = np.asarray(Image.fromarray(d, "F").rotate(degrees, Image.NEAREST, fillcolor=-1.0)).copy()
    out_seg = np.asarray(Image.fromarray(seg).rotate(degrees, Image.NEAREST, fillcolor=IGNORE))
    out_inst = np.asarray(Image.fromarray(inst.astype(np.int32), "I").rotate(degrees, Image.NEAREST,
                                                                              fillcolor=-2)).astype(np.int32)
    outside = out_inst == -2
    out_d[outside] = np.nan
    out_d[out_d >= 1e8] = np.inf
    out_inst = np.where(outside, -1, out_inst)
    return out_rgb, out_d, out_seg.copy(), out_inst


def textures(rgb, seg, rng: np.random.Generator, strength: float):
    """Per-class colour shifts and low-frequency blotches plus fine grain: surfaces that are not flat paint."""
    h, w = seg.shape
    gains = rng.uniform(1 - strength, 1 + strength, size=(256, 3)).astype(np.float32)
    out = rgb.astype(np.float32) * gains[seg]
    lo = rng.normal(0, 1, size=(max(2, h // 16), max(2, w // 16))).astype(np.float32)
    blotch = np.asarray(Image.fromarray(lo, "F").resize((w, h), Image.BICUBIC))
    grain = rng.normal(0, 1, size=(h, w)).astype(np.float32)
    out *= (1 + strength * 0.5 * blotch + strength * 0.25 * grain)[..., None]
    return np.clip(out, 0, 255)


def lighting(rgb, rng: np.random.Generator):
    """Global brightness, contrast, gamma and colour temperature."""
    x = rgb.astype(np.float32) / 255.0
    x = x * rng.uniform(0.55, 1.35)
    x = (x - 0.5) * rng.uniform(0.75, 1.2) + 0.5
    x = np.clip(x, 0, 1) ** rng.uniform(0.75, 1.35)
    x = x * rng.uniform(0.88, 1.12, size=3).astype(np.float32)
    return np.clip(x * 255.0, 0, 255)


def rain(rgb, rng: np.random.Generator):
    """Slanted bright streaks and a grey veil."""
    h, w = rgb.shape[:2]
    layer = Image.new("L", (w, h), 0)
    draw = ImageDraw.Draw(layer)
    slant = rng.uniform(-0.4, 0.4)
    for _ in range(int(rng.integers(60, 300))):
        x, y = rng.uniform(0, w), rng.uniform(0, h)
        length = rng.uniform(4, 14)
        draw.line([(x, y), (x + slant * length, y + length)], fill=int(rng.integers(60, 160)), width=1)
    streaks = np.asarray(layer, np.float32)[..., None] / 255.0
    veil = rng.uniform(0.05, 0.25)
    out = rgb.astype(np.float32) * (1 - veil) + 190.0 * veil
    return np.clip(out * (1 - streaks) + 230.0 * streaks, 0, 255)


def blur(rgb, radius: float):
    return np.asarray(Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).filter(ImageFilter.GaussianBlur(radius)))


def jpeg_roundtrip(rgb, quality: int):
    buf = io.BytesIO()
    Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=quality)
    return np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))


def photometric(rgb, seg, rng: np.random.Generator, *, strength: float = 1.0):
    """The photometric chain with random settings; ``strength`` 0 returns the rendering as a JPEG would."""
    x = rgb.astype(np.float32)
    if strength > 0:
        if rng.random() < 0.7:
            x = textures(x, seg, rng, 0.15 * strength)
        if rng.random() < 0.8:
            x = lighting(x, rng)
        if rng.random() < 0.25 * strength:
            x = rain(x, rng)
        if rng.random() < 0.4:
            x = blur(x, rng.uniform(0.3, 1.3))
        if rng.random() < 0.6:
            x = np.asarray(x, np.float32) + rng.normal(0, rng.uniform(1, 8), size=x.shape)
    q = int(rng.integers(70, 96)) if strength > 0 else 92
    return jpeg_roundtrip(x, q)
