"""News of the last day: GDELT DOC 2.0 article lists (UPSTREAMS.md §2.3).

``/api/v2/doc/doc?query=&mode=artlist&format=json&maxrecords=&timespan=1d&sort=datedesc``
answers ``{"articles": [{"url", "url_mobile", "title", "seendate": "20250510T120000Z",
"socialimage", "domain", "language", "sourcecountry"}]}``; no match is ``{}``; a throttled
caller gets plain text ("Please limit requests to one every 5 seconds") with HTTP 429 or 200.

An article list has no coordinates: the layer's records have a null geometry and carry the
publishing outlet's country (``sourceCountry``), which is not where the story happened. The
twin never invents a position for them. Titles and links are GDELT's metadata of third-party
articles; the articles themselves are not served. Which news is asked is the option ``query``.

The recorded sample (``samples/gdelt/doc/doc.json``) is constructed for this project in the
artlist format, not a real recording.
"""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register

from .records import feature

LICENSE = "GDELT terms (free use with citation)"
QUERY = "(earthquake OR flood OR cyclone OR wildfire OR volcano OR tsunami)"


def seen_at(text: str | None) -> str | None:
    if not text:
        return None
    return datetime.strptime(text, "%Y%m%dT%H%M%SZ").strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_article(a: dict[str, Any]) -> dict[str, Any]:
    return feature(a["url"], None, LICENSE, title=a.get("title"), url=a["url"], domain=a.get("domain"),
                   language=a.get("language"), sourceCountry=a.get("sourcecountry") or None,
                   seenAt=seen_at(a.get("seendate")))


@register
class Gdelt(Source[dict]):
    name = "gdelt"
    label = "GDELT DOC 2.0"
    license = LICENSE
    default_base_url = "https://api.gdeltproject.org/api/v2"
    description = "GDELT DOC 2.0 article lists (JSON)"
    options = {"query": QUERY, "maxrecords": "75"}

    async def fetch(self, query: Query) -> list[dict]:
        code, body = await self.get("/doc/doc", {"query": self.option("query"), "mode": "artlist", "format": "json",
                                                 "maxrecords": self.option("maxrecords"), "timespan": "1d",
                                                 "sort": "datedesc"})
        text = body.decode("utf-8", "replace").strip()
        if code == 429 or text.lower().startswith("please limit"):
            raise SourceError("GDELT is throttling this caller (one request every 5 s)")
        if code != 200:
            raise SourceError(f"HTTP {code}")
        try:
            doc = json.loads(text)
        except ValueError:
            raise SourceError(f"answer is not JSON ({text[:60]!r})") from None
        if not isinstance(doc, dict):
            raise SourceError("answer is not a GDELT article list")
        return [parse_article(a) for a in doc.get("articles") or []]
