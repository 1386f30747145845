"""One declaration per tool.

A tool is a plain async function ``(ctx, params) -> Answer`` declared once with
its parameters (types, bounds, defaults), scopes, cache policy and the route it
takes in each family. The REST routes of every family, the OpenAPI document and
the MCP tool list are generated from these declarations, and parameters are
validated here, once, with the one error shape.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable, Iterable, Mapping

from coordinator.core.access import plans
from coordinator.core.context import ToolContext
from coordinator.core.errors import BadParameter
from coordinator.core.families import FAMILIES as FAMILY_TABLE, LEGACY_ABSENT_TOOLS, LEGACY_PATHS, NAMES as FAMILIES
from coordinator.core.honesty import Answer

__all__ = ["FAMILIES", "LEGACY_ABSENT_TOOLS", "LEGACY_PATHS", "Param", "Tool", "ToolRegistry", "tool"]

# How a cold computation is met (DESIGN.md §11): ``wait`` up to the cold bound, then answer
# degraded while the computation goes on; ``accepted``: 202 with Retry-After at once, and the
# same request answers 200 once the computation is done.
COLD_WAIT, COLD_ACCEPTED = "wait", "accepted"

NUMBER, INTEGER, STRING, BBOX, LONLAT_LIST = "number", "integer", "string", "bbox", "lonlat_list"
_NUM = r"\s*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*"
BBOX_PATTERN = f"^{_NUM},{_NUM},{_NUM},{_NUM}$"     # what parse_bbox reads, published in the schemas
BOOLEAN = "boolean"
_TRUTH = {"true": True, "1": True, "false": False, "0": False}


@dataclass(frozen=True)
class Param:
    """A declared parameter. Bounds are inclusive and named in the error message."""

    name: str
    kind: str
    description: str
    required: bool = False
    default: Any = None
    minimum: float | None = None
    maximum: float | None = None
    max_side_deg: float | None = None       # bbox: each side at most this many degrees
    enum: tuple[str, ...] | None = None
    pattern: str | None = None
    max_length: int | None = None
    min_length: int | None = None
    max_points: int | None = None           # lonlat_list
    location: str = "query"                 # "query" or "path"
    # The default on the MCP faces where it differs from the REST one (None: the same). An agent's
    # first call takes the defaults, and a tool result is read whole into its context: the widget
    # manifest answers every widget on REST (1.3 MB, the contract's "full set") and a page on MCP.
    mcp_default: Any = None

    def on_mcp(self) -> "Param":
        """This parameter as the MCP faces publish and apply it (its MCP default)."""
        return self if self.mcp_default is None else replace(self, default=self.mcp_default)

    def json_schema(self) -> dict[str, Any]:
        s: dict[str, Any]
        if self.kind in (NUMBER, INTEGER):
            s = {"type": self.kind}
            if self.minimum is not None:
                s["minimum"] = self.minimum
            if self.maximum is not None:
                s["maximum"] = self.maximum
        elif self.kind == BBOX:
            s = {"type": "string", "pattern": BBOX_PATTERN, "description": "w,s,e,n in degrees"}
        elif self.kind == LONLAT_LIST:
            s = {"type": "string", "description": "semicolon-separated lon,lat pairs"}
        elif self.kind == BOOLEAN:
            s = {"type": "boolean"}
        else:
            s = {"type": "string"}
            if self.enum:
                s["enum"] = list(self.enum)
            if self.pattern:   # matched whole (fullmatch); a JSON Schema pattern matches anywhere unless anchored
                s["pattern"] = self.pattern if self.pattern.startswith("^") and self.pattern.endswith("$") \
                    else f"^(?:{self.pattern})$"
            if self.max_length:
                s["maxLength"] = self.max_length
            if self.min_length:
                s["minLength"] = self.min_length
        if self.default is not None:
            s["default"] = self.default
        s["description"] = self.description + self.bound_text()
        return s

    @property
    def takes_empty(self) -> bool:
        """Whether empty text is a value of this parameter (free text with no pattern, enum
        or minimum length); for every other kind an empty value is refused, not defaulted."""
        return self.kind == STRING and not self.enum and not self.pattern and not self.min_length

    def bound_text(self) -> str:
        parts = []
        if self.minimum is not None and self.maximum is not None:
            parts.append(f"{_fmt(self.minimum)} to {_fmt(self.maximum)}")
        elif self.minimum is not None:
            parts.append(f"at least {_fmt(self.minimum)}")
        elif self.maximum is not None:
            parts.append(f"at most {_fmt(self.maximum)}")
        if self.max_side_deg is not None:
            parts.append(f"each side at most {_fmt(self.max_side_deg)} deg")
        if self.default is not None:
            parts.append(f"default {self.default}")
        return f" ({'; '.join(parts)})" if parts else ""

    def parse(self, raw: Any, bbox_sides: bool = True) -> Any:
        """Turn one raw value (text from a query, or JSON from MCP) into its typed form."""
        if self.kind in (NUMBER, INTEGER):
            value = _number(self, raw)
            if self.minimum is not None and value < self.minimum or \
               self.maximum is not None and value > self.maximum:
                raise BadParameter(
                    f"'{self.name}' must be between {_fmt(self.minimum)} and {_fmt(self.maximum)}"
                    if self.minimum is not None and self.maximum is not None else
                    f"'{self.name}' must be at least {_fmt(self.minimum)}" if self.minimum is not None
                    else f"'{self.name}' must be at most {_fmt(self.maximum)}",
                    {"parameter": self.name, "value": raw, "minimum": self.minimum,
                     "maximum": self.maximum})
            return value
        if self.kind == BBOX:
            return parse_bbox(self, raw, bbox_sides)
        if self.kind == LONLAT_LIST:
            return parse_lonlat_list(self, raw)
        if self.kind == BOOLEAN:
            if isinstance(raw, bool):
                return raw
            if isinstance(raw, str) and raw.lower() in _TRUTH:
                return _TRUTH[raw.lower()]
            raise BadParameter(f"'{self.name}' must be true or false", {"parameter": self.name, "value": raw})
        if not isinstance(raw, str):
            raise BadParameter(f"'{self.name}' must be text", {"parameter": self.name})
        if bad := _UNSTORABLE.search(raw):
            raise BadParameter(f"'{self.name}' holds {_unstorable_name(bad.group())} at character {bad.start() + 1}: "
                               "text here is stored and shown, and may hold no control character but tab and line "
                               "breaks", {"parameter": self.name})
        if self.max_length is not None and len(raw) > self.max_length:
            raise BadParameter(f"'{self.name}' must be at most {self.max_length} characters",
                               {"parameter": self.name, "maxLength": self.max_length})
        if self.min_length is not None and len(raw) < self.min_length:
            raise BadParameter(f"'{self.name}' must be at least {self.min_length} characters",
                               {"parameter": self.name, "minLength": self.min_length})
        if self.enum and raw not in self.enum:
            raise BadParameter(f"'{self.name}' must be one of {', '.join(self.enum)}",
                               {"parameter": self.name, "value": raw, "allowed": list(self.enum)})
        if self.pattern:
            if not re.fullmatch(self.pattern, raw):
                raise BadParameter(f"'{self.name}' does not match the pattern {self.pattern}",
                                   {"parameter": self.name, "value": raw, "pattern": self.pattern})
        return raw


# What text parameters may not hold: a NUL (PostgreSQL's text refuses it; a node's enrolment with
# one was a 500 there and stored on SQLite), a lone surrogate (encodes in no UTF-8: a 500 on
# both), other C0 controls and DEL (an escape sequence in a node's platform line printed a forged
# row on the operator's terminal). Tab, line feed and carriage return stay: reasons are prose.
_UNSTORABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


def _unstorable_name(ch: str) -> str:
    return "a lone surrogate" if "\ud800" <= ch <= "\udfff" else f"the control character U+{ord(ch):04X}"


def _fmt(x: float | None) -> str:
    if x is None:
        return ""
    return str(int(x)) if float(x).is_integer() else str(x)


# A number as text: ASCII decimal digits, an optional fraction and exponent, and the
# words of non-finite values (refused below with their own message). Python's float()
# alone would also take other scripts' digits ("１", "٣") and underscores ("1_0").
_NUMBER_TEXT = re.compile(r"\s*[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf(?:inity)?|nan)\s*",
                          re.ASCII | re.IGNORECASE)


def _to_float(raw: Any) -> float:
    """A JSON number or a number as text, as a float; ValueError for anything else. An
    integer too large for a float is infinite here, refused as not finite."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise ValueError(raw)
    if isinstance(raw, str) and not _NUMBER_TEXT.fullmatch(raw):
        raise ValueError(raw)
    try:
        return float(raw)
    except OverflowError:
        return math.inf


