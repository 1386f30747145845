"""Volcano alert levels of Indonesia (PVMBG, MAGMA Indonesia; UPSTREAMS.md §7): names and
levels only.

The contract serves names and alert levels and never a position: a record is rebuilt from
the fields named here (code, name, province, level) and nothing else of the upstream's
record is passed on, so a coordinate the upstream adds cannot leak into the body.

MAGMA's JSON API needs a bearer token (401 ``{"message":"Token not provided"}`` without): it is
``SIS_SOURCES__MAGMA__API_KEY``, sent as ``Authorization: Bearer``. The record fields
(``ga_code``, ``ga_nama_gapi``, ``ga_prov_gapi``, a status as an integer 1-4 or
``"Level II (Waspada)"``) are as UPSTREAMS.md gives them; the path of the list and its envelope
(a bare list or ``{"data": [...]}``) are UNVERIFIED, so the path is an option and the answer's
caveats say so.

The recorded sample (``samples/magma/api/v1/gunung-api/tingkat-aktivitas.json``) is a
constructed sample in that record format, made for this project, not a real recording.
"""
from __future__ import annotations

import json
import re
from typing import Any

from coordinator.core.context import ToolContext
from coordinator.core.honesty import Answer, Health
from coordinator.core.registry import Tool, tool
from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register

TOOLS: list[Tool] = []

LICENSE = "PVMBG-MAGMA (terms unstated)"
LEVELS = {1: ("Level I (Normal)", "Normal"), 2: ("Level II (Waspada)", "Waspada (advisory)"),
          3: ("Level III (Siaga)", "Siaga (watch)"), 4: ("Level IV (Awas)", "Awas (warning)")}
ROMAN = {"I": 1, "II": 2, "III": 3, "IV": 4}
NAMED = {"normal": 1, "waspada": 2, "siaga": 3, "awas": 4}


def level_of(raw: Any) -> int | None:
    """The alert level 1-4 from an integer, a numeric string or "Level II (Waspada)"; None when
    it says none of these (said as unknown, never guessed)."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw if raw in LEVELS else None
    text = str(raw or "").strip()
    if text.isdigit():
        return int(text) if int(text) in LEVELS else None
    m = re.match(r"(?i)level\s+(IV|III|II|I)\b", text)
    if m:
        return ROMAN[m.group(1).upper()]
    word = re.search(r"(?i)(normal|waspada|siaga|awas)", text)
    return NAMED[word.group(1).lower()] if word else None


def parse_record(r: dict[str, Any]) -> dict[str, Any]:
    """Only the named fields, rebuilt: a position the upstream carries is never copied."""
    level = level_of(r.get("status", r.get("cu_status")))
    name = str(r["ga_nama_gapi"]).strip()
    return {"code": (str(r.get("ga_code") or "").strip() or None), "name": name,
            "province": (str(r.get("ga_prov_gapi") or "").strip() or None),
            "alertLevel": level,
            "alertLevelName": LEVELS[level][0] if level else None,
            "meaning": LEVELS[level][1] if level else "unknown: the upstream's status could not be read",
            "license": LICENSE}


@register
class Magma(Source[dict]):
    name = "magma"
    label = "MAGMA Indonesia (PVMBG)"
    license = LICENSE
    default_base_url = "https://magma.esdm.go.id"
    description = "MAGMA Indonesia volcano activity levels (JSON, bearer token)"
    needs_key = True
    demo_api_key = "demo"        # --demo: its recorded sample answers
    options = {"path": "/api/v1/gunung-api/tingkat-aktivitas"}     # UNVERIFIED path

    async def fetch(self, query: Query) -> list[dict]:
        code, body = await self.get(self.option("path"), headers={"Authorization": f"Bearer {self.api_key}"})
        if code in (401, 403):
            raise SourceError(f"HTTP {code}: MAGMA refused the token; check {self.config.key_setting}")
        if code != 200:
            raise SourceError(f"HTTP {code}")
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise SourceError("answer is not JSON") from exc
        rows = doc.get("data") if isinstance(doc, dict) else doc
        if not isinstance(rows, list):
            raise SourceError("answer holds no list of volcanoes")
        if not rows:
            # MAGMA lists every volcano it monitors, whatever its level: an empty list is no
            # answer, and served as one it was a healthy count 0 with every level at 0.
            raise SourceError("answer lists no volcanoes (MAGMA lists every monitored volcano)")
        return [parse_record(r) for r in rows]


@tool(TOOLS, name="volcano_alerts", title="Volcano alert levels", routes={"public": "/volcano-alerts"},
      description="Indonesia's volcanoes by alert level (I Normal, II Waspada, III Siaga, IV Awas), highest "
                  "first: names, provinces and levels only, never a position.",
      params=(), scopes=("earth.volcano-alerts",), cache_ttl_s=600, tags=("panels",))
async def volcano_alerts(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    read = await ctx.services.sources["magma"].read(Query())
    rows = sorted(read.records, key=lambda r: (-(r["alertLevel"] or 0), r["name"]))
    counts = {LEVELS[n][0]: sum(1 for r in rows if r["alertLevel"] == n) for n in (4, 3, 2, 1)}
    unknown = sum(1 for r in rows if r["alertLevel"] is None)
    caveats = ["Names and alert levels only: this route never serves where a volcano is.",
               "A volcano not listed has no level known here: unknown, not Normal.",
               "The MAGMA list's path and envelope are unverified assumptions of this adapter."]
    if unknown:
        caveats.append(f"{unknown} volcanoes have a status that could not be read: their level is unknown.")
    return Answer({"count": len(rows) if read.report.ok else None,
                   "byLevel": counts if read.report.ok else None,
                   "volcanoes": rows}, caveats=caveats, health=Health([read.report]))
