"""The layer registry: every layer id of the contract's vocabulary (SPEC.md, Layer vocabulary),
declared once with its kind, the feed that backs it, whether it is a default, and, for a layer
this service does not serve, why.

Three kinds: ``data`` (points or lines read from an upstream or a loaded reference dataset),
``overlay`` (a tile template the client fetches from its provider: the service never rehosts
imagery) and ``event`` (``ev:<category>``, one per NASA EONET category). A withdrawn layer
(``flights``) stays a known id with its reason, and so does a layer with no open source
(``absent``): both are answered in ``notServed[]`` / ``unavailable[]``, never ``rejected[]``.
"""
from __future__ import annotations

from dataclasses import dataclass

DATA, OVERLAY, EVENT = "data", "overlay", "event"
EVENT_PREFIX = "ev:"


@dataclass(frozen=True)
class Layer:
    id: str
    kind: str
    title: str
    feed: str | None = None          # the feed that backs it (``feeds.FEEDS``); None: not served
    default: bool = False            # served when a request names no layers
    withdrawn: str | None = None     # why a withdrawn layer is no longer served
    absent: str | None = None        # why a known layer has no source here

    @property
    def not_served_reason(self) -> str | None:
        """Why this layer is never served, whatever its feed answers (None: it can be)."""
        if self.withdrawn:
            return f"withdrawn: {self.withdrawn}"
        return self.absent


# NASA EONET v3 natural-event categories (UPSTREAMS.md §2.1), id and title.
EONET_CATEGORIES: dict[str, str] = {
    "drought": "Drought", "dustHaze": "Dust and Haze", "earthquakes": "Earthquakes", "floods": "Floods",
    "landslides": "Landslides", "manmade": "Manmade", "seaLakeIce": "Sea and Lake Ice",
    "severeStorms": "Severe Storms", "snow": "Snow", "tempExtremes": "Temperature Extremes",
    "volcanoes": "Volcanoes", "waterColor": "Water Color", "wildfires": "Wildfires",
}

FLIGHTS_WITHDRAWN = ("live aircraft are no longer served through the public API because of a data-licensing "
                     "restriction on one upstream mirror")
NEEDS_MAP_TILES = ("it needs tiles of the map-data capability (coordinator/features/), which serves places and "
                   "infrastructure by bbox and radius, not as tiles; no tile template of that data exists yet: "
                   "use GET /earth/places and /earth/infrastructure")

_DATA = (
    Layer("quakes", DATA, "Earthquakes (USGS, M4.5+ past week)", feed="usgs", default=True),
    Layer("disasters", DATA, "Disaster alerts (GDACS, all but cyclones)", feed="gdacs", default=True),
    Layer("cyclones", DATA, "Tropical cyclones (GDACS)", feed="gdacs", default=True),
    Layer("air", DATA, "Air quality stations (WAQI, measured)", feed="waqi_map"),
    Layer("radio", DATA, "Radio stations",
          absent="no source is adopted: the open Radio Browser directory lists geotagged stations but no adapter "
                 "for it is built here yet"),
    Layer("iss", DATA, "International Space Station (wheretheiss.at)", feed="wheretheiss"),
    Layer("cameras", DATA, "Public cameras",
          absent="no openly licensed source of camera positions was found; keyed webcam directories were not "
                 "adopted"),
    Layer("companies", DATA, "Companies",
          absent="no openly licensed, geocoded company register was found; branded places are counted by "
                 "GET /public/v1/{cred}/brand-exposure from open map data instead"),
    Layer("exchanges", DATA, "Exchanges",
          absent="no openly licensed dataset of exchange locations was found"),
    Layer("airports", DATA, "Airports (OurAirports, loaded)", feed="dataset:ourairports"),
    Layer("countries", DATA, "Countries (Natural Earth, loaded)", feed="dataset:ne_countries"),
    Layer("cities", DATA, "Cities (Natural Earth populated places, loaded)", feed="dataset:ne_places"),
    Layer("seaports", DATA, "Seaports (World Port Index, loaded)", feed="dataset:wpi"),
    Layer("rivers", DATA, "Rivers (Natural Earth, loaded)", feed="dataset:ne_rivers"),
    Layer("launches", DATA, "Upcoming launches (Launch Library 2)", feed="launch_library"),
    Layer("weather", DATA, "Current weather at fixed cities (Open-Meteo)", feed="open_meteo"),
    Layer("news", DATA, "News articles (GDELT, last 24 h)", feed="gdelt"),
    Layer("flights", DATA, "Live aircraft", withdrawn=FLIGHTS_WITHDRAWN),
)

_OVERLAYS = (
    Layer("overlay:satellite", OVERLAY, "Satellite imagery (NASA GIBS, VIIRS true colour)", feed="overlay:gibs"),
    Layer("overlay:roads", OVERLAY, "Roads (OpenStreetMap standard tiles)", feed="overlay:osm"),
    Layer("overlay:places", OVERLAY, "Places", absent=f"no tile source: {NEEDS_MAP_TILES}"),
    Layer("overlay:towers", OVERLAY, "Communication towers", absent=f"no tile source: {NEEDS_MAP_TILES}"),
    Layer("overlay:traffic", OVERLAY, "Traffic flow (TomTom, keyed)", feed="tomtom_traffic"),
    Layer("overlay:radar", OVERLAY, "Precipitation radar (RainViewer)", feed="rainviewer"),
    Layer("overlay:photos", OVERLAY, "Street photo coverage (Panoramax)", feed="overlay:panoramax"),
    Layer("overlay:satellites", OVERLAY, "Satellites in orbit",
          absent="no source is adopted: satellite positions need orbit propagation from published element sets "
                 "(CelesTrak), which is not built here"),
)

_EVENTS = tuple(Layer(f"{EVENT_PREFIX}{cid}", EVENT, f"{title} (NASA EONET, open events)", feed="eonet")
                for cid, title in EONET_CATEGORIES.items())

LAYERS: dict[str, Layer] = {layer.id: layer for layer in (*_DATA, *_OVERLAYS, *_EVENTS)}
DEFAULTS: tuple[str, ...] = tuple(lid for lid, layer in LAYERS.items() if layer.default)
WITHDRAWN: tuple[str, ...] = tuple(lid for lid, layer in LAYERS.items() if layer.withdrawn)


def category_of(layer_id: str) -> str | None:
    """The EONET category of an event layer id (``ev:wildfires`` -> ``wildfires``)."""
    return layer_id[len(EVENT_PREFIX):] if layer_id.startswith(EVENT_PREFIX) else None
