"""The ``widget`` tool (``GET /earth/w/{id}``) and the manifest (``GET /earth/widgets.json``).

One declaration serves every widget of the catalogue: ``WidgetTool`` validates a request by
the widget's own record (its parameters, types and bounds, in the registry's ``Param`` terms,
so the error shape and messages are every tool's), answers 404 for an id the catalogue does
not hold, and publishes the union of the widgets' parameters so that MCP clients can pass
them (its ``id`` lists every widget). Declared tools' routes are matched before the widget
pattern (``faces/rest.py`` orders literal routes first), so ``/earth/w/twin_earth`` is the
twin's, and no widget id may be a declared tool's name. The ``id`` schema is a pattern (the
ids' prefixes), not the 1679 ids (36 KB of an MCP client's tool list); an id the catalogue
does not hold is 404 naming the closest ids (``details.didYouMean``).

The manifest is the full set on REST (the contract's "Full widget set with parameters") and a
page on MCP: ``limit``/``offset`` page it, ``fields=compact`` keeps id, title, category and
source, and MCP's defaults (``Param.mcp_default``) are a page of 50 compact rows, since an
agent reads a tool result whole (the full set is 1.3 MB, some 330k tokens).

Each read goes through the pipeline's cache with its adapter's own lifetime (``cache_ttl_s``
of the adapter: FRED 1 h, World Bank 1 day, CoinGecko 1 min, ...), keyed by widget and
parameters; a degraded read is never cached.
"""
from __future__ import annotations

import dataclasses
import datetime
import difflib
from collections import Counter
from typing import Any, Mapping

from coordinator.core.context import ToolContext
from coordinator.core.errors import BadParameter, NotFound
from coordinator.core.honesty import Answer, Health, SourceReport
from coordinator.core.pipeline import run_cached
from coordinator.core.registry import INTEGER, STRING, Param, Tool
from coordinator.sources.base import Query
from coordinator.twin.feeds import read_feed

from .catalogue import CATEGORY_COUNTS, Catalogue, Widget, load

TOOLS: list[Tool] = []
FIELDS = ("compact", "full")
COMPACT = ("id", "title", "category", "source")     # a widget's compact row
MAX_PAGE = 2000                                       # a page may hold every widget (1679)
FEED_TTL_S = 300.0        # widgets over feeds this service already reads (their adapters declare no TTL)
# Which upstream ids each adapter of this package takes, in order (Query.ids).
QUERY_IDS = {"fred": ("seriesId",), "worldbank": ("indicator",), "coingecko": ("coin",), "swpc": ("product",),
             "cftc": ("dataset", "contract")}
UNKNOWN_CAVEAT = "A value that is null has confidence unknown: the upstream had none. It is not zero."


def catalogue() -> Catalogue:
    return load()


def union_params(cat: Catalogue) -> tuple[Param, ...]:
    """Every widget parameter once, with the widest bounds any widget gives it: what the one
    tool publishes. Each widget's own record narrows it when a request is validated."""
    merged: dict[str, Param] = {}
    for w in cat.widgets.values():
        for p in w.params:
            q = merged.get(p.name)
            if q is None:
                merged[p.name] = dataclasses.replace(p, required=False, default=None, description=(
                    p.description + " (which widgets take it, and its bounds there: /earth/widgets.json)"))
                continue
            lo = None if q.minimum is None or p.minimum is None else min(q.minimum, p.minimum)
            hi = None if q.maximum is None or p.maximum is None else max(q.maximum, p.maximum)
            enum = tuple(dict.fromkeys((*q.enum, *p.enum))) if q.enum and p.enum else None
            merged[p.name] = dataclasses.replace(q, minimum=lo, maximum=hi, enum=enum,
                                                 pattern=q.pattern if q.pattern == p.pattern else None)
    return tuple(merged.values())


