"""The photo provider adapter against answers in GeoVisio's own shape (the Panoramax API
server: ``geovisio/web/items.py`` ``dbPictureToStacItem`` and ``searchItems``). Its search sends
no ``next`` link, so a page as full as asked is taken as cut; where only the ``sd`` asset is
given, the photo's size is that derivative's (2048 px wide), not the original's. The items are
made for this project in that shape, not recordings."""
from __future__ import annotations

import json

import pytest
import tornado.web

from coordinator.sources.panoramax import PhotoProvider, PhotoSearch


def item(i: int, *, assets=("hd", "sd", "thumb"), dims=(4000, 3000)) -> dict:
    """A GeoVisio search item, its fields as the server writes them (None fields left out)."""
    urls = {"hd": f"https://pmx.example/api/pictures/p{i}/hd.jpg",
            "sd": f"https://pmx.example/api/pictures/p{i}/sd.jpg",
            "thumb": f"https://pmx.example/api/pictures/p{i}/thumb.jpg"}
    roles = {"hd": "data", "sd": "visual", "thumb": "thumbnail"}
    return {"type": "Feature", "stac_version": "1.0.0", "id": f"p{i}", "collection": "s1",
            "geometry": {"type": "Point", "coordinates": [2.0 + i * 1e-5, 48.0]},
            "bbox": [2.0 + i * 1e-5, 48.0, 2.0 + i * 1e-5, 48.0],
            "properties": {"datetime": "2025-05-03T11:17:42+00:00", "license": "CC-BY-SA-4.0",
                           "view:azimuth": 112, "pers:pitch": 0.0, "pers:roll": 0.0,
                           "pers:interior_orientation": {"camera_manufacturer": "GoPro", "camera_model": "HERO",
                                                         "focal_length": 3.0, "field_of_view": 70,
                                                         "sensor_array_dimensions": list(dims)},
                           "geovisio:status": "ready", "geovisio:rank_in_collection": i + 1},
            "assets": {k: {"href": urls[k], "roles": [roles[k]], "type": "image/jpeg"} for k in assets},
            "links": [{"rel": "root", "href": "https://pmx.example/api"}]}


class _Search(tornado.web.RequestHandler):
    """GeoVisio's search: the nearest ``limit`` items, and a root link only, never ``next``."""

    def initialize(self, items: list[dict]) -> None:
        self.items = items

    def get(self) -> None:
        limit = int(self.get_query_argument("limit", "10"))
        self.set_header("Content-Type", "application/geo+json")
        self.finish(json.dumps({"type": "FeatureCollection", "features": self.items[:limit],
                                "links": [{"rel": "root", "href": "https://pmx.example/api"}]}))


@pytest.fixture
async def provider():
    items: list[dict] = []
    app = tornado.web.Application([(r"/api/search", _Search, {"items": items})])
    server = app.listen(0, "127.0.0.1")
    port = next(iter(server._sockets.values())).getsockname()[1]
    yield items, PhotoProvider.at(f"http://127.0.0.1:{port}/api", timeout_s=5)
    server.stop()


async def test_a_full_page_without_a_next_link_is_cut(provider):
    items, source = provider
    items.extend(item(i) for i in range(12))
    found = await source.search((2.0, 47.99, 2.01, 48.01), 10)
    assert len(found.photos) == 10 and found.truncated is True


async def test_a_page_short_of_the_limit_is_the_whole_box(provider):
    items, source = provider
    items.extend(item(i) for i in range(7))
    found = await source.search((2.0, 47.99, 2.01, 48.01), 10)
    assert len(found.photos) == 7 and found.truncated is False


async def test_a_full_page_of_which_some_are_skipped_is_still_cut(provider):
    items, source = provider
    items.extend(item(i) for i in range(10))
    items[0]["properties"]["pers:interior_orientation"]["field_of_view"] = 360
    found = await source.search((2.0, 47.99, 2.01, 48.01), 10)
    assert len(found.photos) == 9 and found.skipped == {"360° panorama": 1} and found.truncated is True


def test_an_item_reads_its_hd_image_at_the_originals_size():
    ref = PhotoProvider.at("http://unused/api").parse_item(item(1), PhotoSearch([]))
    assert ref.url.endswith("/hd.jpg") and (ref.width, ref.height) == (4000, 3000)
    assert ref.license == "CC-BY-SA-4.0" and ref.heading == 112.0 and ref.pitch == 0.0


def test_an_item_with_only_its_sd_image_has_that_images_size():
    ref = PhotoProvider.at("http://unused/api").parse_item(item(1, assets=("sd", "thumb")), PhotoSearch([]))
    assert ref.url.endswith("/sd.jpg") and (ref.width, ref.height) == (2048, 1536)
