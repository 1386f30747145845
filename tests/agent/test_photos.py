"""A job's photos as the street-photo provider (or whatever stands in its way) answers them."""
from __future__ import annotations

import io

import tornado.web
from PIL import Image

from coordinator.demo.upstream import LoopbackServer
from node_agent.photos import fetch_photos
from sweep_engine.schema import SCHEMA_VERSION, Job

PORTAL = b"<!doctype html><html><body><form action='/login'>Sign in to use this Wi-Fi</form></body></html>"


def _jpeg() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (90, 120, 150)).save(buf, "JPEG")
    return buf.getvalue()


class Portal(LoopbackServer):
    """A photo host where a captive portal, a login page or a mislabelled file stands in for some photos."""

    def app(self) -> tornado.web.Application:
        answers = {"photo": ("image/jpeg", _jpeg()), "portal": ("text/html; charset=utf-8", PORTAL),
                   "to-portal": None, "json": ("application/json", b'{"error": "sign in"}'),
                   "unlabelled": ("application/octet-stream", _jpeg()), "text-jpeg": ("text/html", _jpeg())}

        class Answer(tornado.web.RequestHandler):
            def get(self, name: str) -> None:
                if answers[name] is None:       # a portal's usual way: a redirect to its login page
                    self.redirect("/p/portal")
                    return
                kind, body = answers[name]
                self.set_header("Content-Type", kind)
                self.finish(body)

        return tornado.web.Application([(r"/p/([a-z-]+)", Answer)])


def _job(base: str, names: list[str]) -> Job:
    photos = [{"id": n, "lon": 107.61, "lat": -6.91, "capturedAt": "2024-01-01T00:00:00Z", "width": 64,
               "height": 48, "url": f"{base}/p/{n}", "license": "CC-BY-SA-4.0", "provider": "test"} for n in names]
    ring = [[107.60, -6.92], [107.62, -6.92], [107.62, -6.90], [107.60, -6.90], [107.60, -6.92]]
    return Job.from_dict({"schemaVersion": SCHEMA_VERSION, "jobId": "j1", "sweepId": "s1",
                          "area": {"type": "Polygon", "coordinates": [ring]}, "centerLon": 107.61,
                          "centerLat": -6.91, "radiusM": 300, "photos": photos})


async def test_a_photo_url_answering_a_web_page_is_skipped_naming_text_html_not_a_decode_error():
    """It was "not a readable image (UnidentifiedImageError)": nothing said a login page was in the way."""
    server = await Portal().start()
    try:
        names = ["photo", "portal", "to-portal", "json", "unlabelled", "text-jpeg"]
        got = await fetch_photos(_job(f"http://127.0.0.1:{server.port}", names), timeout_s=5, max_bytes=10**6)
    finally:
        await server.stop()
    reasons = {k.photo_id: k.reason for k in got.skipped}
    page = ("not an image: the photo URL answered text/html, a web page (a login page or a captive portal in "
            "the way?), not image bytes")
    assert reasons == {"portal": page, "to-portal": page,
                       "json": "not an image: the photo URL answered application/json, not image bytes"}
    # Image bytes are taken whatever their label says: a provider that labels them wrong still serves photos.
    assert sorted(got.images) == ["photo", "text-jpeg", "unlabelled"]