def same_value(text: str, value: Any) -> bool:
    """Whether a query's text and a JSON body's value say the same (``1`` and ``1.0`` do)."""
    if text == str(value) or isinstance(value, bool) and text.lower() == str(value).lower():
        return True
    try:
        return not isinstance(value, bool) and _to_float(text) == _to_float(value)
    except ValueError:
        return False


def _number(p: Param, raw: Any) -> float | int:
    try:
        value = raw if isinstance(raw, float) else _to_float(raw)
    except ValueError:
        raise BadParameter(f"'{p.name}' must be a number", {"parameter": p.name, "value": raw}) from None
    if not math.isfinite(value):
        raise BadParameter(f"'{p.name}' must be a finite number", {"parameter": p.name, "value": raw})
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    if p.kind == INTEGER:
        if float(value) != int(value):
            raise BadParameter(f"'{p.name}' must be a whole number", {"parameter": p.name, "value": raw})
        return int(value)
    return float(value)


def parse_bbox(p: Param, raw: Any, sides: bool = True) -> tuple[float, float, float, float]:
    """Text ``w,s,e,n``, as its schema says (over MCP too: an array is refused, not guessed at).
    ``sides=False`` leaves ``max_side_deg`` to the caller (the credentialed caps, which name the bound
    that binds this caller)."""
    try:
        if not isinstance(raw, str):
            raise ValueError(raw)
        w, s, e, n = (_to_float(x) for x in raw.split(","))
    except ValueError:
        raise BadParameter(f"'{p.name}' must be four numbers w,s,e,n",
                           {"parameter": p.name, "value": raw}) from None
    if not all(math.isfinite(v) for v in (w, s, e, n)):
        raise BadParameter(f"'{p.name}' must hold finite numbers", {"parameter": p.name})
    if not (-180 <= w <= 180 and -180 <= e <= 180 and -90 <= s <= 90 and -90 <= n <= 90):
        raise BadParameter(f"'{p.name}' must lie within lon -180..180 and lat -90..90",
                           {"parameter": p.name, "value": raw})
    if w > e and s < n:
        # The events' own boxes are written so (RFC 7946) where they cross 180: fed back, they met
        # "must have west < east", which reads as a box written backwards.
        raise BadParameter(f"'{p.name}' has west {_fmt(w)} > east {_fmt(e)}: write it west,south,east,north; a box "
                           f"across the antimeridian is asked for as its two sides ({_fmt(w)},{_fmt(s)},180,{_fmt(n)} "
                           f"and -180,{_fmt(s)},{_fmt(e)},{_fmt(n)})", {"parameter": p.name, "value": raw})
    if w >= e or s >= n:
        raise BadParameter(f"'{p.name}' must have west < east and south < north",
                           {"parameter": p.name, "value": raw})
    if sides and p.max_side_deg is not None and (e - w > p.max_side_deg + 1e-9 or n - s > p.max_side_deg + 1e-9):
        raise BadParameter(f"'{p.name}' sides must be at most {_fmt(p.max_side_deg)} deg",
                           {"parameter": p.name, "value": raw, "maxSideDeg": p.max_side_deg})
    return (w, s, e, n)


