"""Marine warnings of BMKG, Indonesia's weather agency (UPSTREAMS.md §8): high-wave and weather
warnings of its sea-area forecasts and of its port forecasts.

Each sea area's forecast is ``{"code", "name", "issued", "data": [{"valid_from", "valid_to",
"time_desc", "weather", "warning_desc", "wave_cat", "wave_desc", "wind_from", "wind_to",
"wind_speed_min", "wind_speed_max", ...}]}`` with times as ``"2023-05-31 12:00 UTC"``;
``warning_desc`` "NIHIL." means no warning. Wave categories run 1 Tenang (0-0.5 m) to 7 Sangat
Ekstrem (> 9 m); a period of category 4 Tinggi (2.5-4 m) or above is a high-wave warning here,
and a ``warning_desc`` other than NIHIL is the agency's own warning, quoted.

Port forecasts are read from ``/public_api/pelabuhan/{port_id}_{name}.json`` (``0088_Sintete``,
``0309_PPN%20Pemangkat``): the path and a ``data`` list of periods with ``weather``,
``wind_from``, ``wind_to``, ``wind_speed_min``/``max`` (shown there as knots) and ``wave_desc``
are read by BMKG's own Pontianak maritime station site (kanadakurniawan/web-stamar-pontianak,
app/Helpers/Widgets.php and resources/views/elements/widgets/prakiraan-cuaca-pelabuhan.blade.php).
The rest of the shape, ``{"port_id", "name", "latitude", "longitude", "type", "data": [{"issued",
"valid_from", "valid_to", "weather_desc", "warning_desc", "wave_cat", "current_*", "visibility",
"rh_*", "temp_*", "low_tide", "high_tide", ...}]}`` with times as in the sea areas, and bare
``NaN`` for missing numbers at lake ports, is from public client code found through a code index
that did not name its repositories: UNVERIFIED, so every one of those fields is optional here and
a NaN reads as unknown. A port period is a high-wave warning by the sea-area rule (category
Tinggi or above), its category from ``wave_cat``, or where that names none, from the upper
bound of ``wave_desc`` (``"1.25 - 2.5 m"``: Sedang; above 2.5 m: Tinggi); ``warning_desc`` other
than NIHIL is the agency's own warning, quoted.

Which sea areas and ports are read are the options ``areas`` and ``ports`` (codes,
comma-separated; a port's code is its file name without ``.json``). BMKG names a sea area's file
by its code and name, ``{code}_{name}.json`` (``F.09_Teluk Jakarta.json``, ``D.11_Perairan
Ketapang.json``), and lists the files at ``/public_api/perairan_list`` as ``{"files": [{"name":
"D.11_Perairan Ketapang.json", ...}]}``: so a sea area given by its code (``O.01``) is looked up
in that list (its file is the one whose name starts ``O.01_``) and its file asked with the name
URL-quoted (``/public_api/perairan/{code}.json``, ``{code}`` being the file name without
``.json``); an area given as a whole file name (``O.01_Samudera ...``, with its ``_``) is asked as
it is, like a port. The list and the file names are read so by several public clients
(code-index files 61533501034, 68560700768, 56936412061, 12925479341: "code = prefix before
'_'"); a path of the code alone (``perairan/O.01.json``), which this adapter asked before, is
used by none of them. The list unreadable fails every sea area asked by code; a code not in it
fails that area alone, named.
The port feed is read apart from the sea areas: a port that does not answer makes ``ports`` null
(unknown) and the answer degraded naming "BMKG port forecasts", while the sea areas still answer.

A forecast keeps being served after its periods end (a feed that stops updating, an area read
late), so validity is judged against the clock (``freshness.utc_now``, named in the answer as
``asOf``): a warning whose ``validTo`` has passed is over, so it is dropped from ``warnings`` /
``portWarnings`` and left out of ``count`` / ``portCount`` (which count warnings in force or still
to come), and a caveat says how many were dropped (``endedCount`` / ``portEndedCount``). Every
forecast period carries ``ended``, and an area or port whose every period has ended is
``outdated``: whether it has a warning now is unknown, so where every area (or port) read is
outdated ``count`` (or ``portCount``) is null, not 0. A warning whose end cannot be read is kept,
and a caveat says its validity is unknown.

The recorded samples (``samples/bmkg_marine/public_api/perairan_list.json``, the O.01 file it
names under ``.../perairan/`` (its name URL-quoted, as it is asked) and
``.../public_api/pelabuhan/0088_Sintete.json``) are constructed samples in the recorded shapes
above, made for this project, not real recordings (the names in the list are the project's); their periods run 2026-11-25 00:00 to
2026-11-27 00:00 UTC, so read later they are all ended (tests fix the clock).
"""
from __future__ import annotations

