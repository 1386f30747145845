"""``sis widgets build-catalogue``: the catalogue rebuilt from the upstreams' own listings.

Given a folder of listing answers in the upstreams' real formats, it chooses the widgets by
fixed rules and writes one record per widget, saying for each which list it came from and
whether its ids were confirmed there:

- World Bank: an indicator listing (``/v2/indicator`` or ``/v2/source/2/indicator``, JSON:
  ``[{"page", "pages", "per_page", "total"}, [{"id", "name", "unit", "source", "sourceNote",
  "topics": [{"id", "value"}]}]]``). Indicators whose first topic is economic (``MACRO_TOPICS``)
  go to Macro; Climate and Social take the first five of their topic; Global takes the rest
  round-robin over topics (so that every topic is represented), ids in listing order.
- FRED: any number of ``seriess`` answers (``series/search``, ``release/series``,
  ``category/series``, ``series``) confirm ids and give titles, units and frequency; a seed
  list (CSV ``id,title,frequency``, a third party's) proposes ids that stay unconfirmed until a
  FRED listing names them. Macro's FRED widgets fill what the World Bank's macro topics leave.
- CoinGecko: a ``/coins/markets`` answer (or ``/coins/list``): Crypto is its first 17 coins by
  ``market_cap_rank``.
- The few widgets over other upstreams (NOAA SWPC products, CFTC reports, Open-Meteo, the
  feeds this service already reads) are declared in ``fixed()`` with how each was confirmed
  (``LISTS_FIXED``).

With network access an operator fetches fresh listings into the folder (``fetch_listings``,
``--fetch``) and rebuilds; without it the folder's recorded answers are used as they are.
"""
from __future__ import annotations

import csv
import json
import re
from collections import OrderedDict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

from .catalogue import CATEGORY_COUNTS, dumps, parse

MACRO_TOPICS = ("Economy & Growth", "Public Sector", "Private Sector", "Financial Sector", "External Debt", "Trade")
CLIMATE_TOPIC, SOCIAL_TOPIC = "Climate Change", "Social Protection & Labor"
SPECIAL_FRED = {"Equities": ("NASDAQCOM", "NIKKEI225", "DJUA", "VIXCLS", "OVXCLS"),
                "Signals": ("T10Y2Y", "STLFSI4", "NFCI", "BAMLH0A0HYM2"),
                "Perception": ("UMCSENT", "MICH")}
# The World Bank's series start in 1960. The last year is the adapter's open end, not a
# guess at the data's: a range past the latest value simply ends there, while a bound
# near today (it was 2030) would start refusing this year's question within a few years.
FIRST_YEAR, LAST_YEAR = 1960, 2100
FRED_UNITS = ("lin", "chg", "ch1", "pch", "pc1", "pca", "cch", "cca", "log")
VS_CURRENCIES = ("usd", "eur", "jpy", "gbp", "cny", "idr", "inr", "krw", "aud", "cad", "chf", "btc", "eth")

LICENSES = {
    "fred": "FRED terms of use (rights vary by series source; see the series notes on FRED)",
    "worldbank": "CC-BY-4.0",
    "coingecko": "CoinGecko API terms (attribution required)",
    "swpc": "public-domain",
    "cftc": "public-domain",
    "open_meteo_point": "CC-BY-4.0",
}


# ---- parameters, by adapter ------------------------------------------------------------

def p(name: str, type_: str, description: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, "description": description, **kw}


def fred_params() -> list[dict[str, Any]]:
    date = r"\d{4}-\d{2}-\d{2}"
    return [p("start", "string", "First observation date, YYYY-MM-DD", pattern=date),
            p("end", "string", "Last observation date, YYYY-MM-DD", pattern=date),
            p("limit", "integer", "Most recent observations returned", minimum=1, maximum=1000, default=100),
            p("units", "string", "FRED transformation (lin: levels, pch: percent change, pc1: from a year ago, ...)",
              enum=list(FRED_UNITS), default="lin")]


def wb_params() -> list[dict[str, Any]]:
    return [p("country", "string", "ISO 3166 alpha-2 or alpha-3 code, or a World Bank aggregate (WLD, EUU, ...)",
              pattern="[A-Za-z0-9]{2,3}", default="WLD"),
            p("from_year", "integer", "First year", minimum=FIRST_YEAR, maximum=LAST_YEAR),
            p("to_year", "integer", "Last year", minimum=FIRST_YEAR, maximum=LAST_YEAR)]


