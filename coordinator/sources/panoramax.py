"""The street-photo provider adapter, modelled on Panoramax's STAC search API.
A ``Source`` like the others (name ``panoramax``, settings
``SIS_SOURCES__PANORAMAX__BASE_URL`` and ``__TIMEOUT_S``); ``read(Query(bbox=...,
limit=...))`` gives the photo references, ``search`` the same with what was skipped
and whether the ground held more than the limit, which the sweep request reports.

``GET {base}/search?bbox=w,s,e,n&limit=N`` answers a GeoJSON FeatureCollection of
STAC items, one per picture, with a ``next`` link while more pages remain. From
each item only a reference is kept (``sweep_engine.schema.PhotoRef``): id,
position, heading (``view:azimuth``), pitch (``pers:pitch``), capture time,
camera make, model and focal length (``pers:interior_orientation``), image size,
the image URL (asset ``hd``, else ``sd``) and the license. The coordinator never
fetches or stores image bytes: nodes read each photo in place at its URL.

Items that cannot be measured honestly are skipped and counted, never guessed:
360° panoramas (the engine reads perspective frames), items with no license,
no image URL or no image size.

What the server sends, as GeoVisio (the Panoramax API server) writes it
(``geovisio/web/items.py``: ``dbPictureToStacItem`` and ``searchItems``, read in the code
index, file 28067958777) and its docs say (``Deviation of Panoramax API from STAC API``,
file 27351728521):

- ``GET /api/search`` takes ``bbox`` and ``limit`` (1-10000, default 10) and, searching a box,
  lists the pictures nearest its centre first; its answer's ``links`` hold only the root link,
  no ``next``, and it has no ``numberMatched``/``numberReturned``. A page that holds as many
  items as were asked may therefore be cut without saying so: it is taken as cut
  (``truncated``), as one with a ``next`` link is (a server that does page, the demo's fake
  provider and, by one public account, the federated catalogue, sends ``next``).
- assets ``hd`` ("highest resolution available"), ``sd`` ("fixed width of 2048px") and
  ``thumb`` (500 px); ``pers:interior_orientation.sensor_array_dimensions`` is the original's
  ``[width, height]``, the size of ``hd``. Where only ``sd`` is given, its size is 2048 px wide
  at the original's aspect, not the original's.
- ``license`` (the instance's SPDX id), ``view:azimuth``, ``pers:pitch``, ``pers:roll``,
  ``datetime``; fields without a value are left out.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from sweep_engine.schema import PhotoRef, SchemaError

from .base import Query, Source, SourceError
from .registry import register

log = logging.getLogger("sis.sweeps.photos")
PAGE_LIMIT = 500
SD_WIDTH = 2048          # GeoVisio's "sd" asset: "Picture in standard definition (fixed width of 2048px)"


@dataclass
class PhotoSearch:
    photos: list[PhotoRef]
    truncated: bool = False
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


@register
class PhotoProvider(Source[PhotoRef]):
    name = "panoramax"
    license = "per photo (each reference carries its own)"
    default_base_url = "https://api.panoramax.xyz/api"
    default_timeout_s = 15.0
    description = ("the street-photo provider's STAC API (Panoramax-compatible: {base}/search); only photo "
                   "references are read, image bytes never pass through the coordinator")

    async def fetch(self, query: Query) -> list[PhotoRef]:
        if query.bbox is None:
            raise SourceError("a photo search needs a bbox")
        return (await self.search(query.bbox, query.limit or PAGE_LIMIT)).photos

    async def search(self, bbox: tuple[float, float, float, float], max_photos: int) -> PhotoSearch:
        """Every usable photo in ``bbox`` (w, s, e, n), up to ``max_photos``; raises SourceError
        when the provider cannot be read."""
        out = PhotoSearch([])
        seen: set[str] = set()
        limit = min(PAGE_LIMIT, max_photos)
        url: str | None = self.url("/search", {"bbox": ",".join(f"{v:.7f}" for v in bbox), "limit": limit})
        pages = 0
        full = False
        while url and len(out.photos) < max_photos:
            doc = await self.get_json_at(url, accept="application/geo+json, application/json")
            pages += 1
            if not isinstance(doc, dict) or not isinstance(doc.get("features"), list):
                raise SourceError("answer is not a GeoJSON FeatureCollection")
            full = len(doc["features"]) >= limit
            for item in doc["features"]:
                ref = self.parse_item(item, out)
                if ref is not None and ref.id not in seen:
                    seen.add(ref.id)
                    out.photos.append(ref)
                    if len(out.photos) >= max_photos:
                        break
            url = next((ln.get("href") for ln in doc.get("links", []) or []
                        if isinstance(ln, dict) and ln.get("rel") == "next"), None)
            if pages >= 1000:
                raise SourceError("the provider's pages do not end")
        # Cut: a next page not read, or a last page as full as asked with no next link (GeoVisio's
        # search sends none: the ground may hold more than it listed).
        out.truncated = (bool(url) and len(out.photos) >= max_photos) or (url is None and full)
        return out

    def parse_item(self, item: Any, out: PhotoSearch) -> PhotoRef | None:
        if not isinstance(item, dict):
            out.skip("not an item")
            return None
        props = item.get("properties") or {}
        geom = item.get("geometry") or {}
        coords = geom.get("coordinates") if geom.get("type") == "Point" else None
        interior = props.get("pers:interior_orientation") or {}
        fov = interior.get("field_of_view")
        if isinstance(fov, (int, float)) and fov >= 180:
            out.skip("360° panorama")
            return None
        assets = item.get("assets") or {}
        hd, sd = (assets.get("hd") or {}).get("href"), (assets.get("sd") or {}).get("href")
        href = hd or sd
        license_ = props.get("license")
        dims = interior.get("sensor_array_dimensions")
        if not license_:
            out.skip("no license")
            return None
        if not href:
            out.skip("no image URL")
            return None
        if not (isinstance(dims, list) and len(dims) == 2):
            out.skip("no image size")
            return None
        width, height = dims
        if not hd and isinstance(width, (int, float)) and isinstance(height, (int, float)) and width > 0:
            # The sd derivative is 2048 px wide at the original's aspect, not the original's size.
            width, height = SD_WIDTH, round(SD_WIDTH * height / width)
        heading = props.get("view:azimuth")
        if isinstance(heading, (int, float)):
            heading = float(heading) % 360.0
        doc = {
            "id": str(item.get("id") or ""), "lon": coords[0] if coords else None,
            "lat": coords[1] if coords else None, "heading": heading, "pitch": props.get("pers:pitch"),
            "capturedAt": props.get("datetime"), "cameraMake": interior.get("camera_manufacturer") or None,
            "cameraModel": interior.get("camera_model") or None, "focalMm": interior.get("focal_length"),
            "sensorWidthMm": None, "width": width, "height": height, "url": href, "license": license_,
            "provider": self.name,
        }
        try:
            return PhotoRef.from_dict(doc)
        except SchemaError as exc:
            out.skip("malformed item")
            log.debug("skipped photo %s: %s", doc["id"], exc)
            return None
