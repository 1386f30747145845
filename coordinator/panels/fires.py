"""Active fires: NASA FIRMS detections of the last 24 h inside a bbox (UPSTREAMS.md §3).

FIRMS answers CSV from ``/api/area/csv/{MAP_KEY}/{SOURCE}/{w,s,e,n}/{days}``. A day range of
2 gives today and yesterday (UTC), which always covers the last 24 h; the 24 h window itself is
computed here from each row's ``acq_date`` and ``acq_time`` (UTC, ``HHMM`` not zero-padded:
``5`` is 00:05, ``230`` is 02:30), so a detection from 24 h and one minute ago is left out
whatever the upstream's day boundaries are.

FIRMS needs a MAP_KEY in the path: without ``SIS_SOURCES__FIRMS__API_KEY`` the source answers
degraded naming that setting, and the key never appears in an answer (an error that quotes the
URL has it masked).

The recorded sample (``samples/firms/DEMO_MAP_KEY/VIIRS_SNPP_NRT/113.75,-2.5,114,-2.25/2.csv``)
is a constructed sample in the real VIIRS format, made for this project, not a real recording:
it answers the bbox ``113.75,-2.5,114,-2.25`` (Central Kalimantan) with the key
``DEMO_MAP_KEY`` and rows dated 2026-11-24/25.
"""
from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta, timezone
from typing import Any

from coordinator.core.context import ToolContext
from coordinator.core.honesty import Answer, Health, License
from coordinator.core.registry import Tool, bbox, tool
# The clock the 24 h window is computed from: the panels' one clock, imported by name so that a
# test (and briefs, which reads fires.utc_now) fixes it here.
from coordinator.panels.freshness import CLOCK_SKEW, CLOCK_SKEW_TEXT, utc_now
from coordinator.sources.base import Query, Source, SourceError
from coordinator.sources.registry import register

TOOLS: list[Tool] = []

WINDOW = timedelta(hours=24)
LICENSE = License.PUBLIC_DOMAIN.value          # NASA open data; FIRMS asks to be cited
ATTRIBUTION = "NASA FIRMS (LANCE), https://firms.modaps.eosdis.nasa.gov"
VIIRS_CONFIDENCE = {"l": "low", "n": "nominal", "h": "high", "low": "low", "nominal": "nominal", "high": "high"}
REQUIRED = ("latitude", "longitude", "acq_date", "acq_time")


def acquired_at(acq_date: str, acq_time: str) -> datetime:
    """A row's acquisition time in UTC. ``acq_time`` is HHMM without its leading zeros
    (``5`` 00:05, ``45`` 00:45, ``230`` 02:30, ``1405`` 14:05); anything else is refused."""
    t = acq_time.strip()
    if not t.isdigit() or len(t) > 4:
        raise ValueError(f"acq_time {acq_time!r} is not HHMM")
    hh, mm = divmod(int(t), 100)
    if hh > 23 or mm > 59:
        raise ValueError(f"acq_time {acq_time!r} is not a time of day")
    day = datetime.strptime(acq_date.strip(), "%Y-%m-%d")
    return day.replace(hour=hh, minute=mm, tzinfo=timezone.utc)


def _num(row: dict[str, str], *names: str) -> float | None:
    for name in names:
        raw = (row.get(name) or "").strip()
        if raw:
            return float(raw)
    return None


def parse_row(row: dict[str, str]) -> dict[str, Any]:
    """One CSV row as served. VIIRS confidence is a class (low/nominal/high), MODIS a 0-100
    number: each is said as what it is, never turned into the other."""
    conf_raw = (row.get("confidence") or "").strip()
    instrument = (row.get("instrument") or "").strip() or None
    if conf_raw.isdigit():
        confidence: dict[str, Any] = {"scale": "percent (MODIS, 0-100)", "value": int(conf_raw)}
    elif conf_raw.lower() in VIIRS_CONFIDENCE:
        confidence = {"scale": "class (VIIRS: low, nominal, high)", "value": VIIRS_CONFIDENCE[conf_raw.lower()]}
    else:
        confidence = {"scale": "unknown", "value": None}
    dn = (row.get("daynight") or "").strip().upper()
    return {
        "latitude": float(row["latitude"]), "longitude": float(row["longitude"]),
        "detectedAt": acquired_at(row["acq_date"], row["acq_time"]).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "satellite": (row.get("satellite") or "").strip() or None,
        "instrument": instrument,
        "confidence": confidence,
        "brightnessK": _num(row, "bright_ti4", "brightness"),
        "frpMW": _num(row, "frp"),
        "scanKm": _num(row, "scan"), "trackKm": _num(row, "track"),
        "dayNight": {"D": "day", "N": "night"}.get(dn),
        "productVersion": (row.get("version") or "").strip() or None,
        "license": LICENSE, "attribution": ATTRIBUTION,
    }


