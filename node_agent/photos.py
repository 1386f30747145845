"""Fetching a job's photos straight from the street-photo provider, in memory.

Photos are read in place at their URLs (never rehosted, never written to
disk). A photo that cannot be fetched or is not an image is skipped with its
reason, which the result carries, so every job photo is accounted for. Only
image bytes are fetched; nothing fetched is ever executed. A job's photos share
one pool of kept-alive connections: a job's photos mostly come from one
provider, and over HTTPS a connection per photo would be a TLS handshake per photo.
"""
from __future__ import annotations

import asyncio
import io
import logging
from dataclasses import dataclass, field
from typing import Callable

import aiohttp
from PIL import Image

from sweep_engine.schema import Job, Skipped

from .protocol import USER_AGENT

log = logging.getLogger("sis.node.photos")
IMAGE_FORMATS = {"JPEG", "PNG", "WEBP"}


CHUNK = 64 * 1024
MAX_REDIRECTS = 3


@dataclass
class Fetched:
    images: dict[str, bytes] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)
    seconds: float = 0.0


def check_image(data: bytes, width: int, height: int) -> str | None:
    """None when ``data`` is a still image of a known format; else why not. Whatever Pillow
    raises on the bytes is a reason, never an exception: the bytes are the provider's, and
    one hostile photo (a decompression bomb: a few MB declaring 180 million pixels) raised
    out of the fetch and lost its whole job, on every node that leased it."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            fmt = img.format
            img.verify()
    except Image.DecompressionBombError as exc:
        return f"image too large to decode ({exc.__class__.__name__}: {str(exc)[:120]})"
    except Exception as exc:   # not an image, truncated, or a decoder's fault on crafted bytes (struct.error, ...)
        return f"not a readable image ({exc.__class__.__name__})"
    if fmt not in IMAGE_FORMATS:
        return f"image format {fmt} is not accepted"
    return None


# What a photo URL answers instead of a photo: a page (a login page, a captive portal, a
# provider's error page) or a document. Named as such when the bytes are no image: Pillow's
# word for them ("UnidentifiedImageError") told a volunteer nothing of a portal in the way.
NOT_PHOTOS = {"text/html", "application/xhtml+xml", "text/plain", "application/json", "text/xml",
              "application/xml"}


def not_a_photo(kind: str) -> str:
    if kind in ("text/html", "application/xhtml+xml"):
        return (f"not an image: the photo URL answered {kind}, a web page (a login page or a captive portal "
                "in the way?), not image bytes")
    return f"not an image: the photo URL answered {kind}, not image bytes"


async def fetch_photos(job: Job, *, timeout_s: float, max_bytes: int, concurrency: int = 4,
                       on_photo: Callable[[int, int], None] | None = None) -> Fetched:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    out = Fetched()
    sem = asyncio.Semaphore(concurrency)
    done = 0

    async def get(http: aiohttp.ClientSession, url: str) -> tuple[bytes | None, str | None, str]:
        """(the photo's bytes, None, its Content-Type), or (None, why not, its Content-Type).
        Reading stops at ``max_bytes``."""
        async with http.get(url, headers={"User-Agent": USER_AGENT, "Accept": "image/*"},
                            max_redirects=MAX_REDIRECTS) as resp:
            kind = resp.content_type       # the media type alone, lower case; octet-stream when none is said
            if resp.status != 200:
                return None, f"fetch failed: HTTP {resp.status}", kind
            if resp.content_length is not None and resp.content_length > max_bytes:
                return None, f"fetch refused: larger than {max_bytes} bytes", kind
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.content.iter_chunked(CHUNK):
                size += len(chunk)
                if size > max_bytes:     # leaving unread closes the connection: the rest is never sent
                    return None, f"fetch refused: larger than {max_bytes} bytes", kind
                chunks.append(chunk)
            return b"".join(chunks), None, kind

    async def one(http: aiohttp.ClientSession, photo) -> None:
        nonlocal done
        async with sem:
            data: bytes | None = None
            kind = ""
            try:
                data, reason, kind = await get(http, photo.url)
            except TimeoutError:
                reason = f"fetch failed: no answer within {timeout_s:g} s"
            except (aiohttp.ClientError, OSError, ValueError) as exc:  # refused, reset, DNS, TLS, a bad URL
                reason = f"fetch failed: {type(exc).__name__}: {exc}"
            if data is not None:
                reason = check_image(data, photo.width, photo.height)
                if reason is not None and kind in NOT_PHOTOS:
                    reason = not_a_photo(kind)
            if reason is None:
                out.images[photo.id] = data
            else:
                log.warning("photo %s skipped: %s", photo.id, reason)
                out.skipped.append(Skipped(photo_id=photo.id, reason=reason))
            done += 1
            if on_photo:
                on_photo(done, len(job.photos))

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s, connect=timeout_s)) as http:
        await asyncio.gather(*(one(http, p) for p in job.photos))
    order = {p.id: i for i, p in enumerate(job.photos)}
    out.skipped.sort(key=lambda k: order[k.photo_id])
    out.seconds = loop.time() - t0
    return out
