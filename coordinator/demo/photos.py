"""A fake street-photo provider: a small Tornado app speaking the Panoramax STAC search API.

``GET /api/search?bbox=w,s,e,n&limit=N[&offset=K]`` answers a FeatureCollection
of STAC picture items (with ``view:azimuth``, ``pers:interior_orientation``,
``license`` and ``hd``/``sd`` assets) and a ``next`` link while more remain;
``GET /api/pictures/{id}/hd.jpg`` serves the image. Images are rendered by the
sweep engine's synthetic scene generator when it is installed
(``sweep_engine.synth``), seeded by the photo, with the photo's road width; else
a plain drawn street of that width, once per photo (kept for the next request),
and after ``delay_s`` (0: at once; the node bench's stand-in for a provider's
round trip and transfer). Each photo carries its synthetic ground
truth (road width), which ``honest_result`` reports as a correct engine would:
tests and the queue benchmark use it to play well-behaved nodes.

``sis serve --demo`` starts one with photos along a few streets, on the port after the
coordinator's (8081 beside 8080; ``start_demo_photos``).
"""
from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import math
import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlencode

import tornado.escape
import tornado.httpserver
import tornado.web

from ..sweeps.coverage import offset
from .upstream import LoopbackServer

log = logging.getLogger("sis.demo")
# A development engine build, in the form of sweep_engine.build_hash() (64 hex digits).
DEV_ENGINE_BUILD = hashlib.sha256(b"sis-engine development build").hexdigest()
LICENSE = "CC-BY-SA-4.0"
DEMO_CENTRE = (-6.9147, 107.6098)    # Bandung, Indonesia
# A camera whose sensor width the engine knows (sweep_engine.camera.SENSOR_WIDTH_MM), so that
# the focal length in the metadata is the focal the synthetic image is rendered with.
# 4.936 mm on its 6.17 mm sensor is 0.8 x the image's larger side, the synthetic scenes'
# own default focal, so the images are what they were before the metadata said so.
CAMERA = ("GoPro", "HERO7 Black")
SENSOR_WIDTH_MM = 6.17
FOCAL_MM = 4.936


@dataclass
class FakePhoto:
    id: str
    lat: float
    lon: float
    heading: float
    captured_at: str
    road_width_m: float
    seed: int
    width: int = 256
    height: int = 192
    panorama: bool = False
    license: str | None = LICENSE

    @property
    def focal_px(self) -> float:
        """The focal the image is rendered with, the one its metadata implies (focal x sensor)."""
        return FOCAL_MM * max(self.width, self.height) / SENSOR_WIDTH_MM

    @property
    def fov_deg(self) -> float:
        return math.degrees(2 * math.atan(self.width / 2 / self.focal_px))

    def item(self, base: str) -> dict[str, Any]:
        href = f"{base}/api/pictures/{self.id}/hd.jpg"
        props: dict[str, Any] = {
            "datetime": self.captured_at, "view:azimuth": self.heading, "pers:pitch": 0,
            "pers:interior_orientation": {"camera_manufacturer": CAMERA[0], "camera_model": CAMERA[1],
                                          "focal_length": FOCAL_MM,
                                          "field_of_view": 360 if self.panorama else round(self.fov_deg, 1),
                                          "sensor_array_dimensions": [self.width, self.height]},
        }
        if self.license:
            props["license"] = self.license
        return {"type": "Feature", "stac_version": "1.0.0", "id": self.id, "collection": "synthetic",
                "geometry": {"type": "Point", "coordinates": [self.lon, self.lat]},
                "bbox": [self.lon, self.lat, self.lon, self.lat], "properties": props,
                "assets": {"hd": {"href": href, "type": "image/jpeg", "roles": ["data"]},
                           "sd": {"href": href, "type": "image/jpeg", "roles": ["visual"]}},
                "links": []}