def cg_params() -> list[dict[str, Any]]:
    return [p("vs_currency", "string", "Currency the price is quoted in", enum=list(VS_CURRENCIES), default="usd")]


def rows_params(default: int, maximum: int) -> list[dict[str, Any]]:
    return [p("limit", "integer", "Most recent rows returned", minimum=1, maximum=maximum, default=default)]


def point_params(days: bool) -> list[dict[str, Any]]:
    out = [p("lat", "number", "Latitude in degrees", required=True, minimum=-90, maximum=90),
           p("lon", "number", "Longitude in degrees", required=True, minimum=-180, maximum=180)]
    if days:
        out.append(p("days", "integer", "Forecast days", minimum=1, maximum=16, default=7))
    return out


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-")[:70]


def record(prefix: str, upstream: str, *, title: str, category: str, source: str, upstream_ids: dict[str, str],
           params: list[dict[str, Any]], units: str, cadence: str, confirmed: bool, listed_by: str,
           license: str | None = None, description: str = "") -> dict[str, Any]:
    rec: dict[str, Any] = {"id": f"{prefix}-{slug(upstream)}", "title": title, "category": category,
                           "source": source, "upstreamIds": upstream_ids, "params": params, "units": units,
                           "license": license or LICENSES[source], "cadence": cadence, "confirmed": confirmed,
                           "listedBy": listed_by}
    if description:
        rec["description"] = description
    return rec


# ---- the fixed few ----------------------------------------------------------------------

def swpc(product: str, title: str, units: str, cadence: str, confirmed: bool) -> dict[str, Any]:
    return record("swpc", product, title=title, category="Space", source="swpc", upstream_ids={"product": product},
                  params=rows_params(24, 500), units=units, cadence=cadence, confirmed=confirmed,
                  listed_by="swpc-upstreams-md" if confirmed else "swpc-products-unconfirmed")


def feed(source: str, title: str, category: str, license: str, cadence: str, units: str = "records") -> dict[str, Any]:
    return record("feed", source, title=title, category=category, source=source, upstream_ids={"feed": source},
                  params=rows_params(20, 100), units=units, cadence=cadence, confirmed=True,
                  listed_by="registered-feeds", license=license)


def fixed() -> list[dict[str, Any]]:
    """Widgets over upstreams without a listing to choose from: a handful, each named here."""
    out = [
        swpc("noaa-planetary-k-index", "Planetary K index (3-hourly)", "Kp (0-9)", "3 hours", True),
        swpc("noaa-planetary-k-index-forecast", "Planetary K index forecast", "Kp (0-9)", "3 hours", False),
        swpc("solar-wind/plasma-1-day", "Solar wind plasma, last day (DSCOVR)", "density p/cm3, speed km/s, K",
             "1 minute", False),
        swpc("solar-wind/mag-1-day", "Interplanetary magnetic field, last day (DSCOVR)", "nT", "1 minute", False),
        swpc("10cm-flux-30-day", "F10.7 cm radio flux, last 30 days", "sfu", "1 day", False),
        record("cftc", "13874A", title="E-mini S&P 500 futures: commitments of traders (legacy, futures only)",
               category="Positioning", source="cftc", upstream_ids={"dataset": "6dca-aqww", "contract": "13874A"},
               params=rows_params(4, 52), units="contracts", cadence="weekly (Tuesday positions, Friday release)",
               confirmed=False, listed_by="cftc-unconfirmed"),
        record("cftc", "088691", title="Gold futures (COMEX): commitments of traders (legacy, futures only)",
               category="Positioning", source="cftc", upstream_ids={"dataset": "6dca-aqww", "contract": "088691"},
               params=rows_params(4, 52), units="contracts", cadence="weekly (Tuesday positions, Friday release)",
               confirmed=False, listed_by="cftc-unconfirmed"),
        record("wx", "current", title="Current weather at a point", category="Weather", source="open_meteo_point",
               upstream_ids={"endpoint": "forecast", "current": "temperature_2m,relative_humidity_2m,"
                                                                 "wind_speed_10m,precipitation,weather_code"},
               params=point_params(False), units="°C, %, km/h, mm", cadence="15 minutes", confirmed=True,
               listed_by="open-meteo-upstreams-md"),
        record("wx", "daily", title="Daily forecast at a point", category="Weather", source="open_meteo_point",
               upstream_ids={"endpoint": "forecast", "daily": "temperature_2m_max,temperature_2m_min,"
                                                               "precipitation_sum"},
               params=point_params(True), units="°C, mm", cadence="1 hour", confirmed=False,
               listed_by="open-meteo-daily-unconfirmed"),
        feed("usgs", "Earthquakes of the week, M4.5+ (USGS)", "Earth", "public-domain", "1 minute", "events"),
        feed("gdacs", "Active disaster alerts (GDACS)", "Globe", "GDACS-terms-attribution", "6 minutes", "events"),
        feed("eonet", "Open natural events (NASA EONET)", "Globe", "unstated (NASA EONET open data)", "1 hour",
             "events"),
        feed("wheretheiss", "International Space Station position", "Globe", "unstated (wheretheiss.at)",
             "on request", "position"),
        feed("launch_library", "Upcoming orbital launches (Launch Library 2)", "Globe",
             "unstated (The Space Devs, Launch Library 2)", "1 hour", "launches"),
        feed("open_meteo", "Current weather in the world's largest cities (Open-Meteo)", "Globe", "CC-BY-4.0",
             "15 minutes", "cities"),
        feed("waqi_map", "Air quality stations (WAQI)", "Globe",
             "WAQI terms (non-commercial, attribution required)", "1 hour", "stations"),
        feed("magma", "Volcano alert levels, Indonesia (PVMBG MAGMA)", "Globe", "PVMBG-MAGMA (terms unstated)",
             "on change", "volcanoes"),
        feed("rainviewer", "Latest weather radar mosaic tiles (RainViewer)", "Geospatial",
             "RainViewer terms (free, attribution required)", "10 minutes", "tile template"),
        feed("gdelt", "Latest world news articles (GDELT DOC 2.0)", "News", "GDELT terms (free use with citation)",
             "15 minutes", "articles"),
    ]
    return out


