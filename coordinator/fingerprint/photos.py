"""The photos a fingerprint is read from: the provider's photos nearest the point, and, where
the model server cannot fetch a URL itself, each photo's bytes as an inline ``data:`` URL.

The bytes are fetched from the provider into memory, shrunk to at most ``MAX_SIDE_PX`` on
their longer side where they are larger (a model sees far fewer pixels than a provider's HD
frame holds, and the request body stays small) and handed to the model; they are never
written anywhere, cached or served (SPEC.md honesty rule 7: photos are read in place, never
rehosted). Only the photos' references (id, position, time, license, URL at the provider)
appear in an answer.
"""
from __future__ import annotations

import asyncio
import base64
import io
from dataclasses import dataclass

from sweep_engine.schema import PhotoRef

from coordinator.core.honesty import SourceReport
from coordinator.features import grid
from coordinator.seen.spatial import distance_m
from coordinator.sources.base import Query, Source, SourceError, fetch
from coordinator.sources.values import utc_z

RADIUS_M = 50.0               # photos farther than this show another stretch of street
SEARCH_LIMIT = 200            # references read from the provider around the point
MAX_IMAGE_BYTES = 20_000_000  # a provider's image larger than this is not read
MAX_SIDE_PX = 1024         # a 2048-px JPEG then decodes at half scale (draft): 37 ms, not 58 at 1280
SENT_AS_IS = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp"}   # what Ollama takes
IMAGES_REPORT = "street photos (image bytes)"


@dataclass(frozen=True)
class Nearby:
    photo: PhotoRef
    distance_m: float

    def reference(self) -> dict:
        """The photo as an answer names it: where it is read in place, never its bytes."""
        p = self.photo
        return {"id": p.id, "provider": p.provider, "url": p.url, "license": p.license, "capturedAt": utc_z(p.captured_at),
                "headingDeg": p.heading, "distanceM": round(self.distance_m, 1),
                "geometry": {"type": "Point", "coordinates": [p.lon, p.lat]}}


async def nearest_photos(provider: Source, lat: float, lon: float, n: int,
                         radius_m: float = RADIUS_M) -> tuple[list[Nearby], SourceReport]:
    """The ``n`` photos nearest the point within ``radius_m``, nearest first, and the
    provider's report (its records: how many references it listed around the point). The
    search stops at 180 degrees, as the map's does (``grid.circle_box``)."""
    read = await provider.read(Query(bbox=grid.circle_box(lat, lon, radius_m), limit=SEARCH_LIMIT))
    near = [Nearby(p, d) for p in read.records if (d := distance_m(lat, lon, p.lat, p.lon)) <= radius_m]
    near.sort(key=lambda x: (x.distance_m, x.photo.id))
    return near[:n], read.report


def _as_sent(raw: bytes) -> tuple[str, bytes]:
    """(media type, bytes) of the image as the model is shown it; ValueError if it is not an
    image. A JPEG, PNG or WebP no larger than ``MAX_SIDE_PX`` goes as it came (its header read,
    nothing decoded); a larger one is shrunk and re-encoded as JPEG, decoded at a reduced scale
    where JPEG allows (``draft``), so an HD frame costs a fraction of a full decode."""
    from PIL import Image, UnidentifiedImageError

    try:
        img = Image.open(io.BytesIO(raw))
        if img.format in SENT_AS_IS and max(img.size) <= MAX_SIDE_PX:
            return SENT_AS_IS[img.format], raw
        img.draft("RGB", (MAX_SIDE_PX, MAX_SIDE_PX))
        img = img.convert("RGB")
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"not a readable image ({exc})") from None
    img.thumbnail((MAX_SIDE_PX, MAX_SIDE_PX))
    out = io.BytesIO()
    img.save(out, "JPEG", quality=85)
    return "image/jpeg", out.getvalue()


class _PhotoHosts:
    """The photo reads' fetch slots (``sources.base.send``): they are no source's, and without
    slots of their own some 34 cold fingerprints at a photo host that hangs held every fetch of
    the process, each source's with them."""

    max_in_flight = 8
    _slots = Source._slots


PHOTO_HOSTS = _PhotoHosts()


async def _data_url(photo: PhotoRef, timeout_s: float) -> str:
    code, raw = await fetch(photo.url, timeout_s, accept="image/jpeg, image/png, image/webp", source=PHOTO_HOSTS)
    if code != 200:
        raise SourceError(f"HTTP {code}")
    if len(raw) > MAX_IMAGE_BYTES:
        raise SourceError(f"{len(raw)} bytes, over the {MAX_IMAGE_BYTES} read")
    try:
        media, image = await asyncio.to_thread(_as_sent, raw)
    except ValueError as exc:
        raise SourceError(str(exc)) from None
    return f"data:{media};base64," + base64.b64encode(image).decode("ascii")


async def image_urls(photos: list[Nearby], mode: str, timeout_s: float) -> tuple[list[tuple[Nearby, str]],
                                                                                  SourceReport | None]:
    """The photos the model can be shown, each with the URL it is shown by; in ``data`` mode
    with the report of reading their bytes (a photo that could not be read is left out and
    named), in ``url`` mode with none (the model server reads them)."""
    if mode == "url":
        return [(p, p.photo.url) for p in photos], None
    got = await asyncio.gather(*(_data_url(p.photo, timeout_s) for p in photos), return_exceptions=True)
    shown, failed = [], []
    for p, url in zip(photos, got):
        if isinstance(url, SourceError):
            failed.append(f"{p.photo.id}: {url}")
        elif isinstance(url, BaseException):
            raise url
        else:
            shown.append((p, url))
    licenses = sorted({p.photo.license for p in photos})
    report = SourceReport(IMAGES_REPORT, " + ".join(licenses) or "per photo", ok=not failed, records=len(shown),
                          error=f"{len(failed)} of {len(photos)} photos could not be read: " + "; ".join(failed)
                          if failed else None)
    return shown, report