import asyncio
import dataclasses
import math
import re
from datetime import datetime
from typing import Any
from urllib.parse import quote

from coordinator.core.context import ToolContext
from coordinator.core.honesty import Answer, Health
from coordinator.core.registry import Tool, tool
from coordinator.core.times import iso
from coordinator.panels.freshness import ended, parse_utc, utc_now
from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register

TOOLS: list[Tool] = []

LICENSE = "BMKG (attribution required)"
WAVES = {"tenang": (1, "Tenang", "0-0.5 m"), "rendah": (2, "Rendah", "0.5-1.25 m"),
         "sedang": (3, "Sedang", "1.25-2.5 m"), "tinggi": (4, "Tinggi", "2.5-4.0 m"),
         "sangat tinggi": (5, "Sangat Tinggi", "4.0-6.0 m"), "ekstrem": (6, "Ekstrem", "6.0-9.0 m"),
         "sangat ekstrem": (7, "Sangat Ekstrem", "over 9.0 m")}
HIGH_WAVE_RANK = 4
UPPER_BOUNDS = (0.5, 1.25, 2.5, 4.0, 6.0, 9.0)      # category n covers heights up to UPPER_BOUNDS[n-1]
NO_WARNING = "NIHIL"
PORTS_LABEL = "BMKG port forecasts"
AREA_LIST = "/public_api/perairan_list"     # {"files": [{"name": "D.11_Perairan Ketapang.json", ...}]}


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


def wave_of_desc(desc: Any) -> dict[str, Any]:
    """The category whose range holds the upper bound of a ``wave_desc`` such as
    ``"1.25 - 2.5 m"`` (2.5 m: Sedang, which ends there; ``"> 9.0 m"``: above it); unknown when
    no height is in it."""
    text = str(desc or "").replace(",", ".")
    heights = [float(h) for h in re.findall(r"\d+(?:\.\d+)?", text)]
    if not heights:
        return wave(None)
    top, over = heights[-1], ">" in text
    rank = 1 + sum(1 for bound in UPPER_BOUNDS if top > bound or (over and top >= bound))
    return wave(next(k for k, v in WAVES.items() if v[0] == rank))