def parse_csv(text: str) -> list[dict[str, Any]]:
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or ())]
    if missing:
        raise SourceError(f"answer is not FIRMS CSV (no {', '.join(missing)} column)")
    rows = list(reader)
    # DictReader fills a short row with None and keeps a long one's extras under None: either
    # is a body cut or garbled, whose detections would be served with fields made up as null.
    bad = sum(1 for row in rows if None in row or None in row.values())
    if bad:
        raise SourceError(f"{bad} of {len(rows)} rows do not have the header's {len(reader.fieldnames or ())} "
                          "columns: the answer is cut or garbled")
    return [parse_row(row) for row in rows]


def _deg(v: float) -> str:
    return f"{v:.6f}".rstrip("0").rstrip(".")


@register
class Firms(Source[dict]):
    name = "firms"
    label = "NASA FIRMS"
    license = LICENSE
    default_base_url = "https://firms.modaps.eosdis.nasa.gov/api/area/csv"
    description = "NASA FIRMS active fire detections (CSV, needs a MAP_KEY)"
    needs_key = True
    demo_api_key = "DEMO_MAP_KEY"        # --demo: its recorded sample answers
    options = {"product": "VIIRS_SNPP_NRT"}      # VIIRS_NOAA20_NRT, VIIRS_NOAA21_NRT, MODIS_NRT, ...

    async def fetch(self, query: Query) -> list[dict]:
        w, s, e, n = query.bbox
        path = f"/{self.api_key}/{self.option('product')}/{_deg(w)},{_deg(s)},{_deg(e)},{_deg(n)}/2"
        try:
            code, body = await self.get(path)
        except SourceError as exc:
            raise SourceError(str(exc).replace(str(self.api_key), "***")) from None
        text = body.decode("utf-8-sig", "replace")      # a BOM is not part of the header
        if text.strip().lower().startswith("invalid map_key"):
            raise SourceError(f"FIRMS refused the MAP_KEY ({text.strip()[:40]}): check {self.config.key_setting}")
        if code != 200:
            raise SourceError(f"HTTP {code}")
        return [r for r in parse_csv(text) if w <= r["longitude"] <= e and s <= r["latitude"] <= n]


def in_window(records: list[dict[str, Any]], now: datetime) -> tuple[list[dict[str, Any]], int]:
    """The detections of the 24 h window ending at ``now``, and how many are timed past it by more
    than the clock skew. A detection timed a little after this answer's clock is one of this
    window (clocks differ by minutes; it was dropped unsaid); one past the skew carries a time that
    cannot be right. The panel and the event brief's fires figure read the window so, alike."""
    def at(r: dict[str, Any]) -> datetime:
        return datetime.strptime(r["detectedAt"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)

    since = now - WINDOW
    rows = [r for r in records if since <= at(r) <= now + CLOCK_SKEW]
    return rows, sum(1 for r in records if at(r) > now + CLOCK_SKEW)


@tool(TOOLS, name="fires", title="Active fires (last 24 h)", routes={"public": "/fires"},
      description="NASA FIRMS active fire detections inside a bbox whose acquisition time (acq_date and "
                  "acq_time, UTC) lies in the last 24 h, newest first, each with its satellite, instrument, "
                  "confidence on the instrument's own scale, brightness (K) and fire radiative power (MW).",
      params=(bbox(),), scopes=("earth.fires",), cache_ttl_s=300, tags=("panels",))
async def fires(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    read = await ctx.services.sources["firms"].read(Query(bbox=params["bbox"]))
    now = utc_now()
    since = now - WINDOW
    rows, ahead = in_window(read.records, now)
    rows.sort(key=lambda r: r["detectedAt"], reverse=True)
    caveats = [
        "Detections are satellite hot spots at overpass times: a bbox with none may still have fire hidden by "
        "cloud, smoke or canopy, or burning between overpasses; absence of a detection is unknown, not no fire.",
        "The 24 h window is computed from each detection's acquisition time (UTC) against this answer's time; "
        "near-real-time rows reach FIRMS about 3 h after acquisition.",
    ] + ([f"{ahead} detections timed more than {CLOCK_SKEW_TEXT} after this answer's time were left out: a time "
          "that cannot be right, so when they were seen is unknown."] if ahead else [])
    return Answer({"window": {"from": since.strftime("%Y-%m-%dT%H:%M:%SZ"), "to": now.strftime("%Y-%m-%dT%H:%M:%SZ")},
                   "product": ctx.services.sources["firms"].option("product"),
                   "count": len(rows) if read.report.ok else None, "detections": rows},
                  caveats=caveats, health=Health([read.report]))
