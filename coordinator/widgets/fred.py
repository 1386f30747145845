"""FRED (Federal Reserve Bank of St. Louis): one series' observations (UPSTREAMS.md §11).

``/fred/series/observations?series_id=&api_key=&file_type=json`` answers ``{"realtime_start",
"realtime_end", "observation_start", "observation_end", "units", "count", "observations":
[{"realtime_start", "realtime_end", "date", "value"}]}``; ``value`` is text and ``"."`` means
missing (unknown, never zero); errors are ``{"error_code": 400, "error_message": "Bad Request.
The series does not exist."}`` with that status. The key is required: without it the source
answers degraded naming ``SIS_SOURCES__FRED__API_KEY``. Rights vary by series (FRED
republishes government and private sources), so the license names FRED's terms.

The recorded sample (``samples/fred/series/observations.json``) is constructed for this project
in that format (values of UNRATE as FRED shows them), not a recording.
"""
from __future__ import annotations

import json
from typing import Any

from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register
from coordinator.sources.values import finite

from .build import LICENSES


@register
class Fred(Source[dict]):
    name = "fred"
    label = "FRED"
    license = LICENSES["fred"]
    default_base_url = "https://api.stlouisfed.org/fred"
    description = "FRED series observations (JSON)"
    needs_key = True
    demo_api_key = "demo"        # --demo: its recorded sample answers
    cache_ttl_s = 3600.0

    async def fetch(self, query: Query) -> list[dict]:
        (series_id,) = query.ids
        if self.demo and series_id != DEMO_SERIES:
            # The demo upstream answers every series with its one recording (it ignores the
            # query string): serving it under another series' name would be a made-up figure.
            raise SourceError(f"demo mode holds a recorded FRED answer for {DEMO_SERIES} only, not {series_id}")
        p = query.params
        args: dict[str, Any] = {"series_id": series_id, "api_key": self.api_key, "file_type": "json",
                                "sort_order": "desc", "limit": p.get("limit") or 100, "units": p.get("units") or "lin"}
        if p.get("start"):
            args["observation_start"] = p["start"]
        if p.get("end"):
            args["observation_end"] = p["end"]
        try:
            code, body = await self.get("/series/observations", args)
        except SourceError as exc:
            raise SourceError(str(exc).replace(str(self.api_key), "***")) from None
        try:
            doc = json.loads(body)
        except ValueError:
            raise SourceError(f"HTTP {code}: answer is not JSON") from None
        if isinstance(doc, dict) and "error_message" in doc:
            raise SourceError(f"FRED said {doc.get('error_code', code)}: {doc['error_message']}")
        if code != 200 or not isinstance(doc, dict) or not isinstance(doc.get("observations"), list):
            raise SourceError(f"HTTP {code}: not a FRED observations answer")
        return parse_observations(doc, self.license)


DEMO_SERIES = "UNRATE"       # the series of samples/fred/series/observations.json


def parse_observations(doc: dict[str, Any], license: str) -> list[dict]:
    """Newest first as asked; ``"."`` is a missing value: null with confidence unknown. So is
    any value that is not a finite number ("NaN", "1e999"): only a number is a value of high
    confidence."""
    out = []
    for o in doc["observations"]:
        value = finite(o.get("value"))
        out.append({"date": o["date"], "value": value, "confidence": "high" if value is not None else "unknown",
                    "license": license})
    return out
