"""Feeds: the reads behind the layers, each done once for every layer it backs (GDACS for
disasters and cyclones, EONET for the thirteen event layers) and kept for its own lifetime.

A feed's read is kept in the service's answer cache (in process, or Redis when several
coordinators share the load) under ``twin.feed|<name>``, with single flight, for a lifetime
that suits its upstream: the ISS moves 7.7 km a second, Launch Library allows 15 calls an
hour. ``twin_earth`` is cached whole by its declaration, but ``GET /twin`` cannot be (its caps
and layers depend on the caller), so the feeds are what both share. A failed read is
degraded and never kept: the next request asks again.

A feed is *unavailable* rather than failed when nothing was asked: a keyed upstream with no
key, a reference dataset never loaded, an overlay whose provider is not configured. That is
the deployment's state, not a passing fault, so it is said in ``unavailable[]`` /
``notServed[]`` with what would change it, and it does not degrade the answer.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Awaitable, Callable

from coordinator.core.honesty import Answer, Health, SourceReport
from coordinator.sources.events import EVENT_TYPES, EventRecord

from . import reference
from .records import point

FAILED_BACKOFF_S = 30.0    # a failed read is reused this long before the upstream is asked again
# ... longer where the upstream's quota is small: Launch Library's free tier allows 15 calls an
# hour, so asking again every 30 s while it throttles would keep it throttling.
FAILED_BACKOFF = {"launch_library": 240.0}
POINTS_READ = 8000          # the most any plan serves of one layer (Enterprise pointsPerLayer)
GIBS_LAYER = "VIIRS_SNPP_CorrectedReflectance_TrueColor"


@dataclass
class FeedRead:
    records: list[dict[str, Any]] = field(default_factory=list)
    report: SourceReport | None = None      # None: nothing was asked
    unavailable: str | None = None          # why nothing was asked
    total: int | None = None                # records the source holds, where more than read
    dataset: dict[str, Any] | None = None   # the dataset version read

    @property
    def failed(self) -> bool:
        return self.report is not None and not self.report.ok


def _event_point(e: EventRecord) -> dict[str, Any]:
    props: dict[str, Any] = {"title": e.title, "eventType": e.event_type,
                             "eventTypeName": EVENT_TYPES.get(e.event_type), "alertLevel": e.alert_level,
                             "from": e.from_time, "to": e.to_time, "updated": e.updated, "url": e.url,
                             "source": e.source}
    if e.source == "USGS":
        props.update(magnitude=e.extra.get("magnitude"), depthKm=e.extra.get("depthKm"),
                     tsunami=e.extra.get("tsunami"), place=e.extra.get("place"),
                     alertLevelIs="USGS PAGER level; null: not rated by PAGER")
    else:
        props.update(alertScore=e.alert_score, country=e.country, severity=e.severity,
                     position="GDACS event centroid")
    return point(e.id, e.lon, e.lat, e.license, **props)


async def _source(services: Any, name: str, convert: Callable[[Any], dict[str, Any]] | None = None) -> FeedRead:
    src = services.sources[name]
    if src.needs_key and not src.api_key:
        return FeedRead(unavailable=f"{src.report_name} needs a key, not configured here: set "
                                    f"{src.config.key_setting} (or {src.config.key_setting}_FILE)")
    read = await src.read()
    records = [convert(r) for r in read.records] if convert else list(read.records)
    return FeedRead(records, read.report)


async def _dataset(services: Any, kind: str) -> FeedRead:
    records, report, total = await reference.read_layer(services.db, kind, POINTS_READ)
    if report is None:
        what = reference.KINDS[kind][1]
        return FeedRead(unavailable=f"no {kind} dataset is loaded here: an operator loads one with "
                                    f"`sis ingest {kind} FILE` ({what})")
    return FeedRead(records, report, total=total, dataset=report.dataset)


def _gibs() -> FeedRead:
    """NASA GIBS daily true-colour mosaic of yesterday (UTC): today's is still being filled."""
    day = (datetime.now(timezone.utc) - timedelta(days=1)).strftime("%Y-%m-%d")
    return FeedRead([{"tiles": f"https://gibs.earthdata.nasa.gov/wmts/epsg3857/best/{GIBS_LAYER}/default/{day}/"
                               "GoogleMapsCompatible_Level9/{z}/{y}/{x}.jpg",
                      "format": "jpeg", "tileSize": 256, "minZoom": 0, "maxZoom": 9, "date": day,
                      "attribution": "Imagery: NASA EOSDIS GIBS (VIIRS SNPP corrected reflectance)",
                      "license": "public-domain"}])


