"""Marine warnings of BMKG, Indonesia's weather agency (UPSTREAMS.md §8): high-wave and weather
warnings of its sea-area forecasts.

Each sea area's forecast is ``{"code", "name", "issued", "data": [{"valid_from", "valid_to",
"time_desc", "weather", "warning_desc", "wave_cat", "wave_desc", "wind_from", "wind_to",
"wind_speed_min", "wind_speed_max", ...}]}`` with times as ``"2023-05-31 12:00 UTC"``;
``warning_desc`` "NIHIL." means no warning. Wave categories run 1 Tenang (0-0.5 m) to 7 Sangat
Ekstrem (> 9 m); a period of category 4 Tinggi (2.5-4 m) or above is a high-wave warning here,
and a ``warning_desc`` other than NIHIL is the agency's own warning, quoted.

Port warnings: the shape of BMKG's port forecasts and of its newer warnings file is not
described anywhere this project could check (UPSTREAMS.md: UNVERIFIED), so this panel does not
guess at them: ``ports`` is null and a caveat says so.

Which sea areas are read is the option ``areas`` (codes, comma-separated); the path of one
area (``/public_api/perairan/{code}.json``) is UNVERIFIED and an option too.

The recorded sample (``samples/bmkg_marine/public_api/perairan/O.01.json``) is a constructed
sample in the recorded shape above, made for this project, not a real recording.
"""
from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from coordinator.core.context import ToolContext
from coordinator.core.honesty import Answer, Health
from coordinator.core.registry import Tool, tool
from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register

TOOLS: list[Tool] = []

LICENSE = "BMKG (attribution required)"
WAVES = {"tenang": (1, "Tenang", "0-0.5 m"), "rendah": (2, "Rendah", "0.5-1.25 m"),
         "sedang": (3, "Sedang", "1.25-2.5 m"), "tinggi": (4, "Tinggi", "2.5-4.0 m"),
         "sangat tinggi": (5, "Sangat Tinggi", "4.0-6.0 m"), "ekstrem": (6, "Ekstrem", "6.0-9.0 m"),
         "sangat ekstrem": (7, "Sangat Ekstrem", "over 9.0 m")}
HIGH_WAVE_RANK = 4
NO_WARNING = "NIHIL"


def utc(text: Any) -> str | None:
    """``"2023-05-31 12:00 UTC"`` as ISO 8601; None when absent or not in that form."""
    raw = str(text or "").strip()
    if not raw:
        return None
    try:
        return datetime.strptime(raw.removesuffix("UTC").strip(), "%Y-%m-%d %H:%M").strftime("%Y-%m-%dT%H:%M:00Z")
    except ValueError:
        return None


def wave(cat: Any) -> dict[str, Any]:
    known = WAVES.get(" ".join(str(cat or "").lower().split()))
    if known is None:
        return {"rank": None, "name": (str(cat).strip() or None) if cat else None, "range": None}
    return {"rank": known[0], "name": known[1], "range": known[2]}


def warning_text(raw: Any) -> str | None:
    text = str(raw or "").strip()
    return None if not text or text.rstrip(".").upper() == NO_WARNING else text


def parse_area(doc: dict[str, Any]) -> dict[str, Any]:
    periods = []
    for p in doc["data"]:
        periods.append({"validFrom": utc(p.get("valid_from")), "validTo": utc(p.get("valid_to")),
                        "timeDesc": p.get("time_desc"), "weather": p.get("weather"),
                        "wave": wave(p.get("wave_cat")), "waveDesc": p.get("wave_desc"),
                        "warning": warning_text(p.get("warning_desc")),
                        "windFrom": p.get("wind_from"), "windTo": p.get("wind_to"),
                        "windSpeed": {"min": p.get("wind_speed_min"), "max": p.get("wind_speed_max"),
                                      "unit": "kt (unverified: the upstream states no unit)"}})
    return {"code": doc["code"], "name": doc["name"], "issued": utc(doc.get("issued")), "periods": periods,
            "license": LICENSE}


@register
class BmkgMarine(Source[dict]):
    name = "bmkg_marine"
    label = "BMKG marine forecasts"
    license = LICENSE
    default_base_url = "https://peta-maritim.bmkg.go.id"
    description = "BMKG sea-area forecasts with wave categories and warnings (JSON)"
    options = {"areas": "O.01", "path": "/public_api/perairan/{code}.json"}     # path UNVERIFIED

    async def fetch(self, query: Query) -> list[dict]:
        codes = [c.strip() for c in str(self.option("areas")).split(",") if c.strip()]

        async def one(code: str) -> dict:
            try:
                return parse_area(await self.get_json(self.option("path").format(code=code)))
            except SourceError as exc:
                raise SourceError(f"sea area {code}: {exc}") from None

        return list(await asyncio.gather(*(one(c) for c in codes)))


@tool(TOOLS, name="marine", title="Marine warnings", routes={"public": "/marine"},
      description="BMKG high-wave and weather warnings of Indonesian sea areas: each warning with its area, "
                  "validity (UTC), wave category (Tenang to Sangat Ekstrem, with its height range) and the "
                  "agency's own warning text; and every area's forecast periods.",
      params=(), scopes=("earth.marine",), cache_ttl_s=900, tags=("panels",))
async def marine(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    read = await ctx.services.sources["bmkg_marine"].read(Query())
    warnings = []
    for area in read.records:
        for p in area["periods"]:
            high = (p["wave"]["rank"] or 0) >= HIGH_WAVE_RANK
            if high or p["warning"]:
                warnings.append({"area": area["code"], "areaName": area["name"], "validFrom": p["validFrom"],
                                 "validTo": p["validTo"], "highWave": high, "wave": p["wave"],
                                 "waveDesc": p["waveDesc"], "warning": p["warning"], "license": LICENSE})
    caveats = ["Port warnings are not served: the format of BMKG's port forecasts is not known here, so "
               "whether any port has a warning is unknown (ports: null), not none.",
               "A high-wave warning here is a forecast period of wave category Tinggi (2.5-4 m) or above; "
               "'warning' quotes the agency's own text, null where it said NIHIL (none).",
               "Only the sea areas this service is set to read are covered; an area not listed is unknown."]
    return Answer({"count": len(warnings) if read.report.ok else None, "warnings": warnings, "ports": None,
                   "areas": read.records}, caveats=caveats, health=Health([read.report]))