LISTS_FIXED = {
    "swpc-upstreams-md": {"how": "NOAA SWPC product path and both formats (legacy table, objects) recorded in "
                                 "the project's UPSTREAMS.md §11", "confirms": True},
    "swpc-products-unconfirmed": {"how": "product paths under https://services.swpc.noaa.gov/products/ named by "
                                         "the maintainers; no recorded listing confirmed them", "confirms": False},
    "cftc-unconfirmed": {"how": "CFTC Public Reporting (Socrata) dataset 6dca-aqww (Legacy, futures only) and "
                                "contract market codes named by the maintainers; field names as independent "
                                "clients of the dataset read them, no recorded answer",
                         "confirms": False},
    "open-meteo-upstreams-md": {"how": "Open-Meteo /v1/forecast with current= variables, format recorded in "
                                       "UPSTREAMS.md §2.3", "confirms": True},
    "open-meteo-daily-unconfirmed": {"how": "Open-Meteo /v1/forecast daily= variables as documented by "
                                            "Open-Meteo; no recording confirmed them", "confirms": False},
    "registered-feeds": {"how": "sources this service already reads, each with its recorded sample "
                                "(coordinator/sources, coordinator/panels, coordinator/twin)", "confirms": True},
    "fred-recorded-answer": {"how": "a recorded FRED /fred/series answer for SP500 in a public client's test "
                                    "(search index file id 43758144466)", "confirms": True},
    "maintainer-choice-unconfirmed": {"how": "FRED series ids named by the maintainers, not found in any "
                                             "recorded FRED listing", "confirms": False},
}
EXTRA_EQUITIES = [("SP500", "S&P 500", "fred-recorded-answer", True),
                  ("DJIA", "Dow Jones Industrial Average", "maintainer-choice-unconfirmed", False),
                  ("NASDAQ100", "NASDAQ 100 Index", "maintainer-choice-unconfirmed", False)]


# ---- reading a folder of listings ---------------------------------------------------------

def read_listings(folder: Path) -> dict[str, Any]:
    """Each file of ``folder`` recognised by its content: World Bank indicator listings, FRED
    ``seriess`` answers, FRED seed CSVs, CoinGecko coin lists. A file that is none is refused."""
    out: dict[str, Any] = {"worldbank": [], "fred": [], "fred_seed": [], "coingecko": []}
    for f in sorted(folder.iterdir()):
        if f.suffix == ".md" or not f.is_file():
            continue
        if f.suffix == ".csv":
            with f.open(newline="", encoding="utf-8") as fh:
                rows = list(csv.DictReader(fh))
            if not rows or "id" not in rows[0]:
                raise ValueError(f"{f.name}: a seed CSV needs an 'id' column")
            out["fred_seed"].append((f.name, rows))
            continue
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"{f.name}: not JSON ({exc})") from None
        if isinstance(doc, list) and len(doc) == 2 and isinstance(doc[0], dict) and "page" in doc[0]:
            out["worldbank"].append((f.name, doc))
        elif isinstance(doc, dict) and isinstance(doc.get("seriess"), list):
            out["fred"].append((f.name, doc))
        elif isinstance(doc, list) and doc and all(isinstance(r, dict) and "id" in r and "symbol" in r for r in doc):
            out["coingecko"].append((f.name, doc))
        else:
            raise ValueError(f"{f.name}: not a listing this generator reads")
    return out