def number(raw: Any) -> float | int | None:
    """A number as served, None for absent, non-numeric or NaN (which BMKG's port files carry)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return None
    return None if isinstance(raw, float) and math.isnan(raw) else raw


def warning_text(raw: Any) -> str | None:
    text = str(raw or "").strip()
    return None if not text or text.rstrip(".").upper() == NO_WARNING else text


def parse_area(doc: dict[str, Any]) -> dict[str, Any]:
    periods = []
    for p in doc["data"]:
        cat = wave(p.get("wave_cat"))     # the category, else read from the height range, as for ports
        periods.append({"validFrom": utc(p.get("valid_from")), "validTo": utc(p.get("valid_to")),
                        "timeDesc": p.get("time_desc"), "weather": p.get("weather"),
                        "wave": cat if cat["rank"] else wave_of_desc(p.get("wave_desc")), "waveDesc": p.get("wave_desc"),
                        "warning": warning_text(p.get("warning_desc")),
                        "windFrom": p.get("wind_from"), "windTo": p.get("wind_to"),
                        "windSpeed": {"min": p.get("wind_speed_min"), "max": p.get("wind_speed_max"),
                                      "unit": "kt (unverified: the upstream states no unit)"}})
    return {"code": doc["code"], "name": doc["name"], "issued": utc(doc.get("issued")), "periods": periods,
            "license": LICENSE}


def parse_port(doc: dict[str, Any], code: str) -> dict[str, Any]:
    periods = []
    for p in doc["data"]:
        cat = wave(p.get("wave_cat"))
        periods.append({"issued": utc(p.get("issued")), "validFrom": utc(p.get("valid_from")),
                        "validTo": utc(p.get("valid_to")), "weather": p.get("weather"),
                        "wave": cat if cat["rank"] else wave_of_desc(p.get("wave_desc")),
                        "waveDesc": p.get("wave_desc"), "warning": warning_text(p.get("warning_desc")),
                        "windFrom": p.get("wind_from"), "windTo": p.get("wind_to"),
                        "windSpeed": {"min": number(p.get("wind_speed_min")),
                                      "max": number(p.get("wind_speed_max")), "unit": "kt"}})
    return {"code": code, "portId": doc.get("port_id"), "name": doc.get("name"),
            "latitude": number(doc.get("latitude")), "longitude": number(doc.get("longitude")),
            "periods": periods, "license": LICENSE}


@register
class BmkgMarine(Source[dict]):
    name = "bmkg_marine"
    label = "BMKG marine forecasts"
    license = LICENSE
    default_base_url = "https://peta-maritim.bmkg.go.id"
    description = "BMKG sea-area and port forecasts with wave categories and warnings (JSON)"
    options = {"areas": "O.01", "path": "/public_api/perairan/{code}.json",     # {code}: the listed file's name
               "ports": "0088_Sintete", "port_path": "/public_api/pelabuhan/{code}.json"}

    def codes(self, option: str) -> list[str]:
        return [c.strip() for c in str(self.option(option)).split(",") if c.strip()]

    async def fetch(self, query: Query) -> list[dict]:
        """Sea areas, or with ``params={"feed": "ports"}`` the ports: two reads, so that one
        feed being down leaves the other answering."""
        if query.params.get("feed") == "ports":
            return await self.fetch_ports()
        codes = self.codes("areas")
        files = await self.area_files() if any("_" not in c for c in codes) else {}

        async def one(part: str) -> list[dict]:
            code = part.removeprefix("sea area ")
            stem = code if "_" in code else files.get(code)
            if stem is None:
                raise SourceError(f"{code} is not in BMKG's list of sea areas ({AREA_LIST})")
            return [parse_area(await self.get_json(self.option("path").format(code=quote(stem))))]

        return await self.read_parts([f"sea area {c}" for c in codes], one)

    async def area_files(self) -> dict[str, str]:
        """BMKG's sea-area files by code: ``{"O.01": "O.01_Samudera ..."}`` (names without
        ``.json``), from ``AREA_LIST``; raises SourceError when it cannot be read."""
        doc = await self.get_json(AREA_LIST)
        if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
            raise SourceError(f"BMKG's list of sea areas ({AREA_LIST}) is not a file list")
        out: dict[str, str] = {}
        for f in doc["files"]:
            name = str((f or {}).get("name") or "") if isinstance(f, dict) else ""
            if "_" in name:
                out.setdefault(name.split("_", 1)[0], name.removesuffix(".json"))
        return out

    async def fetch_ports(self) -> list[dict]:
        async def one(part: str) -> list[dict]:
            code = part.removeprefix("port ")
            return [parse_port(await self.get_json(self.option("port_path").format(code=quote(code))), code)]

        return await self.read_parts([f"port {c}" for c in self.codes("ports")], one)


def with_validity(rec: dict[str, Any], now: datetime) -> dict[str, Any]:
    """An area or port as served at ``now``: each period with ``ended`` (null when its end is
    unreadable), and ``outdated`` when no period is known to be in force or to come: every one
    ended, their ends unreadable, or no period at all (its forecast says nothing of now, so
    'no warning' would be a guess). A copy: the source's record is left as read."""
    periods = [{**p, "ended": ended(parse_utc(p["validTo"]), now)} for p in rec["periods"]]
    return {**rec, "periods": periods, "outdated": not any(p["ended"] is False for p in periods)}


def warnings_of(records: list[dict], place: str, now: datetime) -> tuple[list[dict], int]:
    """The periods of sea areas or ports that carry a high-wave or the agency's own warning and
    have not ended at ``now``, and how many warnings had ended (left out: an ended warning is
    not a current one). A warning whose end cannot be read is kept (``validTo`` null)."""
    out, gone = [], 0
    for rec in records:
        for p in rec["periods"]:
            high = (p["wave"]["rank"] or 0) >= HIGH_WAVE_RANK
            if not (high or p["warning"]):
                continue
            if ended(parse_utc(p["validTo"]), now):
                gone += 1
                continue
            out.append({place: rec["code"], f"{place}Name": rec["name"], "validFrom": p["validFrom"],
                        "validTo": p["validTo"], "highWave": high, "wave": p["wave"],
                        "waveDesc": p["waveDesc"], "warning": p["warning"], "license": LICENSE})
    return out, gone


