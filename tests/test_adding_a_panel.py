"""A new panel is its module and its recorded sample: written into a panel package of its
own, it is served on REST, MCP and in OpenAPI, its source is built from nested settings and
its sample is served by the demo upstream, with no other file touched. The module below is
the one docs/adding-a-panel.md walks through."""
from __future__ import annotations

import json
import sys
import textwrap

import mcp

from coordinator.catalogue import default_registry
from coordinator.core.settings import Settings
from coordinator.faces.app import make_app
from coordinator.services import create_services
from coordinator.sources.registry import load_adapters
from tests.support import Coordinator, free_port, stop_coordinator

PANEL = '''
"""Tide gauges (a test panel): station water levels inside a bbox."""
from __future__ import annotations

from typing import Any

from coordinator.core.context import ToolContext
from coordinator.core.honesty import Answer, Health
from coordinator.core.registry import Tool, bbox, tool
from coordinator.sources.base import Query, Source
from coordinator.sources.registry import register

TOOLS: list[Tool] = []


@register
class TideGauges(Source[dict]):
    name = "tide_gauges"
    license = "CC-BY-4.0"
    default_base_url = "https://tides.example.org/api"
    description = "a tide-gauge network's station readings (JSON)"

    async def fetch(self, query: Query) -> list[dict]:
        w, s, e, n = query.bbox
        doc = await self.get_json("/stations.json")
        return [{**st, "license": self.license} for st in doc["stations"]
                if w <= st["lon"] <= e and s <= st["lat"] <= n]


@tool(TOOLS, name="tide_levels", title="Tide gauge levels", routes={"earth": "/tide-levels"},
      description="Water level at each tide gauge inside a bbox, as the gauge reported it.",
      params=(bbox(max_side=2),), cache_ttl_s=300)
async def tide_levels(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    read = await ctx.services.sources["tide_gauges"].read(Query(bbox=params["bbox"]))
    return Answer({"count": len(read.records), "stations": read.records},
                  caveats=["Levels are the gauges' own; a bbox with no gauge says nothing of the water there."],
                  health=Health([read.report]))
'''

SAMPLE = {"stations": [{"id": "g1", "lon": 106.8, "lat": -6.1, "levelM": 0.42, "at": "2026-11-25T06:00:00Z"},
                       {"id": "g2", "lon": 120.0, "lat": 10.0, "levelM": 1.10, "at": "2026-11-25T06:00:00Z"}]}


async def test_a_panel_is_its_module_and_its_sample(tmp_path):
    pkg = tmp_path / "extra_panels"
    (pkg / "samples" / "tide_gauges").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "tides.py").write_text(textwrap.dedent(PANEL))
    (pkg / "samples" / "tide_gauges" / "stations.json").write_text(json.dumps(SAMPLE))
    sys.path.insert(0, str(tmp_path))
    try:
        registry = default_registry("extra_panels")
        adapters = load_adapters(("coordinator.sources", "extra_panels"))
        assert "tide_levels" in {t.name for t in registry} and "tide_gauges" in adapters
        settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path}/sis.db", demo=True, poll_interval_s=0)
        services = await create_services(settings, registry, start_background=False, adapters=adapters)
        port = free_port()
        c = Coordinator(services, f"http://127.0.0.1:{port}", make_app(services).listen(port, "127.0.0.1"))
        try:
            r = await c.get("/earth/tide-levels?bbox=106,-7,107,-6")
            body = r.json()
            assert r.status == 200 and body["count"] == 1 and body["stations"][0]["license"] == "CC-BY-4.0"
            assert body["health"]["sources"][0] == {"name": "tide_gauges", "ok": True, "license": "CC-BY-4.0",
                                                    "records": 1, "demo": True}
            assert (await c.get("/earth/tide-levels?bbox=100,-7,107,-6")).status == 400      # its declared bound
            assert "/earth/tide-levels" in (await c.get("/openapi.json")).json()["paths"]
            async with mcp.Client(c.base_url + "/mcp", mode="auto") as client:
                result = await client.call_tool("tide_levels", {"bbox": "106,-7,107,-6"})
            assert result.structured_content == body
        finally:
            await stop_coordinator(c)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.startswith("extra_panels")]:
            del sys.modules[name]
