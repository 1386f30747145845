"""Fetching a job's photos straight from the street-photo provider, in memory.

Photos are read in place at their URLs (never rehosted, never written to
disk). A photo that cannot be fetched or is not an image is skipped with its
reason, which the result carries, so every job photo is accounted for. Only
image bytes are fetched; nothing fetched is ever executed.
"""
from __future__ import annotations

import asyncio
import io
import logging
from dataclasses import dataclass, field
from typing import Callable

from PIL import Image, UnidentifiedImageError
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from sweep_engine.schema import Job, Skipped

from .protocol import USER_AGENT

log = logging.getLogger("sis.node.photos")
IMAGE_FORMATS = {"JPEG", "PNG", "WEBP"}


class TooLarge(Exception):
    """A photo over the size limit; the download is abandoned."""


@dataclass
class Fetched:
    images: dict[str, bytes] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)
    seconds: float = 0.0


def check_image(data: bytes, width: int, height: int) -> str | None:
    """None when ``data`` is a still image of a known format; else why not."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            fmt = img.format
            img.verify()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        return f"not a readable image ({exc.__class__.__name__})"
    if fmt not in IMAGE_FORMATS:
        return f"image format {fmt} is not accepted"
    return None


async def fetch_photos(job: Job, *, timeout_s: float, max_bytes: int, concurrency: int = 4,
                       on_photo: Callable[[int, int], None] | None = None) -> Fetched:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    out = Fetched()
    sem = asyncio.Semaphore(concurrency)
    done = 0

    async def one(photo) -> None:
        nonlocal done
        async with sem:
            reason = None
            chunks: list[bytes] = []
            size = 0

            def collect(chunk: bytes) -> None:
                nonlocal size
                size += len(chunk)
                if size > max_bytes:
                    raise TooLarge()
                chunks.append(chunk)

            req = HTTPRequest(photo.url, method="GET", headers={"User-Agent": USER_AGENT, "Accept": "image/*"},
                              connect_timeout=timeout_s, request_timeout=timeout_s, follow_redirects=True,
                              max_redirects=3, streaming_callback=collect)
            try:
                resp = await AsyncHTTPClient().fetch(req, raise_error=False)
                if size > max_bytes:
                    reason = f"fetch refused: larger than {max_bytes} bytes"
                elif resp.code == 599:
                    reason = f"fetch failed: {resp.error}"
                elif resp.code != 200:
                    reason = f"fetch failed: HTTP {resp.code}"
                else:
                    reason = check_image(b"".join(chunks), photo.width, photo.height)
            except Exception as exc:  # connection reset, DNS, TLS, or our own refusal of a large body
                if size > max_bytes or isinstance(exc, TooLarge):
                    reason = f"fetch refused: larger than {max_bytes} bytes"
                else:
                    reason = f"fetch failed: {type(exc).__name__}: {exc}"
            if reason is None:
                out.images[photo.id] = b"".join(chunks)
            else:
                log.warning("photo %s skipped: %s", photo.id, reason)
                out.skipped.append(Skipped(photo_id=photo.id, reason=reason))
            done += 1
            if on_photo:
                on_photo(done, len(job.photos))

    await asyncio.gather(*(one(p) for p in job.photos))
    order = {p.id: i for i, p in enumerate(job.photos)}
    out.skipped.sort(key=lambda k: order[k.photo_id])
    out.seconds = loop.time() - t0
    return out
