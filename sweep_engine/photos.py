"""Photo reading: fetched from the provider's URL into memory, decoded, never written to disk.

``fetch_all`` runs a fetch function (``async (url) -> bytes``; by default
``http_fetch`` on Tornado's client) over many photos at once, at most
``concurrency`` at a time, each bounded by a timeout and a size limit; a
failure is that photo's reason to be skipped, never the job's end.

Decoding reads the bytes in memory: on CUDA, JPEGs are decoded on the GPU
(torchvision's nvJPEG path); otherwise, and for other formats, by Pillow on
the CPU. Either way the EXIF orientation is applied, so a phone's portrait
photo is measured upright, as it is shown: read as stored, a road's edges
lie across the frame and its width came out a third of the truth while the
verdict still read high.
"""
from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable

import numpy as np
import torch
import torchvision
from torchvision.io import ImageReadMode

Fetch = Callable[[str], Awaitable[bytes]]

MIN_SIDE_PX = 64               # a smaller photo holds too few rows for a road's edges (an 8 x 8 read 2.9 m)
FOCAL_MM = (0.5, 2000.0)       # an EXIF focal length outside this is not a lens's (the wire schema's bound)
FOCAL_35MM = (1.0, 4000.0)
ROTATED = (5, 6, 7, 8)         # EXIF orientations that turn the stored frame a quarter


class PhotoError(RuntimeError):
    """A photo that could not be fetched or decoded; its message is the skip reason."""


def http_fetch(timeout_s: float = 20.0, max_bytes: int = 25_000_000) -> Fetch:
    """A fetch function over Tornado's async HTTP client, refusing bodies over ``max_bytes``."""
    from tornado.httpclient import AsyncHTTPClient, HTTPClientError

    async def fetch(url: str) -> bytes:
        chunks: list[bytes] = []
        size = 0

        def on_chunk(chunk: bytes) -> None:
            nonlocal size
            size += len(chunk)
            if size > max_bytes:
                raise PhotoError(f"photo larger than {max_bytes} bytes")
            chunks.append(chunk)

        try:
            await AsyncHTTPClient().fetch(url, request_timeout=timeout_s, connect_timeout=timeout_s,
                                          streaming_callback=on_chunk, follow_redirects=True, max_redirects=3,
                                          user_agent="sis-sweep-engine")
        except HTTPClientError as exc:
            if size > max_bytes:
                raise PhotoError(f"photo larger than {max_bytes} bytes") from None
            raise PhotoError(f"fetch failed: HTTP {exc.code}") from None
        except PhotoError:
            raise
        except Exception:
            if size > max_bytes:  # the client may wrap the callback's refusal in its own error
                raise PhotoError(f"photo larger than {max_bytes} bytes") from None
            raise
        return b"".join(chunks)

    return fetch


async def fetch_all(urls: dict[str, str], fetch: Fetch, *, concurrency: int = 8,
                    timeout_s: float = 20.0) -> dict[str, bytes | PhotoError]:
    """Every ``id -> url`` fetched; each value the bytes or the ``PhotoError`` saying why not."""
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(url: str) -> bytes | PhotoError:
        async with gate:
            try:
                data = await asyncio.wait_for(fetch(url), timeout_s)
            except PhotoError as exc:
                return exc
            except asyncio.TimeoutError:
                return PhotoError(f"fetch timed out after {timeout_s:g} s")
            except Exception as exc:  # connection refused, DNS, TLS: the photo is skipped with the reason
                return PhotoError(f"fetch failed: {type(exc).__name__}: {exc}")
            return data if data else PhotoError("fetch returned no bytes")

    ids = list(urls)
    results = await asyncio.gather(*(one(urls[i]) for i in ids))
    return dict(zip(ids, results))


def decode(data: bytes, device: torch.device) -> torch.Tensor:
    """(3, H, W) uint8 RGB on ``device``, turned as its EXIF orientation says: JPEGs on the GPU (nvJPEG)
    when it is CUDA, else Pillow on the CPU. ``PhotoError`` for what is not an image, one over Pillow's
    decompression-bomb bound, or one too small to measure."""
    if device.type == "cuda" and data[:2] == b"\xff\xd8":
        try:
            raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            return _big_enough(torchvision.io.decode_jpeg(raw, mode=ImageReadMode.RGB, device=device,
                                                          apply_exif_orientation=True))
        except RuntimeError:
            pass  # a JPEG nvJPEG cannot read (progressive, CMYK) may still be one Pillow can
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            rgb = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    except UnidentifiedImageError:
        raise PhotoError("undecodable image: not a format Pillow reads") from None
    except Image.DecompressionBombError as exc:
        raise PhotoError(f"image too large to decode: {str(exc)[:200]}") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise PhotoError(f"undecodable image: {str(exc)[:200]}") from None
    return _big_enough(torch.from_numpy(rgb.copy()).permute(2, 0, 1).to(device))


def _big_enough(image: torch.Tensor) -> torch.Tensor:
    h, w = int(image.shape[-2]), int(image.shape[-1])
    if min(h, w) < MIN_SIDE_PX:
        raise PhotoError(f"photo too small to measure: {w} x {h} px (at least {MIN_SIDE_PX} a side)")
    return image


def _within(value, bounds: tuple[float, float]) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    return v if bounds[0] <= v <= bounds[1] else None   # NaN (a rational over 0) is within nothing


def exif_metadata(data: bytes) -> dict:
    """What the EXIF says about the camera: make, model, focal length (mm, and 35 mm equivalent), and the
    photo's size as ``decode`` turns it. A focal length no lens has (0, a rational over 0, 100 m) is left
    out, as if the EXIF had none: the engine then assumes one and says so."""
    from PIL import Image

    out: dict = {}
    try:
        with Image.open(io.BytesIO(data)) as im:
            exif = im.getexif()
            w, h = im.size
            out["width"], out["height"] = (h, w) if exif.get(0x0112) in ROTATED else (w, h)
            sub = exif.get_ifd(0x8769)  # Exif sub-IFD, where the focal lengths live
    except Exception:
        return out
    if exif.get(0x010F):
        out["make"] = str(exif.get(0x010F)).strip("\x00 ")
    if exif.get(0x0110):
        out["model"] = str(exif.get(0x0110)).strip("\x00 ")
    focal = _within(sub.get(0x920A), FOCAL_MM)
    if focal:
        out["focal_mm"] = focal
    focal35 = _within(sub.get(0xA405), FOCAL_35MM)
    if focal35:
        out["focal_35mm"] = focal35
    return out