def parse_lonlat_list(p: Param, raw: Any) -> list[tuple[float, float]]:
    if not isinstance(raw, str) or not raw.strip():
        raise BadParameter(f"'{p.name}' must be semicolon-separated lon,lat pairs", {"parameter": p.name})
    pts = []
    for pair in raw.strip().strip(";").split(";"):
        try:
            lon, lat = (_to_float(x) for x in pair.split(","))
        except ValueError:
            raise BadParameter(f"'{p.name}' has a malformed pair '{pair}'", {"parameter": p.name}) from None
        if not (-180 <= lon <= 180 and -90 <= lat <= 90):
            raise BadParameter(f"'{p.name}' has a point outside lon -180..180, lat -90..90",
                               {"parameter": p.name, "pair": pair})
        pts.append((lon, lat))
    if p.max_points is not None and len(pts) > p.max_points:
        raise BadParameter(f"'{p.name}' must have at most {p.max_points} points",
                           {"parameter": p.name, "maxPoints": p.max_points})
    return pts


# Common parameters, declared once.
def lat(desc: str = "Latitude in degrees") -> Param:
    return Param("lat", NUMBER, desc, required=True, minimum=-90, maximum=90)


def lon(desc: str = "Longitude in degrees") -> Param:
    return Param("lon", NUMBER, desc, required=True, minimum=-180, maximum=180)