@dataclasses.dataclass(frozen=True)
class WidgetTool(Tool):
    """A tool whose parameters are its widget's: validation reads the widget's record."""

    def validate(self, raw: Mapping[str, Any], bbox_sides: bool = True) -> dict[str, Any]:
        wid = raw.get("id")
        if wid is None or wid == "":
            raise BadParameter("'id' is required", {"parameter": "id"})
        if not isinstance(wid, str):
            raise BadParameter("'id' must be text", {"parameter": "id"})
        cat = catalogue()
        w = cat.widgets.get(wid)
        if w is None:
            close = did_you_mean(cat, wid[:100])
            raise NotFound(f"no widget with id '{wid[:100]}'" + (f"; did you mean {', '.join(close)}?" if close else
                                                                  "; widget_manifest (q, category) finds ids"),
                           {"id": wid[:100], "widgets": "/earth/widgets.json", "didYouMean": close})
        own = Tool(f"widget {wid}", "", "", self.handler, params=w.params)
        params = Tool.validate(own, {k: v for k, v in raw.items() if k != "id"}, bbox_sides)
        for name in ("start", "end"):      # the pattern says YYYY-MM-DD; the calendar says whether it exists
            if params.get(name) is not None:
                try:
                    datetime.date.fromisoformat(params[name])
                except ValueError:
                    raise BadParameter(f"'{name}' must be a date of the calendar, YYYY-MM-DD",
                                       {"parameter": name, "value": params[name]}) from None
        for lo, hi in (("from_year", "to_year"), ("start", "end")):
            if params.get(lo) is not None and params.get(hi) is not None and params[lo] > params[hi]:
                raise BadParameter(f"'{lo}' must not be after '{hi}'", {"parameter": lo, "value": params[lo]})
        return {"id": wid, **params}


def did_you_mean(cat: Catalogue, wid: str, n: int = 5) -> list[str]:
    """Up to ``n`` ids of the catalogue closest to ``wid`` (difflib's ratio over 0.7, case ignored):
    an agent that mistyped an id corrects its call from the refusal. difflib over all 1679 ids
    took 4-8 ms a refusal, which is answered before the rate limit counts the request (its
    parameters are checked first): it is asked only of the ``SHORTLIST`` ids sharing most
    three-letter pieces with ``wid`` (those in more than ``COMMON`` ids left out): about 0.5 ms
    at the median against 5 ms, the same first suggestion for 203 of 204 mistyped ids."""
    asked = wid.lower()
    index = _trigram_index(cat)
    shared: Counter[str] = Counter()
    for gram in _trigrams(asked):
        shared.update(index.get(gram, ()))
    shortlist = [i for i, _ in shared.most_common(SHORTLIST)]
    return difflib.get_close_matches(asked, shortlist, n=n, cutoff=0.7)


SHORTLIST, COMMON = 15, 150


def _trigrams(text: str) -> set[str]:
    return {text[i:i + 3] for i in range(len(text) - 2)}


_INDEX: tuple[Catalogue, dict[str, tuple[str, ...]]] | None = None


def _trigram_index(cat: Catalogue) -> dict[str, tuple[str, ...]]:
    """Each three-letter piece of the ids, and the ids holding it: built once per catalogue."""
    global _INDEX
    if _INDEX is None or _INDEX[0] is not cat:
        index: dict[str, list[str]] = {}
        for i in cat.widgets:
            for gram in _trigrams(i):
                index.setdefault(gram, []).append(i)
        # A piece in more than COMMON ids ("wb-", ".cd") tells them apart from little and costs most.
        _INDEX = (cat, {g: tuple(ids) for g, ids in index.items() if len(ids) <= COMMON})
    return _INDEX[1]


def id_pattern(cat: Catalogue) -> str:
    """What every id of the catalogue matches: one of its prefixes, a hyphen, lower-case words."""
    prefixes = sorted({i.split("-", 1)[0] for i in cat.widgets})
    pattern = f"(?:{'|'.join(prefixes)})-[a-z0-9][a-z0-9._-]*"
    import re
    bad = [i for i in cat.widgets if not re.fullmatch(pattern, i)]
    if bad:
        raise ValueError(f"widget ids outside the published id pattern {pattern}: {bad[:5]}")
    return pattern


