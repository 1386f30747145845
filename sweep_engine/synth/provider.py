"""A fake street-photo provider on loopback, serving synthetic photos, and jobs that point at it.

For tests and benchmarks: nothing here reaches beyond 127.0.0.1.
"""
from __future__ import annotations

import asyncio
import io
import math

from PIL import Image
from tornado import httpserver, netutil, web

from .. import schema
from ..camera import offset_lonlat
from .render import Frame, render
from .scene import drive, street_scene

SENSOR_WIDTH_MM = 6.17  # a GoPro-class sensor; it is in camera.SENSOR_WIDTH_MM, so EXIF focal suffices


def jpeg(frame: Frame, quality: int = 92) -> bytes:
    """The frame's RGB as a JPEG, with EXIF make, model and focal length matching its camera."""
    exif = Image.Exif()
    exif[0x010F], exif[0x0110] = "GoPro", "HERO7 Black"
    exif.get_ifd(0x8769)[0x920A] = round(frame.camera.fx * SENSOR_WIDTH_MM / max(frame.camera.width,
                                                                                   frame.camera.height), 4)
    buf = io.BytesIO()
    Image.fromarray(frame.rgb).save(buf, "JPEG", quality=quality, exif=exif)
    return buf.getvalue()


def photo_ref(photo_id: str, frame: Frame, base_url: str, second: int = 0) -> schema.PhotoRef:
    cam = frame.camera
    return schema.PhotoRef(id=photo_id, lon=cam.lon, lat=cam.lat, heading=round(cam.heading_deg, 6),
                           pitch=round(cam.pitch_deg, 6), captured_at=f"2025-06-01T10:{second // 60:02d}:"
                           f"{second % 60:02d}Z", camera_make="GoPro", camera_model="HERO7 Black",
                           focal_mm=round(cam.fx * SENSOR_WIDTH_MM / max(cam.width, cam.height), 4),
                           sensor_width_mm=SENSOR_WIDTH_MM, width=cam.width, height=cam.height,
                           url=f"{base_url}/photos/{photo_id}.jpg", license="CC-BY-SA-4.0", provider="fake")


def synth_frames(seed: int, n: int, width: int = 256, height: int = 192, spacing_m: float = 3.0) -> list[Frame]:
    return [render(s) for s in drive(street_scene(seed, width=width, height=height), n, spacing_m)]


def job_for(frames: list[Frame], base_url: str, job_id: str = "job-1", radius_m: float = 200.0) -> schema.Job:
    """A job over the frames' photos, its area a square around their first camera."""
    lon0, lat0 = frames[0].camera.lon, frames[0].camera.lat
    corners = [offset_lonlat(lon0, lat0, e, n) for e, n in
               ((-radius_m, -radius_m), (radius_m, -radius_m), (radius_m, radius_m), (-radius_m, radius_m))]
    ring = [[float(lo), float(la)] for lo, la in corners]
    return schema.Job(job_id=job_id, sweep_id="sweep-1", area={"type": "Polygon", "coordinates": [ring + ring[:1]]},
                      center_lon=lon0, center_lat=lat0, radius_m=radius_m * math.sqrt(2),
                      photos=[photo_ref(f"p{i}", f, base_url, i) for i, f in enumerate(frames)], params={})


class _Photo(web.RequestHandler):
    def initialize(self, provider: FakeProvider):
        self.provider = provider

    async def get(self, photo_id: str):
        self.provider.requests += 1
        delay = self.provider.delays.get(photo_id)
        if delay:
            await asyncio.sleep(delay)
        data = self.provider.photos.get(photo_id)
        if data is None:
            raise web.HTTPError(404)
        self.set_header("Content-Type", "image/jpeg")
        self.write(data)


class FakeProvider:
    """Serves ``photos`` (id -> bytes) at ``/photos/{id}.jpg``; ``delays`` (id -> seconds) slow some down."""

    def __init__(self, photos: dict[str, bytes] | None = None, delays: dict[str, float] | None = None):
        self.photos = dict(photos or {})
        self.delays = dict(delays or {})
        self.requests = 0
        self._server: httpserver.HTTPServer | None = None
        self.base_url = ""

    async def start(self) -> str:
        app = web.Application([(r"/photos/([^/]+)\.jpg", _Photo, {"provider": self})])
        sockets = netutil.bind_sockets(0, "127.0.0.1")
        self._server = httpserver.HTTPServer(app)
        self._server.add_sockets(sockets)
        self.base_url = f"http://127.0.0.1:{sockets[0].getsockname()[1]}"
        return self.base_url

    async def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            await self._server.close_all_connections()