def _osm() -> FeedRead:
    return FeedRead([{"tiles": "https://tile.openstreetmap.org/{z}/{x}/{y}.png", "format": "png", "tileSize": 256,
                      "minZoom": 0, "maxZoom": 19, "attribution": "© OpenStreetMap contributors",
                      "license": "ODbL-1.0",
                      "usagePolicy": "https://operations.osmfoundation.org/policies/tiles/ (heavy use needs a tile "
                                     "server of your own)"}])


def _panoramax(services: Any) -> FeedRead:
    base = services.sources["panoramax"].base_url
    return FeedRead([{"tiles": f"{base}/map/{{z}}/{{x}}/{{y}}.mvt", "format": "mvt", "minZoom": 0, "maxZoom": 15,
                      "attribution": "Panoramax contributors",
                      "license": "per photo (Panoramax pictures are mostly CC-BY-SA-4.0)",
                      "note": "vector tiles of photo coverage from the configured photo provider; the tile path is "
                              "taken from Panoramax's API and is unverified here"}])


Reader = Callable[[Any], Awaitable[FeedRead]]


async def _static(read: FeedRead) -> FeedRead:
    return read


READERS: dict[str, tuple[float, Reader]] = {      # name -> (kept for s, reader)
    "usgs": (60, lambda s: _source(s, "usgs", _event_point)),
    "gdacs": (120, lambda s: _source(s, "gdacs", _event_point)),
    "eonet": (300, lambda s: _source(s, "eonet")),
    "wheretheiss": (10, lambda s: _source(s, "wheretheiss")),
    "launch_library": (600, lambda s: _source(s, "launch_library")),
    "open_meteo": (600, lambda s: _source(s, "open_meteo")),
    "gdelt": (300, lambda s: _source(s, "gdelt")),
    "waqi_map": (600, lambda s: _source(s, "waqi_map")),
    "rainviewer": (120, lambda s: _source(s, "rainviewer")),
    "tomtom_traffic": (3600, lambda s: _source(s, "tomtom_traffic")),
    "overlay:gibs": (3600, lambda s: _static(_gibs())),
    "overlay:osm": (86400, lambda s: _static(_osm())),
    "overlay:panoramax": (3600, lambda s: _static(_panoramax(s))),
    **{f"dataset:{kind}": (60, (lambda k: lambda s: _dataset(s, k))(kind)) for kind in reference.KINDS},
}


def _to_answer(read: FeedRead) -> Answer:
    return Answer({"records": read.records, "unavailable": read.unavailable, "total": read.total,
                   "dataset": read.dataset}, health=Health([read.report]) if read.report else None)


def _from_answer(answer: Answer) -> FeedRead:
    d = answer.data
    report = answer.health.sources[0] if answer.health and answer.health.sources else None
    return FeedRead(d["records"], report, d["unavailable"], d["total"], d["dataset"])


async def read_feed(services: Any, name: str) -> FeedRead:
    """The kept read of feed ``name``, else a new one. A failed read is never kept as a good
    one, but it is reused for ``FAILED_BACKOFF_S`` (at most the feed's lifetime) before the
    upstream is asked again, so a throttled upstream (Launch Library's 15 calls an hour,
    GDELT's one every 5 s) is not asked on every request while it refuses: the answers stay
    degraded and uncached meanwhile, naming the source's error."""
    ttl, reader = READERS[name]
    failed: dict[str, tuple[float, FeedRead]] = services.extras.setdefault("twin.failed", {})
    recent = failed.get(name)
    if recent is not None and recent[0] > time.monotonic():
        return recent[1]

    async def compute() -> Answer:
        return _to_answer(await reader(services))

    read = _from_answer(await services.cache.run(f"twin.feed|{name}", ttl, compute))
    if read.failed:
        failed[name] = (time.monotonic() + min(ttl, FAILED_BACKOFF.get(name, FAILED_BACKOFF_S)), read)
    else:
        failed.pop(name, None)
    return read


async def read_feeds(services: Any, names: list[str]) -> dict[str, FeedRead]:
    reads = await asyncio.gather(*(read_feed(services, n) for n in names))
    return dict(zip(names, reads))