def widget_summary(w: Widget) -> dict[str, Any]:
    return {"id": w.id, "title": w.title, "category": w.category, "source": w.source,
            "upstreamIds": dict(w.upstream_ids), "units": w.units, "license": w.license, "cadence": w.cadence,
            "confirmed": w.confirmed, "listedBy": w.listed_by}


# FRED's transformations (its `units` parameter), as FRED's API documentation names them.
FRED_TRANSFORMS = {"chg": "change", "ch1": "change from a year ago", "pch": "percent change",
                   "pc1": "percent change from a year ago", "pca": "compounded annual rate of change",
                   "cch": "continuously compounded rate of change",
                   "cca": "continuously compounded annual rate of change", "log": "natural log"}

# Feeds the twin reads whole (no ids, no point): a widget over one reads it as the twin does,
# through the twin's cache (one upstream read per feed lifetime, whatever the widget's limit)
# and its wait after a failed read. Read apart, each limit asked was one more upstream call,
# and 15 widget requests spent Launch Library's hour of calls, the twin's launches layer with them.
TWIN_FEEDS = frozenset({"eonet", "gdelt", "launch_library", "rainviewer", "waqi_map", "wheretheiss"})


def query_for(w: Widget, params: dict[str, Any]) -> Query:
    own = {k: v for k, v in params.items() if k != "id"}
    keys = QUERY_IDS.get(w.source)
    if keys is not None:
        return Query(ids=tuple(w.upstream_ids[k] for k in keys), limit=own.get("limit"), params=own)
    if "lat" in own and "lon" in own:
        return Query(point=(own["lat"], own["lon"]), params={**own, "_upstream": dict(w.upstream_ids)})
    return Query(limit=own.get("limit"))


