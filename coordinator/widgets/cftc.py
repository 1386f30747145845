"""CFTC Commitments of Traders, legacy report, futures only, from the CFTC's public reporting
site (Socrata). Public domain (a U.S. government work).

``/resource/6dca-aqww.json?cftc_contract_market_code=13874A&$order=report_date_as_yyyy_mm_dd DESC
&$limit=4`` answers a JSON array of rows whose values are all text:
``{"market_and_exchange_names", "report_date_as_yyyy_mm_dd": "2026-11-17T00:00:00.000",
"cftc_contract_market_code", "open_interest_all", "noncomm_positions_long_all",
"noncomm_positions_short_all", "comm_positions_long_all", "comm_positions_short_all",
"nonrept_positions_long_all", "nonrept_positions_short_all", ...}``. No recorded answer of this
dataset confirmed the field names: they are the legacy report's column names in lower case,
and independent clients of ``6dca-aqww`` read the same (searched in public code, 2026-12), which
is evidence, not a recording; every answer of these widgets says so. A missing column is
unknown, not zero.

The recorded sample (``samples/cftc/resource/6dca-aqww.json``) is constructed for this project
in that assumed format, not a recording.
"""
from __future__ import annotations

from typing import Any

from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register

from .build import LICENSES

GROUPS = {"nonCommercial": "noncomm", "commercial": "comm", "nonReportable": "nonrept"}


@register
class Cftc(Source[dict]):
    name = "cftc"
    label = "CFTC Commitments of Traders"
    license = LICENSES["cftc"]
    default_base_url = "https://publicreporting.cftc.gov"
    description = "CFTC Commitments of Traders, legacy futures-only (Socrata JSON)"
    cache_ttl_s = 21600.0
    caveat = ("CFTC field names are not confirmed by a recorded answer of dataset 6dca-aqww: they are the "
              "legacy report's columns in lower case, as independent clients of the dataset read them; a "
              "renamed column would read as unknown.")

    async def fetch(self, query: Query) -> list[dict]:
        dataset, contract = query.ids
        doc = await self.get_json(f"/resource/{dataset}.json", {
            "cftc_contract_market_code": contract, "$order": "report_date_as_yyyy_mm_dd DESC",
            "$limit": int(query.params.get("limit") or 4)})
        if not isinstance(doc, list):
            raise SourceError("not a Socrata row list")
        return [parse_row(r, contract, self.license) for r in doc]


def _int(row: dict, key: str) -> int | None:
    v = row.get(key)
    try:
        return int(float(v)) if v not in (None, "") else None
    except (TypeError, ValueError):
        return None


def parse_row(row: Any, contract: str, license: str) -> dict[str, Any]:
    if not isinstance(row, dict) or "report_date_as_yyyy_mm_dd" not in row:
        raise SourceError("a row without report_date_as_yyyy_mm_dd")
    if row.get("cftc_contract_market_code", contract) != contract:
        raise SourceError(f"a row of contract {row.get('cftc_contract_market_code')}, not {contract}")
    out: dict[str, Any] = {"reportDate": str(row["report_date_as_yyyy_mm_dd"])[:10],
                           "market": row.get("market_and_exchange_names"),
                           "openInterest": _int(row, "open_interest_all")}
    for name, prefix in GROUPS.items():
        long_, short = _int(row, f"{prefix}_positions_long_all"), _int(row, f"{prefix}_positions_short_all")
        out[name] = {"long": long_, "short": short,
                     "net": long_ - short if long_ is not None and short is not None else None,
                     "confidence": "high" if long_ is not None and short is not None else "unknown"}
    out["license"] = license
    return out