def radius(lo: float, hi: float, default: float | None = None, name: str = "radius") -> Param:
    return Param(name, NUMBER, "Radius in metres", required=default is None,
                 default=default, minimum=lo, maximum=hi)


def bbox(max_side: float | None = None, required: bool = True) -> Param:
    return Param("bbox", BBOX, "Bounding box w,s,e,n in degrees", required=required,
                 max_side_deg=max_side)


Handler = Callable[[ToolContext, dict[str, Any]], Awaitable[Answer]]


@dataclass(frozen=True)
class Tool:
    """Everything about a tool that the faces and the pipeline act on. The handler only
    computes its answer: validation, access, caps, the server cache with single flight and
    the cold behaviour are run by ``invoke.call_tool`` from these fields."""

    name: str
    title: str
    description: str
    handler: Handler
    params: tuple[Param, ...] = ()
    routes: Mapping[str, str] = field(default_factory=dict)   # family -> path under the family prefix
    method: str = "GET"
    safe: bool = True                         # a GET that changes nothing, so HEAD may answer it too (a GET
                                              # that mints something, /renew, is not: HEAD would mint unseen)
    scopes: tuple[str, ...] = ()              # scopes needed on the credentialed family
    bbox_ceiling_deg: float | None = None     # credentialed bbox ceiling that binds every plan
    cache_ttl_s: float | str = 0              # server cache of a healthy answer, in s or a setting's name; 0: none
    per_plan: bool = False                    # a cached answer that depends on the caller's plan (its rows or
                                              # bbox cap): one cache entry per plan, and the handler sees the plan
    cold: str = COLD_WAIT                     # COLD_WAIT or COLD_ACCEPTED
    cold_bound_s: float | None = None         # longest a cold computation is waited for (COLD_WAIT)
    retry_after_s: int = 5                    # Retry-After of a 202 or of an answer the cold bound cut short
    cold_fallback: Callable[[dict[str, Any]], dict[str, Any]] | None = None  # body of that answer
    http_max_age_s: int = 60                  # Cache-Control max-age for a healthy keyless answer
    output_schema: dict[str, Any] | None = None
    mcp: bool = True                          # exposed as an MCP tool
    keyless: bool = True                      # answered without a key; on the credentialed family the
                                              # anonymous credential holds its scopes (SPEC.md, Auth 4)
    tags: tuple[str, ...] = ()
    statuses: tuple[int, ...] = ()           # answers beyond the common ones, documented in OpenAPI
                                             # (410: a twin selection naming only withdrawn layers)
    ok_status: int = 200                      # the status of its answer (201: it made something)
    family_descriptions: Mapping[str, str] = field(default_factory=dict)   # family -> description there
    family_cold_bound_s: Mapping[str, float] = field(default_factory=dict)  # family -> cold bound there
    # MCP tool annotations (hints to a client, which may ask its user before a call that is not read-only).
    # None: derived. read_only: a GET that is safe (changes nothing); idempotent: read_only (a repeat
    # changes nothing more); destructive, for a tool that is not read-only: True, the protocol's default,
    # until the declaration says its writes only add or merge. open_world: the tool reads an outside
    # upstream (its answer follows the world, not only this service's own state).
    read_only: bool | None = None
    idempotent: bool | None = None
    destructive: bool | None = None
    open_world: bool = True
    # The tool's own checks of its parameters against its caller (a plan's bound on a shape), run before
    # the call is admitted: raised inside the handler, a refusal was counted against the caller's quota.
    check: Callable[[dict[str, Any], Any], None] | None = None

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(f for f in FAMILIES if f in self.routes)

    def description_for(self, family: str) -> str:
        """The description a family publishes: families may describe one tool differently
        (the legacy family describes event bboxes as upstream extents)."""
        return self.family_descriptions.get(family, self.description)

    def cold_bound_for(self, family: str) -> float | None:
        return self.family_cold_bound_s.get(family, self.cold_bound_s)

    def ttl_for(self, settings: Any) -> float:
        """The declared cache lifetime; a setting's name reads that setting (an operator may
        shorten the hazard feed's cache without touching the declaration)."""
        ttl = self.cache_ttl_s
        return float(getattr(settings, ttl) if isinstance(ttl, str) else ttl)

    @property
    def cached(self) -> bool:
        return bool(self.cache_ttl_s)

    @property
    def endpoint(self) -> str:
        """The credentialed route's name, as the limits contract names endpoints (``places``)."""
        return self.routes.get("public", "").strip("/")

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def input_schema(self, mcp: bool = False) -> dict[str, Any]:
        """The parameters' JSON Schema; ``mcp``: with the MCP defaults (``Param.mcp_default``)."""
        params = [p.on_mcp() for p in self.params] if mcp else list(self.params)
        props = {p.name: p.json_schema() for p in params}
        req = [p.name for p in params if p.required]
        s: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
        if req:
            s["required"] = req
        return s

    def mcp_defaults(self) -> dict[str, Any]:
        """The MCP defaults that differ from the REST ones: the MCP face passes them for an absent argument."""
        return {p.name: p.mcp_default for p in self.params if p.mcp_default is not None}

    def annotations(self) -> dict[str, bool]:
        """The MCP hints, as declared or derived (see the fields). ``destructiveHint`` and
        ``idempotentHint`` mean something only for a tool that is not read-only (the protocol's words),
        but both are said for every tool, so that no client falls back to a default."""
        read_only = self.method == "GET" and self.safe if self.read_only is None else self.read_only
        idempotent = read_only if self.idempotent is None else self.idempotent
        destructive = (not read_only) if self.destructive is None else self.destructive
        return {"readOnlyHint": read_only, "destructiveHint": destructive, "idempotentHint": idempotent,
                "openWorldHint": self.open_world}

    def refuse_unknown(self, raw: Mapping[str, Any]) -> None:
        """``BadParameter`` for the first argument this tool does not declare."""
        known = {p.name for p in self.params}
        unknown = sorted(k for k in raw if k not in known)
        if unknown:
            raise BadParameter(f"unknown parameter '{unknown[0]}' for {self.name}",
                               {"parameter": unknown[0], "allowed": sorted(known)})

    def validate(self, raw: Mapping[str, Any], bbox_sides: bool = True) -> dict[str, Any]:
        """Validate raw parameters (query text or MCP JSON) into typed values. ``bbox_sides=False``: a
        bbox's side bound is checked by the caller (``access.caps``, with the plan's)."""
        self.refuse_unknown(raw)
        out: dict[str, Any] = {}
        for p in self.params:
            value = raw.get(p.name)
            if value is None and p.name in raw:
                # ``{"radius": null}`` (and NaN, which JSON encoders write as null) answered the default as
                # if the parameter were left out, where its schema says it is a number.
                raise BadParameter(f"'{p.name}' is null: give a value" + ("" if p.required else
                                   ", or leave the parameter out" + (f" for its default ({p.default})"
                                                                    if p.default is not None else "")),
                                   {"parameter": p.name, "value": None})
            if value is None or value == "" and p.required:
                if p.required:
                    raise BadParameter(f"'{p.name}' is required", {"parameter": p.name})
                out[p.name] = p.default
                continue
            if value == "" and not p.takes_empty:
                # ``maxM=`` is a client's slip (a form field left blank, a variable unset), not a
                # request for the default: answering the default would hide it.
                raise BadParameter(f"'{p.name}' is empty: give a value, or leave the parameter out"
                                   + (f" for its default ({p.default})" if p.default is not None else ""),
                                   {"parameter": p.name, "value": ""})
            out[p.name] = p.parse(value, bbox_sides)
        return out


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.add(t)

    def add(self, tool: Tool) -> Tool:
        """Register a declaration, refusing one that breaks the contract's family rules or
        disagrees with the published limits, so a wrong declaration fails at start-up."""
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} declared twice")
        for problem in _problems(tool):
            raise ValueError(f"tool {tool.name!r}: {problem}")
        self._tools[tool.name] = tool
        return tool

    def __iter__(self):
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def in_family(self, family: str) -> list[Tool]:
        return [t for t in self._tools.values() if family in t.routes]