def plain(record: Any, license: str) -> dict[str, Any]:
    """A feed's record as JSON: dataclasses (hazard events) with camelCase names; every record
    with its license."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        out = {_camel(k): v for k, v in dataclasses.asdict(record).items() if v not in (None, [], {})}
    else:
        out = dict(record)
    out.setdefault("license", license)
    return out


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(r.title() for r in rest)


async def read_widget(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    w = catalogue().widgets[params["id"]]
    source = ctx.services.sources.get(w.source)
    caveats = []
    if not w.confirmed:
        caveats.append(f"Unconfirmed: this widget's upstream ids ({', '.join(w.upstream_ids.values())}) were not "
                       f"found in an upstream's own listing ({w.listed_by}); if the upstream does not know them "
                       "the answer is degraded, not empty.")
    if source is None:
        report = SourceReport(w.source, w.license, ok=False, error="this coordinator has no such source configured")
        return Answer({"widget": widget_summary(w), "count": None, "data": []}, caveats=caveats,
                      health=Health([report]))
    if w.source in TWIN_FEEDS:
        feed = await read_feed(ctx.services, w.source)
        report = feed.report or SourceReport(w.source, w.license, ok=False, error=feed.unavailable)
        read_records = feed.records
    else:
        read = await source.read(query_for(w, params))
        report, read_records = read.report, read.records
    records = [plain(r, w.license) for r in read_records]
    limit = params.get("limit")
    if w.source not in QUERY_IDS and isinstance(limit, int):
        records = records[:limit]
    if getattr(source, "caveat", None):
        caveats.append(source.caveat)
    if w.source == "fred":
        caveats.append("FRED republishes series of many owners; rights vary by series (see its notes on FRED).")
        transform = params.get("units")
        if transform and transform != "lin":     # the widget's units are the series' own, not these values'
            caveats.append(f"Values are FRED's '{transform}' transformation of the series "
                           f"({FRED_TRANSFORMS.get(transform, transform)}), not in the series' own units.")
    caveats.append(UNKNOWN_CAVEAT)
    # A source that did not answer has an unknown count (null), not zero: 0 would say it has none.
    return Answer({"widget": widget_summary(w), "params": {k: v for k, v in params.items() if k != "id"},
                   "count": len(records) if report.ok else None, "data": records}, caveats=caveats,
                  health=Health([report]))


def adapter_ttl(source: str) -> float:
    from coordinator.sources.registry import load_adapters

    cls = load_adapters().get(source)
    return float(getattr(cls, "cache_ttl_s", FEED_TTL_S) or FEED_TTL_S)


_PER_ADAPTER: dict[str, Tool] = {}


def per_adapter(source: str) -> Tool:
    """The pipeline's view of one adapter's reads: its own cache name and lifetime."""
    t = _PER_ADAPTER.get(source)
    if t is None:
        t = _PER_ADAPTER[source] = Tool(f"widget:{source}", "", "", read_widget, cache_ttl_s=adapter_ttl(source))
    return t


async def widget(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    w = catalogue().widgets[params["id"]]
    return await run_cached(ctx.services, per_adapter(w.source), ctx, params)


_COUNT = {"type": "integer", "minimum": 0}
# What every manifest answer holds (REST's whole set, a page, compact or full rows): served answers
# are checked against it in the tests, as an MCP client checks structuredContent against outputSchema.
MANIFEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["caveats", "count", "categories", "lists", "builtAt", "widgets"],
    "properties": {
        "caveats": {"type": "array", "items": {"type": "string"}},
        "count": {**_COUNT, "description": "Widgets in this answer"},
        "total": {**_COUNT, "description": "Widgets matching category and q (a page's answer only)"},
        "offset": {**_COUNT, "description": "Widgets skipped before this page (a page's answer only)"},
        "limit": {"type": ["integer", "null"], "description": "The page size asked (null: no limit)"},
        "nextOffset": {"type": ["integer", "null"],
                       "description": "The offset of the next page; null when this page is the last"},
        "fields": {"type": "string", "enum": list(FIELDS)},
        "categories": {"type": "object", "additionalProperties": _COUNT},
        "lists": {"type": "object"},
        "builtAt": {"type": ["string", "null"]},
        "widgets": {"type": "array", "items": {
            "type": "object", "required": list(COMPACT),
            "properties": {"id": {"type": "string"}, "title": {"type": "string"}, "category": {"type": "string"},
                           "source": {"type": "string"}, "upstreamIds": {"type": "object"},
                           "params": {"type": "array", "items": {"type": "object"}},
                           "units": {"type": ["string", "null"]}, "license": {"type": ["string", "null"]},
                           "cadence": {"type": ["string", "null"]}, "confirmed": {"type": "boolean"},
                           "listedBy": {"type": ["string", "null"]}}}},
    },
}


def _declare() -> None:
    cat = catalogue()
    # A pattern, not every id: the 1679 ids were 36 KB of an MCP client's 65 KB tool list, read
    # into an agent's context before its first call. An unknown id's 404 names the closest ones.
    id_param = Param("id", STRING, "Widget id, e.g. wb-ny.gdp.mktp.cd, fred-unrate, cg-bitcoin: widget_manifest "
                     "(category, q) finds ids; an unknown id is refused naming the closest (didYouMean)",
                     required=True, location="path", pattern=id_pattern(cat), max_length=100)
    TOOLS.append(WidgetTool(
        name="widget", title="Widget data", handler=widget, routes={"earth": "/w/{id}"},
        description=(f"One data widget of the catalogue ({len(cat.widgets)} widgets: macro, global, crypto, equities, "
                     "globe, positioning, climate, social, space, signals, perception, weather, geospatial, news, "
                     "earth), read from its upstream. Each widget declares its source (its provenance), its "
                     "upstream ids and its own parameters (a subset of this schema's): widget_manifest with "
                     "q=<id> and fields=full says which, and /earth/widgets.json lists them all."),
        params=(id_param, *union_params(cat)), statuses=(404,), tags=("widgets",)))
    TOOLS.append(Tool(
        name="widget_manifest", title="Widget manifest", handler=manifest, routes={"earth": "/widgets.json"},
        description=(f"The widgets of the catalogue ({len(cat.widgets)}), a page at a time, filtered by category "
                     "and by words of their id or title (q). limit and offset choose the page; the answer's total "
                     "says how many match and nextOffset where the next page starts (null: none left). "
                     "fields=compact gives each widget's id, title, category and source; fields=full its whole "
                     "record: source (provenance), upstream ids, parameters (types and bounds), units, license, "
                     "cadence and whether its ids were confirmed. Defaults: on MCP a page of 50 compact rows; on "
                     "REST (/earth/widgets.json) every widget, full. The answer also counts the widgets per "
                     "category and says how each list of ids was obtained."),
        params=(Param("category", STRING, "Only the widgets of this category", enum=tuple(CATEGORY_COUNTS)),
                Param("q", STRING, "Only the widgets whose id or title holds each of these words "
                      "(case ignored), e.g. 'gdp current' or a widget's id", max_length=100),
                Param("fields", STRING, "compact: id, title, category and source of each widget; full: its whole "
                      "record", enum=FIELDS, mcp_default="compact"),
                Param("limit", INTEGER, "Widgets in this page",
                      minimum=1, maximum=MAX_PAGE, mcp_default=50),
                Param("offset", INTEGER, "Widgets skipped before this page, 0 unless given: the nextOffset "
                      "of the page before", minimum=0, maximum=MAX_PAGE)),
        output_schema=MANIFEST_SCHEMA, http_max_age_s=3600, open_world=False, tags=("widgets",)))


_MANIFESTS: dict[str | None, Answer] = {}


async def manifest(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    """The same answer object for every unpaged request of a category: its body is encoded once.
    A word search (``q``) is answered anew: a scan of 1679 titles takes about a millisecond. A page
    (``limit``, ``offset`` or ``fields`` given, as on MCP always) is cut from the same rows and
    says where it lies: ``total``, ``offset``, ``limit``, ``nextOffset``, ``fields``."""
    category, words = params.get("category"), (params.get("q") or "").lower().split()
    paged = any(params.get(k) is not None for k in ("fields", "limit", "offset"))
    answer = None if words else _MANIFESTS.get(category)
    if answer is None:
        cat = catalogue()
        rows = [w.record for w in cat.widgets.values() if (category is None or w.category == category)
                and all(x in f"{w.id} {w.title}".lower() for x in words)]
        unconfirmed = sum(1 for w in cat.widgets.values() if not w.confirmed)
        answer = Answer(
            {"count": len(rows), "categories": cat.counts(), "lists": dict(cat.lists),
             "builtAt": cat.meta.get("builtAt"), "widgets": rows},
            caveats=[f"{unconfirmed} of {len(cat.widgets)} widgets have upstream ids that no upstream listing "
                     "confirmed (confirmed: false); their answers say so.",
                     "A widget's source is its provenance; its license is the upstream's, per record."])
        if not words:
            _MANIFESTS[category] = answer
    return page(answer, params) if paged else answer


def page(whole: Answer, params: dict[str, Any]) -> Answer:
    rows = whole.data["widgets"]
    offset, limit, fields = params.get("offset") or 0, params.get("limit"), params.get("fields") or "full"
    cut = rows[offset:] if limit is None else rows[offset:offset + limit]
    if fields == "compact":
        cut = [{k: r[k] for k in COMPACT} for r in cut]
    end = offset + len(cut)
    after = end if end < len(rows) else None
    caveats = list(whole.caveats)
    if after is not None:
        caveats.insert(0, f"This page holds widgets {offset + 1} to {end} of {len(rows)}: ask again with "
                          f"offset={after} for the next, or narrow by category or q.")
    elif offset >= len(rows) and rows:
        caveats.insert(0, f"No widgets from offset {offset}: {len(rows)} match.")
    if fields == "compact":
        caveats.insert(0, "Compact rows: fields=full (with q=<id> for one widget) gives each widget's parameters, "
                          "units, license, cadence and whether its ids were confirmed.")
    return Answer({"count": len(cut), "total": len(rows), "offset": offset, "limit": limit, "nextOffset": after,
                   "fields": fields, "categories": whole.data["categories"], "lists": whole.data["lists"],
                   "builtAt": whole.data["builtAt"], "widgets": cut}, caveats=caveats)


_declare()
