"""CoinGecko: a coin's price, market cap, 24 h volume and change (UPSTREAMS.md §11).

``/api/v3/simple/price?ids=bitcoin&vs_currencies=usd&include_market_cap=true&include_24hr_vol=true
&include_24hr_change=true&include_last_updated_at=true`` answers ``{"bitcoin": {"usd": 62000,
"usd_market_cap": ..., "usd_24h_vol": ..., "usd_24h_change": 1.5, "last_updated_at": 1711356300}}``;
an id CoinGecko does not know is left out of the object (``{}``), which is said, not served
as an empty price. The public API needs no key; a demo key, where set
(``SIS_SOURCES__COINGECKO__API_KEY``), travels in ``x-cg-demo-api-key``.

The recorded sample (``samples/coingecko/api/v3/simple/price.json``) is constructed for this
project in that format, not a recording.
"""
from __future__ import annotations

import json
from typing import Any

from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register
from coordinator.sources.values import epoch_utc, finite

from .build import LICENSES


@register
class CoinGecko(Source[dict]):
    name = "coingecko"
    label = "CoinGecko"
    license = LICENSES["coingecko"]
    default_base_url = "https://api.coingecko.com"
    description = "CoinGecko simple price (JSON)"
    cache_ttl_s = 60.0
    takes_key = True                       # a demo key, sent where set; the public API needs none

    async def fetch(self, query: Query) -> list[dict]:
        (coin,) = query.ids
        vs = str(query.params.get("vs_currency") or "usd")
        code, body = await self.get("/api/v3/simple/price", {
            "ids": coin, "vs_currencies": vs, "include_market_cap": "true", "include_24hr_vol": "true",
            "include_24hr_change": "true", "include_last_updated_at": "true"},
            headers={"x-cg-demo-api-key": self.api_key} if self.api_key else None)
        if code == 429:
            raise SourceError("CoinGecko is rate limiting this caller (HTTP 429)")
        if code != 200:
            raise SourceError(f"HTTP {code}")
        try:
            doc = json.loads(body)
        except ValueError:
            raise SourceError("answer is not JSON") from None
        return parse_price(doc, coin, vs, self.license)


def parse_price(doc: Any, coin: str, vs: str, license: str) -> list[dict]:
    """Only a finite number is a figure: anything else ("n/a", NaN) is null with confidence
    unknown, never passed on as a value of high confidence. A ``last_updated_at`` Python's
    clock functions cannot place (10**20) is unknown too, not a failed read."""
    if not isinstance(doc, dict):
        raise SourceError("not a CoinGecko price object")
    row = doc.get(coin)
    if not isinstance(row, dict) or vs not in row:
        raise SourceError(f"CoinGecko has no {vs} price for {coin!r}")

    def fig(key: str) -> dict[str, Any]:
        v = finite(row.get(key))
        return {"value": v, "confidence": "high" if v is not None else "unknown"}

    return [{"coin": coin, "vsCurrency": vs, "price": fig(vs), "marketCap": fig(f"{vs}_market_cap"),
             "volume24h": fig(f"{vs}_24h_vol"), "change24hPct": fig(f"{vs}_24h_change"),
             "lastUpdated": epoch_utc(row.get("last_updated_at")), "license": license}]
