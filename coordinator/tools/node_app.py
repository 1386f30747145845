"""node_app: the signed download manifest of the node agent."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from coordinator.core.context import ToolContext
from coordinator.core.honesty import Answer
from ..manifests import load_published
from coordinator.core.registry import Tool, tool

TOOLS: list[Tool] = []

CAVEATS = [
    "The node agent needs an NVIDIA GPU (see each build's requirements); it runs on Windows and Linux.",
    "The sweep engine and its weights are compiled into each build: a running node never downloads or executes "
    "code. Check a download against its sha256 here, and the manifest against the published public keys "
    "(sis-node verify-manifest FILE).",
    "Contributed sweeps are validated and reviewed before they are served.",
]


@tool(TOOLS, name="node_app", title="Node app download manifest",
      description="The signed download manifest of the volunteer node agent (Windows, Linux; NVIDIA GPU): "
                  "builds with sha256 and size, engine version, weights sha256, signatures.",
      routes={"earth": "/node-app"}, http_max_age_s=300, tags=("sweeps",))
async def node_app(ctx: ToolContext, params: dict[str, Any]) -> Answer:
    folder = Path(ctx.services.settings.manifests_dir)
    good, refused = load_published(folder)
    caveats = list(CAVEATS)
    if refused:
        caveats.append(f"{len(refused)} manifest file(s) failed verification and are not served.")
    if not good:
        caveats.insert(0, "No signed node-app build has been published on this coordinator yet: there is "
                          "nothing to download.")
        return Answer({"published": False, "manifest": None}, caveats=caveats)
    newest = good[0]
    s = newest.verified.signed
    return Answer({
        "published": True,
        "version": s["version"],
        "expires": s["expires"],
        "engine": s.get("engine"),
        "weights": s.get("weights"),
        "builds": s.get("builds", []),
        "signedBy": sorted(newest.verified.signers),
        "manifest": newest.envelope,
    }, caveats=caveats)
