"""Current weather at a fixed set of cities: Open-Meteo's forecast API (UPSTREAMS.md §2.3).

Weather is a field, not a set of points; a twin of the whole Earth shows it at a fixed list of
cities, one on each inhabited continent and the largest metropolitan areas besides (option
``cities``: ``Name:lat:lon`` separated by ``;``), asked in one request: ``latitude`` and
``longitude`` take comma-separated lists and the answer is then a JSON list, one object per
location in the order asked (a single location answers one object; both are read). Each object
is ``{"latitude", "longitude" (snapped to the model grid), "current_units", "current": {"time"
(no seconds, no offset: GMT as asked), "interval", "temperature_2m", "weather_code",
"wind_speed_10m"}}``; errors are HTTP 400 ``{"error": true, "reason"}``. Data CC BY 4.0.

The recorded sample (``samples/open_meteo/forecast.json``) is constructed for this project in
that format for the default cities, not a real recording.
"""
from __future__ import annotations

from typing import Any

from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register

from .records import point

LICENSE = "CC-BY-4.0"
ATTRIBUTION = "Weather data by Open-Meteo.com"
CITIES = ("Tokyo:35.69:139.69;Delhi:28.61:77.21;Shanghai:31.23:121.47;Jakarta:-6.21:106.85;Lagos:6.52:3.38;"
          "Cairo:30.04:31.24;Moscow:55.76:37.62;London:51.51:-0.13;New York:40.71:-74.01;"
          "Mexico City:19.43:-99.13;Sao Paulo:-23.55:-46.63;Sydney:-33.87:151.21")
CURRENT = "temperature_2m,weather_code,wind_speed_10m"
# WMO weather interpretation codes, as Open-Meteo documents them.
WMO = {0: "clear sky", 1: "mainly clear", 2: "partly cloudy", 3: "overcast", 45: "fog", 48: "rime fog",
       51: "light drizzle", 53: "drizzle", 55: "dense drizzle", 56: "freezing drizzle", 57: "freezing drizzle",
       61: "light rain", 63: "rain", 65: "heavy rain", 66: "freezing rain", 67: "freezing rain",
       71: "light snow", 73: "snow", 75: "heavy snow", 77: "snow grains", 80: "rain showers",
       81: "rain showers", 82: "violent rain showers", 85: "snow showers", 86: "snow showers",
       95: "thunderstorm", 96: "thunderstorm with hail", 99: "thunderstorm with hail"}


def parse_cities(text: str) -> list[tuple[str, float, float]]:
    out = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        name, lat, lon = part.rsplit(":", 2)
        out.append((name.strip(), float(lat), float(lon)))
    return out


def parse_location(city: tuple[str, float, float], doc: dict[str, Any]) -> dict[str, Any]:
    name, lat, lon = city
    cur = doc["current"]
    units = doc.get("current_units") or {}
    code = cur.get("weather_code")
    time = cur.get("time")
    return point(f"open-meteo:{name}", doc.get("longitude", lon), doc.get("latitude", lat), LICENSE,
                 city=name, time=f"{time}:00Z" if isinstance(time, str) and len(time) == 16 else time,
                 temperature={"value": cur.get("temperature_2m"), "unit": units.get("temperature_2m", "°C")},
                 windSpeed={"value": cur.get("wind_speed_10m"), "unit": units.get("wind_speed_10m", "km/h")},
                 weatherCode=code, weather=WMO.get(code) if isinstance(code, int) else None,
                 modelled=True, attribution=ATTRIBUTION)


@register
class OpenMeteo(Source[dict]):
    name = "open_meteo"
    label = "Open-Meteo"
    license = LICENSE
    default_base_url = "https://api.open-meteo.com/v1"
    description = "Open-Meteo current weather at fixed cities (JSON)"
    options = {"cities": CITIES}

    async def fetch(self, query: Query) -> list[dict]:
        cities = parse_cities(str(self.option("cities")))
        doc = await self.get_json("/forecast", {
            "latitude": ",".join(f"{c[1]:g}" for c in cities), "longitude": ",".join(f"{c[2]:g}" for c in cities),
            "current": CURRENT, "timezone": "GMT"})
        docs = doc if isinstance(doc, list) else [doc]
        if isinstance(doc, dict) and doc.get("error"):
            raise SourceError(f"Open-Meteo refused: {doc.get('reason')}")
        if len(docs) != len(cities):
            raise SourceError(f"{len(docs)} locations answered for {len(cities)} asked")
        return [parse_location(c, d) for c, d in zip(cities, docs)]