class _Search(tornado.web.RequestHandler):
    def initialize(self, fake: "FakePhotoProvider") -> None:
        self.fake = fake

    def get(self) -> None:
        self.fake.searches += 1
        if self.fake.fail_status:
            self.set_status(self.fake.fail_status)
            self.finish("provider failure")
            return
        w, s, e, n = (float(x) for x in self.get_query_argument("bbox").split(","))
        limit = int(self.get_query_argument("limit", "100"))
        start = int(self.get_query_argument("offset", "0"))
        inside = [p for p in self.fake.photos if w <= p.lon <= e and s <= p.lat <= n]
        page = inside[start:start + limit]
        base = f"{self.request.protocol}://{self.request.host}"
        links = [{"rel": "self", "href": base + self.request.uri}]
        if start + limit < len(inside):
            q = urlencode({"bbox": self.get_query_argument("bbox"), "limit": limit, "offset": start + limit})
            links.append({"rel": "next", "href": f"{base}/api/search?{q}", "type": "application/geo+json"})
        self.set_header("Content-Type", "application/geo+json")
        self.finish(tornado.escape.json_encode(
            {"type": "FeatureCollection", "features": [p.item(base) for p in page], "links": links}))


class _Image(tornado.web.RequestHandler):
    def initialize(self, fake: "FakePhotoProvider") -> None:
        self.fake = fake

    async def get(self, photo_id: str) -> None:
        photo = self.fake.by_id.get(photo_id)
        if photo is None:
            raise tornado.web.HTTPError(404)
        self.fake.in_flight += 1
        self.fake.most_in_flight = max(self.fake.most_in_flight, self.fake.in_flight)
        try:
            if self.fake.delay_s:
                await asyncio.sleep(self.fake.delay_s)
            self.set_header("Content-Type", "image/jpeg")
            self.finish(self.fake.jpeg(photo))
        finally:
            self.fake.in_flight -= 1