def build(listings: Mapping[str, Any], *, provenance: Mapping[str, str] | None = None,
          built_at: str | None = None, counts: Mapping[str, int] = CATEGORY_COUNTS) -> dict[str, Any]:
    """The catalogue document from the listings (``read_listings``). ``provenance``: how each
    listing file was obtained, by file name (recorded in the catalogue's ``lists``). ``counts``:
    the contract's, unless a generator change is being tried on small listings (a catalogue
    with other counts is refused at start-up)."""
    provenance = provenance or {}
    lists: dict[str, Any] = dict(LISTS_FIXED)
    widgets: list[dict[str, Any]] = []

    # World Bank
    indicators: "OrderedDict[str, dict]" = OrderedDict()
    for name, doc in listings.get("worldbank", ()):
        lists[f"worldbank:{name}"] = {"how": provenance.get(name, f"World Bank API indicator listing ({name})"),
                                      "format": "World Bank API v2 indicator listing (JSON)", "confirms": True,
                                      "total": doc[0].get("total")}
        for ind in doc[1] or []:
            indicators.setdefault(ind["id"], {**ind, "_list": f"worldbank:{name}"})
    topic = {i: ((ind.get("topics") or [{}])[0].get("value") or "").strip() for i, ind in indicators.items()}
    need = dict(counts)

    def wb(ind: dict, category: str) -> dict[str, Any]:
        return record("wb", ind["id"], title=ind["name"], category=category, source="worldbank",
                      upstream_ids={"indicator": ind["id"], "source": str((ind.get("source") or {}).get("id", ""))},
                      params=wb_params(), units=(ind.get("unit") or "").strip() or _units_from_name(ind["name"]),
                      cadence="annual", confirmed=True, listed_by=ind["_list"])

    used: set[str] = set()
    for category, wanted in (("Climate", CLIMATE_TOPIC), ("Social", SOCIAL_TOPIC)):
        for i in [i for i in indicators if topic[i] == wanted][:need[category]]:
            widgets.append(wb(indicators[i], category))
            used.add(i)
    macro_wb = [i for i in indicators if topic[i] in MACRO_TOPICS and i not in used]
    by_topic: "OrderedDict[str, list[str]]" = OrderedDict()
    for i in indicators:
        if i not in used and topic[i] not in MACRO_TOPICS:
            by_topic.setdefault(topic[i] or "(no topic)", []).append(i)
    global_ids: list[str] = []
    while len(global_ids) < need["Global"] and any(by_topic.values()):
        for t in list(by_topic):
            if by_topic[t] and len(global_ids) < need["Global"]:
                global_ids.append(by_topic[t].pop(0))
    for i in global_ids:
        widgets.append(wb(indicators[i], "Global"))

    # FRED: confirmations and titles from FRED's own answers, candidates from seeds
    confirmed: dict[str, dict] = {}
    for name, doc in listings.get("fred", ()):
        lists[f"fred:{name}"] = {"how": provenance.get(name, f"FRED seriess answer ({name})"),
                                 "format": "FRED API series listing (JSON, seriess)", "confirms": True}
        for s in doc["seriess"]:
            confirmed.setdefault(s["id"], {**s, "_list": f"fred:{name}"})
    candidates: "OrderedDict[str, dict]" = OrderedDict((sid, s) for sid, s in confirmed.items())  # confirmed first
    for name, rows in listings.get("fred_seed", ()):
        lists[f"fred-seed:{name}"] = {"how": provenance.get(name, f"third-party list of FRED ids ({name})"),
                                      "format": "CSV id,title,frequency", "confirms": False}
        for r in rows:
            candidates.setdefault(r["id"], {"id": r["id"], "title": r.get("title", ""),
                                            "frequency": r.get("frequency", ""), "_list": f"fred-seed:{name}"})

    def fred(sid: str, category: str, title: str = "", listed_by: str = "", is_confirmed: bool | None = None):
        c = confirmed.get(sid)
        seed = candidates.get(sid, {})
        ok = c is not None if is_confirmed is None else (is_confirmed or c is not None)
        return record("fred", sid, title=(c or seed).get("title") or title, category=category, source="fred",
                      upstream_ids={"seriesId": sid}, params=fred_params(),
                      units=(c or {}).get("units") or "as FRED publishes the series (see its page)",
                      cadence=((c or seed).get("frequency") or "see the series page").lower(), confirmed=ok,
                      listed_by=(c or {}).get("_list") or listed_by or seed.get("_list", ""))

    special = {sid for ids in SPECIAL_FRED.values() for sid in ids} | {e[0] for e in EXTRA_EQUITIES}
    for category, ids in SPECIAL_FRED.items():
        for sid in ids:
            if sid not in candidates:
                raise ValueError(f"FRED series {sid} ({category}) is in no listing given")
            widgets.append(fred(sid, category))
    for sid, title, listed_by, ok in EXTRA_EQUITIES:
        widgets.append(fred(sid, "Equities", title, listed_by, ok))
    fred_macro = [sid for sid in candidates if sid not in special]
    n_fred = need["Macro"] - len(macro_wb)
    if n_fred < 0:
        macro_wb, n_fred = macro_wb[:need["Macro"]], 0
    if len(fred_macro) < n_fred:
        raise ValueError(f"Macro needs {n_fred} FRED series; the listings give {len(fred_macro)}")
    for i in macro_wb:
        widgets.append(wb(indicators[i], "Macro"))
    for sid in fred_macro[:n_fred]:
        widgets.append(fred(sid, "Macro"))

    # CoinGecko
    coins: list[dict] = []
    for name, doc in listings.get("coingecko", ()):
        lists[f"coingecko:{name}"] = {"how": provenance.get(name, f"CoinGecko coin listing ({name})"),
                                      "format": "CoinGecko /api/v3/coins/markets (JSON)", "confirms": True}
        coins += [{**c, "_list": f"coingecko:{name}"} for c in doc]
    coins.sort(key=lambda c: (c.get("market_cap_rank") or 10**9))
    for c in coins[:need["Crypto"]]:
        widgets.append(record("cg", c["id"], title=f"{c['name']} ({c['symbol'].upper()}) price", category="Crypto",
                              source="coingecko", upstream_ids={"coin": c["id"]}, params=cg_params(),
                              units="price in vs_currency; market cap; 24 h volume and change (%)",
                              cadence="about 1 minute", confirmed=True, listed_by=c["_list"]))

    widgets += fixed()
    order = {c: n for n, c in enumerate(CATEGORY_COUNTS)}
    widgets.sort(key=lambda w: order[w["category"]])
    doc = {"version": 1, "builtAt": built_at or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "builtBy": "sis widgets build-catalogue", "lists": lists, "widgets": widgets}
    parse(doc, counts=counts)          # the counts, the ids, the parameter types: refused here rather than at start-up
    return doc


