"""World Bank Indicators API v2: one indicator for one country or aggregate (UPSTREAMS.md §11).

``/v2/country/{c}/indicator/{id}?format=json`` answers ``[{"page", "pages", "per_page" (a number
or text), "total", "sourceid", "lastupdated"}, [{"indicator": {"id", "value"}, "country": {"id",
"value"}, "countryiso3code", "date": "2025", "value": 1.8e12 | null, "unit", "obs_status",
"decimal"}]]``; a year without a value is ``null`` (unknown, never zero), and a country with no
rows at all answers ``[{...,"total": 0}, null]``. A bad code answers HTTP 200 with
``[{"message": [{"id": "120", "key": "Invalid value", "value": "..."}]}]``. The data are
CC BY 4.0. The answer names its indicator; one naming another is refused.

The recorded sample (``samples/worldbank/v2/country/WLD/indicator/NY.GDP.MKTP.CD.json``) is
constructed for this project in that format, not a recording.
"""
from __future__ import annotations

from typing import Any

from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register

from .build import LICENSES

PER_PAGE = 100


@register
class WorldBank(Source[dict]):
    name = "worldbank"
    label = "World Bank Indicators API"
    license = LICENSES["worldbank"]
    default_base_url = "https://api.worldbank.org"
    description = "World Bank indicator values by country (JSON)"
    cache_ttl_s = 86400.0

    async def fetch(self, query: Query) -> list[dict]:
        (indicator,) = query.ids
        p = query.params
        country = str(p.get("country") or "WLD").upper()
        args: dict[str, Any] = {"format": "json", "per_page": PER_PAGE}
        if p.get("from_year") or p.get("to_year"):
            args["date"] = f"{p.get('from_year') or 1960}:{p.get('to_year') or 2100}"
        doc = await self.get_json(f"/v2/country/{country}/indicator/{indicator}", args)
        return parse_indicator(doc, indicator, self.license)


def parse_indicator(doc: Any, indicator: str, license: str) -> list[dict]:
    if not isinstance(doc, list) or not doc or not isinstance(doc[0], dict):
        raise SourceError("not a World Bank answer")
    if "message" in doc[0]:
        msg = "; ".join(f"{m.get('key')}: {m.get('value')}" for m in doc[0]["message"] if isinstance(m, dict))
        raise SourceError(f"World Bank said {msg or 'error'}")
    rows = doc[1] if len(doc) > 1 and isinstance(doc[1], list) else []
    out = []
    for r in rows:
        if (r.get("indicator") or {}).get("id") != indicator:
            raise SourceError(f"the answer is for indicator {(r.get('indicator') or {}).get('id')}, not {indicator}")
        value = r.get("value")
        out.append({"date": r["date"], "value": value, "confidence": "high" if value is not None else "unknown",
                    "country": (r.get("country") or {}).get("value"), "countryCode": r.get("countryiso3code") or
                    (r.get("country") or {}).get("id"), "license": license})
    return out