def _problems(tool: Tool) -> Iterable[str]:
    for fam in (*tool.routes, *tool.family_descriptions, *tool.family_cold_bound_s):
        if fam not in FAMILY_TABLE:
            yield f"unknown family {fam!r}"
    for fam, path in tool.routes.items():
        table = FAMILY_TABLE[fam]
        if tool.name in table.absent_tools:
            yield f"it is absent from the {fam} family"
        if table.paths is not None and path not in table.paths:
            yield f"{path!r} is not a {fam} path"
    hints = tool.annotations()
    if hints["readOnlyHint"] and not (tool.method == "GET" and tool.safe):
        yield f"it declares read_only but a {tool.method} that is not safe changes something"
    if hints["readOnlyHint"] and (hints["destructiveHint"] or not hints["idempotentHint"]):
        yield "a read-only tool is neither destructive nor other than idempotent"
    for p in tool.params:
        if p.mcp_default is not None:
            try:
                p.parse(p.mcp_default)
            except BadParameter as exc:
                yield f"the MCP default of {p.name!r} is refused by its own bounds: {exc.message}"
    if tool.cold not in (COLD_WAIT, COLD_ACCEPTED):
        yield f"cold must be {COLD_WAIT!r} or {COLD_ACCEPTED!r}"
    if tool.cold == COLD_ACCEPTED and not tool.cached:
        yield "an accepted (202) tool must declare a cache TTL: its result is fetched from the cache"
    bounded = tool.cold_bound_s is not None or bool(tool.family_cold_bound_s)
    required = set((tool.output_schema or {}).get("required", ())) - {"caveats", "health"}
    if bounded and required and tool.cold_fallback is None:
        yield "a cold bound with a tighter output schema needs a cold_fallback body for the cut-short answer"
    published = plans.ENDPOINT_BBOX_DEG.get(tool.endpoint) if "public" in tool.routes else None
    if tool.bbox_ceiling_deg != published:
        yield (f"its bbox ceiling {tool.bbox_ceiling_deg} differs from the published limits' "
               f"{published} for /{tool.endpoint} (access/plans.py ENDPOINT_BBOX_DEG)")
    if "public" in tool.routes and tool.keyless and not all(s in plans.ANON_SCOPES for s in tool.scopes):
        yield (f"it is keyless but its scopes {list(tool.scopes)} are not all anonymous scopes "
               "(access/plans.py ANON_SCOPES): declare keyless=False")


def tool(registry_list: list[Tool], **decl: Any) -> Callable[[Handler], Handler]:
    """Decorator: declare ``fn`` as a tool and append the declaration to ``registry_list``."""

    def wrap(fn: Handler) -> Handler:
        registry_list.append(Tool(handler=fn, **decl))
        return fn

    return wrap