# Brackets a World Bank name ends with that say how a figure was made, not its unit:
# "Employment to population ratio, ages 15-24, female (%) (national estimate)".
_QUALIFIER = re.compile(r"\s*\((?:national estimate|modeled ILO estimate)\)\s*$", re.IGNORECASE)


def _units_from_name(name: str) -> str:
    """World Bank listings leave ``unit`` empty and put the unit in the name's last brackets,
    but for a qualifier of how the figure was made, which the unit's brackets precede."""
    m = re.search(r"\(([^()]*)\)\s*$", _QUALIFIER.sub("", name))
    return m.group(1) if m else "as the indicator's name says"


def write(doc: Mapping[str, Any], path: Path) -> None:
    path.write_text(dumps(doc), encoding="utf-8")


def provenance_from_readme(folder: Path) -> dict[str, str]:
    """``- FILE: how it was obtained`` lines of the folder's README.md, by file name."""
    out: dict[str, str] = {}
    readme = folder / "README.md"
    if not readme.exists():
        return out
    current = None
    for line in readme.read_text(encoding="utf-8").splitlines():
        m = re.match(r"- ([^:\s]+): (.*)", line)
        if m:
            current = m.group(1)
            out[current] = m.group(2).strip()
        elif current and line.startswith("  "):
            out[current] += " " + line.strip()
        else:
            current = None
    return out


def iter_ids(doc: Mapping[str, Any]) -> Iterable[str]:
    return (w["id"] for w in doc["widgets"])