def validity_caveats(records: list[dict], warnings: list[dict], gone: int, what: str, as_of: str) -> list[str]:
    """What the validity check left out or could not judge, for sea areas or ports (``what``)."""
    caveats = []
    if gone:
        caveats.append(f"{gone} {what} warning{'s' if gone != 1 else ''} whose validity had ended by {as_of} "
                       f"{'were' if gone != 1 else 'was'} dropped: an ended warning is not current, and the "
                       "count leaves it out (its period is still listed, with ended: true).")
    old = [r["code"] for r in records if r["outdated"]]
    if old:
        caveats.append(f"The {what} forecast of {', '.join(old)} has no period still valid at {as_of} "
                       "(outdated: true): no newer one was read, so whether there is a warning there now is "
                       "unknown, not none.")
    unknown = sum(1 for w in warnings if parse_utc(w["validTo"]) is None)
    if unknown:
        caveats.append(f"{unknown} {what} warning{'s' if unknown != 1 else ''} {'have' if unknown != 1 else 'has'} "
                       "no readable end (validTo null): whether still in force is unknown.")
    return caveats


def count_of(records: list[dict], warnings: list[dict]) -> int | None:
    """How many warnings are in force or to come; null when every area or port read is outdated
    (none of their forecasts speaks of now: unknown, not 0)."""
    return None if records and all(r["outdated"] for r in records) else len(warnings)


@tool(TOOLS, name="marine", title="Marine warnings", routes={"public": "/marine"},
      description="BMKG high-wave and weather warnings of Indonesian sea areas and ports that have not ended: "
                  "each warning with its area or port, validity (UTC), wave category (Tenang to Sangat Ekstrem, "
                  "with its height range) and the agency's own warning text; ended warnings are dropped and "
                  "counted; and every area's and port's forecast periods, each marked ended or not.",
      params=(), scopes=("earth.marine",), cache_ttl_s=900, tags=("panels",))
async def marine(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    source = ctx.services.sources["bmkg_marine"]
    caveats = ["A high-wave warning here is a forecast period of wave category Tinggi (2.5-4 m) or above "
               "(for a port without a category, read from the upper bound of its wave height range); "
               "'warning' quotes the agency's own text, null where it said NIHIL (none).",
               "Only the sea areas and ports this service is set to read are covered; one not listed is unknown."]
    if source.codes("ports"):
        area_read, port_read = await asyncio.gather(source.read(Query()), source.read(Query(params={"feed": "ports"})))
        port_report = dataclasses.replace(port_read.report, name=PORTS_LABEL)
        port_parts = [dataclasses.replace(r, name=r.name.replace(f"{source.report_name} ", f"{PORTS_LABEL} ", 1))
                      for r in port_read.parts]
        reports = [*area_read.reports, *(port_parts or [port_report])]
        ports = port_read.records if port_report.ok else None
        caveats.append("The shape of BMKG's port files is confirmed only in part by public code (path, periods, "
                       "weather, wind, wave height range); their other fields are read when present.")
        if ports is None:
            caveats.append("The port forecasts did not answer: whether any port has a warning is unknown "
                           "(ports: null), not none.")
    else:
        area_read, ports = await source.read(Query()), None
        reports = list(area_read.reports)
        caveats.append("No ports are set to be read (SIS_SOURCES__BMKG_MARINE__PORTS), so whether any port has "
                       "a warning is unknown (ports: null), not none.")
    parts = [*area_read.parts, *(port_parts if source.codes("ports") else [])]
    missing = [r.name.removeprefix(f"{source.report_name} ").removeprefix(f"{PORTS_LABEL} ") for r in parts
               if not r.ok]
    if missing and len(missing) < len(parts):
        caveats.append(f"No answer from {', '.join(missing)}: their warnings are unknown, not none; the counts "
                       "are of what answered.")
    now = utc_now()
    as_of = iso(now)
    areas = [with_validity(a, now) for a in area_read.records]
    warnings, area_gone = warnings_of(areas, "area", now)
    caveats += validity_caveats(areas, warnings, area_gone, "sea-area", as_of)
    if ports is not None:
        ports = [with_validity(p, now) for p in ports]
        port_warnings, port_gone = warnings_of(ports, "port", now)
        caveats += validity_caveats(ports, port_warnings, port_gone, "port", as_of)
    else:
        port_warnings, port_gone = None, None
    return Answer({"count": count_of(areas, warnings) if area_read.report.ok else None, "warnings": warnings,
                   "portCount": count_of(ports, port_warnings) if port_warnings is not None else None,
                   "portWarnings": port_warnings, "ports": ports, "areas": areas,
                   "asOf": as_of, "endedCount": area_gone if area_read.report.ok else None,
                   "portEndedCount": port_gone},
                  caveats=caveats, health=Health(reports))
