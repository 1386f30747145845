"""Caps of the credentialed family, applied generically from parameter kinds.

- A ``bbox`` parameter: each side at most the plan's ``bboxDeg`` and, where the
  tool declares one (``Tool.bbox_ceiling_deg``: places 0.6, infrastructure 2,
  traffic-tiles 0.6), the per-endpoint ceiling, which binds every plan; the
  parameter's own bound (``Param.max_side_deg``, what the direct routes allow)
  binds too. The registry leaves the sides to this check in this family, so
  a caller over several bounds hears the tightest, once, by its name.
- A ``radius`` parameter: at most the plan's ``radiusM``.

A parameter the caller sent over a cap is refused (400 naming the cap): a
clamped bbox would answer a different question than the one asked. A
declared default over the cap is lowered to it, with a caveat, since the
caller asked for nothing in particular.

Results: a top-level list of the answer longer than the plan's ``rows`` is
cut to it, with a caveat naming the cap and the full length. Tools with
finer caps (``pointsPerLayer``, ``twinPoints``) read ``caps_for(caller)``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from coordinator.core.context import Caller
from coordinator.core.errors import BadParameter
from coordinator.core.honesty import Answer
from coordinator.core.registry import BBOX, INTEGER, NUMBER, Tool
from coordinator.core.access import plans


def caps_for(caller: Caller) -> plans.Caps:
    return plans.CAPS[caller.plan]


def endpoint_name(tool: Tool) -> str:
    return tool.endpoint


def bbox_ceiling(tool: Tool, plan: str) -> tuple[float, str]:
    """The largest bbox side this plan may ask of this tool, and which cap sets it: the
    plan's, or the endpoint's (the tool's declared ceiling, checked against the published
    limits when the registry is built, or its bbox parameter's own bound), which binds
    every plan."""
    caps = plans.CAPS[plan]
    bounds = [tool.bbox_ceiling_deg] + [p.max_side_deg for p in tool.params if p.kind == BBOX]
    ceiling = min((b for b in bounds if b is not None), default=None)
    if ceiling is not None and ceiling < caps.bbox_deg:
        return ceiling, "perEndpointBbox"
    return caps.bbox_deg, "bboxDeg"


def is_radius(name: str) -> bool:
    return name == "radius" or name.startswith("radius")


def check_params(tool: Tool, caller: Caller, params: dict[str, Any], raw: Mapping[str, Any]) -> list[str]:
    """Refuse a parameter over a cap; lower a default over one. Returns caveats to add."""
    caveats: list[str] = []
    caps = caps_for(caller)
    for p in tool.params:
        value = params.get(p.name)
        if value is None:
            continue
        sent = raw.get(p.name) not in (None, "")
        if p.kind == BBOX:
            w, s, e, n = value
            limit, cap = bbox_ceiling(tool, caller.plan)
            if max(e - w, n - s) > limit + 1e-9:
                where = (f"the {endpoint_name(tool)} ceiling, which binds every plan" if cap == "perEndpointBbox"
                         else f"the {caller.plan} plan")
                raise BadParameter(f"'{p.name}' sides must be at most {limit:g} deg ({cap} of {where})",
                                   {"parameter": p.name, "cap": cap, "limit": limit, "plan": caller.plan,
                                    "value": list(value)})
        elif p.kind in (NUMBER, INTEGER) and is_radius(p.name) and value > caps.radius_m:
            if sent:
                raise BadParameter(f"'{p.name}' must be at most {caps.radius_m} m (radiusM of the {caller.plan} plan)",
                                   {"parameter": p.name, "cap": "radiusM", "limit": caps.radius_m,
                                    "plan": caller.plan, "value": value})
            params[p.name] = caps.radius_m
            caveats.append(f"The default {p.name} of {value:g} m is over the {caller.plan} plan's radiusM cap; "
                           f"{caps.radius_m} m was used.")
    return caveats


def cap_rows(answer: Answer, caller: Caller, extra_caveats: list[str]) -> Answer:
    """A copy of ``answer`` with every top-level list cut to the plan's rows cap (the cached
    original is never changed)."""
    rows = caps_for(caller).rows
    data = answer.data
    cut: dict[str, int] = {}
    for k, v in data.items():
        if isinstance(v, list) and len(v) > rows:
            cut[k] = len(v)
    if not cut and not extra_caveats:
        return answer
    data = dict(data)
    caveats = list(answer.caveats) + list(extra_caveats)
    for k, n in cut.items():
        data[k] = data[k][:rows]
        caveats.append(f"'{k}' is cut to the first {rows} of {n} rows: the rows cap of the {caller.plan} plan.")
    return dataclasses.replace(answer, data=data, caveats=caveats, _memo={})  # a new body: encode anew