def render_jpeg(photo: FakePhoto) -> bytes:
    from PIL import Image, ImageDraw

    try:
        from sweep_engine.synth import render, street_scene
        frame = render(street_scene(photo.seed, width=photo.width, height=photo.height,
                                    focal_px=photo.focal_px, road_width_m=photo.road_width_m))
        img = Image.fromarray(frame.rgb)
    except ImportError:
        img = Image.new("RGB", (photo.width, photo.height), (135, 180, 230))
        d = ImageDraw.Draw(img)
        w, h = photo.width, photo.height
        half = min(0.48, photo.road_width_m / 30) * w
        d.rectangle([0, h // 2, w, h], fill=(110, 150, 90))
        d.polygon([(w / 2 - 4, h / 2), (w / 2 + 4, h / 2), (w / 2 + half * 2, h), (w / 2 - half * 2, h)],
                  fill=(70, 70, 75))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=85)
    return buf.getvalue()


class FakePhotoProvider(LoopbackServer):
    def __init__(self) -> None:
        self.photos: list[FakePhoto] = []
        self.by_id: dict[str, FakePhoto] = {}
        self.fail_status = 0
        self.searches = 0
        self.delay_s = 0.0
        self.in_flight = self.most_in_flight = 0     # image requests being answered now, and at most
        self._jpegs: dict[str, bytes] = {}

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def add(self, photo: FakePhoto) -> FakePhoto:
        self.photos.append(photo)
        self.by_id[photo.id] = photo
        return photo

    def jpeg(self, photo: FakePhoto) -> bytes:
        """The photo's image, rendered on its first request (a few tens of ms) and kept."""
        data = self._jpegs.get(photo.id)
        if data is None:
            data = self._jpegs[photo.id] = render_jpeg(photo)
        return data

    def scatter(self, lat: float, lon: float, radius_m: float, n: int, seed: int = 0) -> list[FakePhoto]:
        """``n`` photos spread uniformly over a disc, each with its own road width."""
        rng = random.Random(seed)
        t0 = datetime(2026, 6, 1, 8, tzinfo=timezone.utc)
        out = []
        for i in range(n):
            r, a = radius_m * math.sqrt(rng.random()), rng.uniform(0, 2 * math.pi)
            la, lo = offset(lat, lon, r * math.sin(a), r * math.cos(a))
            k = len(self.photos)
            out.append(self.add(FakePhoto(id=f"syn-{seed}-{k}", lat=round(la, 7), lon=round(lo, 7),
                                          heading=round(rng.uniform(0, 359.9), 1),
                                          captured_at=(t0 + timedelta(seconds=7 * k)).isoformat(),
                                          road_width_m=round(rng.uniform(5.0, 14.0), 2), seed=seed * 100_000 + k)))
        return out

    def app(self) -> tornado.web.Application:
        return tornado.web.Application([(r"/api/search", _Search, {"fake": self}),
                                        (r"/api/pictures/([^/]+)/hd\.jpg", _Image, {"fake": self})])

    async def start(self, port: int = 0) -> "FakePhotoProvider":
        """On loopback ``port``, or a free one when 0; ``OSError`` when ``port`` is taken."""
        if not port:
            return await super().start()
        server = tornado.httpserver.HTTPServer(self.app())
        server.listen(port, "127.0.0.1")
        self.server, self.port = server, port
        return self


def demo_photos_port(coordinator_port: int) -> int:
    """The demo photo provider's port: the one after the coordinator's (0, a free one, when
    the coordinator's is 0 or the last)."""
    return coordinator_port + 1 if 0 < coordinator_port < 65535 else 0


async def start_demo_photos(coordinator_port: int = 0) -> FakePhotoProvider:
    """The demo's photo provider, on ``demo_photos_port``. A stable port, not a free one: a
    queued job keeps its photos' URLs, port and all, so after a restart of ``sis serve --demo``
    on a new free port every photo of every job queued before pointed at the old process, and
    a node skipped them all. When the port is taken it falls back to a free one and says so."""
    fake = FakePhotoProvider()
    fake.scatter(*DEMO_CENTRE, radius_m=900, n=240, seed=1)
    port = demo_photos_port(coordinator_port)
    if port:
        try:
            return await fake.start(port)
        except OSError as exc:
            log.warning("demo photo provider: port %d cannot be used (%s); it serves on a free port instead, so "
                        "the photos of sweep jobs queued now are out of reach after a restart", port,
                        exc.strerror or exc)
    return await fake.start()


def honest_result(job: dict[str, Any], node_id: str, engine_build: str = DEV_ENGINE_BUILD,
                  truth: dict[str, FakePhoto] | None = None, elapsed_s: float = 0.02) -> dict[str, Any]:
    """The result a correct engine would give for a job of synthetic photos: per photo a
    road width (the photo's truth where known) and one roadway fact at the photo."""
    facts, measurements = [], []
    for p in job["photos"]:
        width = truth[p["id"]].road_width_m if truth and p["id"] in truth else 8.0
        measurements.append({"photoId": p["id"],
                             "roadWidth": {"widthM": width, "method": "kerb-to-kerb", "spreadM": 0.3, "samples": 5},
                             "calibration": {"scaleTrust": "high", "focalPx": 230.0, "focalBasis": "measured",
                                             "cameraHeightM": 1.65, "pitchDeg": 0.0, "evidence": {}},
                             "objects": []})
        facts.append({"kind": "roadway", "lon": p["lon"], "lat": p["lat"], "value": {"widthM": width}, "unit": "m",
                      "confidence": "high", "basis": "measured", "source": [p["id"]],
                      "timestamp": p["capturedAt"]})
    t = max(0.0, elapsed_s)
    return {"schemaVersion": 1, "jobId": job["jobId"], "nodeId": node_id, "engineVersion": "0.1.0",
            "engineBuild": engine_build, "facts": facts, "measurements": measurements,
            "timings": {"fetchS": t / 2, "inferS": t / 2 if measurements else 0.0, "totalS": t},
            "device": "cpu (simulated)", "skipped": []}
