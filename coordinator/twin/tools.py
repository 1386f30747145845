"""The twin's tools: ``twin_earth`` (``/earth/w/twin_earth``, ``/legacy/w/twin_earth``,
keyless, every layer), ``twin`` (``GET /public/v1/{cred}/twin``, a layer selection within the
plan's caps and the credential's layers) and ``traffic_tiles`` (``GET /public/v1/{cred}/
traffic-tiles``, tile templates of a keyed traffic provider).

``twin_earth`` is a declared route, so it is matched before any ``/earth/w/{id}`` widget
pattern as long as the twin's capability is listed before the widgets' in the catalogue;
``tests/test_twin_tools.py`` asks the route itself and would fail otherwise. The direct family
has no plans, so ``twin_earth`` serves at the anonymous plan's caps (800 points a layer, 3000 in
all); a credentialed caller asks ``/twin`` for more.
"""
from __future__ import annotations

from typing import Any

from coordinator.core.access.caps import caps_for
from coordinator.core.access.plans import CAPS, Caps
from coordinator.core.context import Caller, ToolContext
from coordinator.core.honesty import Answer, Health
from coordinator.core.registry import INTEGER, STRING, Param, Tool, bbox, tool

from . import selection
from .assemble import Twin, build
from .traffic import tile_range

TOOLS: list[Tool] = []

DIRECT_PLAN = "anon"
CAVEATS = [
    "Each layer names its source and license, and every record carries its own license, so share-alike and "
    "permissive records stay separable.",
    "A layer with no records means its source listed none, not that none exist: absence is unknown, not zero.",
    "Positions are the upstreams' own: GDACS events at their centroid, EONET events at their latest fix, launches "
    "at their pad, countries at their label point; weather is modelled at fixed cities; news articles have no "
    "position (null geometry), only their outlet's country.",
    "Overlays are tile templates: clients fetch the tiles from each provider under its terms; nothing is rehosted.",
    "Weather is Open-Meteo's free tier (CC BY 4.0 data), which is for non-commercial use: a commercial deployment "
    "needs Open-Meteo's API plan. EONET's event extents are NASA's own 'not official' ones.",
]
LAYERS_PARAM = Param(
    "layers", STRING, "Layer ids, comma-separated (quakes,ev:wildfires,overlay:radar); '*' for every layer; "
    "left out, the defaults (quakes, disasters, cyclones). Unknown ids are answered in rejected[], known ids not "
    "served in notServed[] with the reason; naming only withdrawn layers answers 410", max_length=500)


def credential_layers(caller: Caller) -> tuple[str, ...]:
    """The credential's ``layers`` (SPEC.md, Credential object): ``*`` unless the access system
    put a narrower list on the caller. No key carries one today (``/limits`` says ``["*"]``)."""
    return tuple(caller.extra.get("layers") or (selection.ALL,))


def _caps_json(caps: Caps, plan: str) -> dict[str, Any]:
    return {"plan": plan, "pointsPerLayer": caps.points_per_layer, "twinPoints": caps.twin_points}


def _caveats(twin: Twin) -> list[str]:
    return [*twin.caveats, *CAVEATS]


@tool(TOOLS, name="twin_earth", title="Twin earth: every live layer",
      routes={"earth": "/w/twin_earth", "legacy": "/w/twin_earth"},
      description="Every live layer of the twin (data layers as GeoJSON FeatureCollections, overlays as tile "
                  "templates with attribution and license, ev:<category> layers of open natural events) and "
                  "unavailable[], naming each known layer not served and why (withdrawn, no open source, not "
                  "configured, not loaded, or its source did not answer). At the anonymous plan's caps.",
      params=(), cache_ttl_s=60, http_max_age_s=60, tags=("twin",))
async def twin_earth(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    chosen = selection.select([selection.ALL])
    caps = CAPS[DIRECT_PLAN]
    twin = await build(ctx.services, chosen.served, caps, DIRECT_PLAN)
    return Answer({"layers": twin.layers, "unavailable": chosen.not_served + twin.not_served,
                   "points": twin.points, "caps": _caps_json(caps, DIRECT_PLAN)},
                  caveats=_caveats(twin), health=twin.health)


@tool(TOOLS, name="twin", title="Twin layers by selection", routes={"public": "/twin"}, scopes=("earth.twin",),
      description="The twin layers named in 'layers' (default quakes, disasters, cyclones), limited to this "
                  "credential's layers and cut to its plan's pointsPerLayer and twinPoints. rejected[] holds "
                  "unknown ids, notServed[] known ids not served with the reason; both are always present. A "
                  "selection of withdrawn layers only answers 410.",
      params=(LAYERS_PARAM,), http_max_age_s=30, statuses=(410,), tags=("twin",))
async def twin(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    chosen = selection.select(selection.parse(params["layers"]), credential_layers(ctx.caller))
    plan = ctx.caller.plan
    caps = caps_for(ctx.caller)
    built = await build(ctx.services, chosen.served, caps, plan)
    return Answer({"layers": built.layers, "rejected": chosen.rejected,
                   "notServed": chosen.not_served + built.not_served, "points": built.points,
                   "caps": _caps_json(caps, plan)},
                  caveats=_caveats(built), health=built.health)


@tool(TOOLS, name="traffic_tiles", title="Traffic tiles", routes={"public": "/traffic-tiles"},
      scopes=("earth.traffic-tiles",), bbox_ceiling_deg=0.6,
      description="Traffic flow tile template of the configured keyed provider (TomTom raster flow v4) and the "
                  "tile columns and rows covering bbox at the zoom asked. Without a configured key: available "
                  "false, naming the setting. Tiles are fetched from the provider, never rehosted.",
      params=(bbox(), Param("zoom", INTEGER, "Zoom level of the tile range", default=12, minimum=0, maximum=22)),
      http_max_age_s=300, tags=("twin",))
async def traffic_tiles(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    read = await ctx.services.sources["tomtom_traffic"].read()
    caveats = ["Tiles come from the provider, fetched by the client with the key in the template; this service "
               "never rehosts them.",
               "The template is built from the configured key without asking the provider: a refused key shows as "
               "an error on the client's tile request."]
    if not read.report.ok:
        caveats.insert(0, f"Traffic tiles are unavailable: {read.report.error}.")
        return Answer({"available": False, "reason": read.report.error, "template": None, "tiles": None},
                      caveats=caveats, health=Health([read.report]))
    z = params["zoom"]
    rng = tile_range(params["bbox"], z)
    count = (rng["x"][1] - rng["x"][0] + 1) * (rng["y"][1] - rng["y"][0] + 1)
    return Answer({"available": True, "provider": read.report.name, "template": read.records[0],
                   "bbox": list(params["bbox"]), "tiles": {"z": z, **rng, "count": count}},
                  caveats=caveats, health=Health([read.report]))
