"""docs/review.md and docs/seen-layer.md are kept honest: every review route, seen-layer
tool route and setting they should name is named."""
from __future__ import annotations

from pathlib import Path

from coordinator.faces.review_api import REVIEW_PATHS
from coordinator.core.settings import Settings
from coordinator.seen.tools import TOOLS

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_the_review_document_names_every_review_route_and_the_cli():
    doc = (DOCS / "review.md").read_text()
    for path in REVIEW_PATHS:
        assert path in doc, path
    for command in ("sis reviewers create", "sis reviewers list", "sis reviewers revoke"):
        assert command in doc
    assert "Leaflet 1.9.4" in doc and "BSD-2-Clause" in doc


def test_the_seen_layer_document_names_every_tool_route_bound_and_setting():
    doc = (DOCS / "seen-layer.md").read_text()
    for tool in TOOLS:
        assert f"`{tool.name}`" in doc, tool.name
        for family, path in tool.routes.items():
            prefix = {"earth": "/earth", "public": "/public/v1/:cred"}[family]
            assert prefix + path in doc, (tool.name, family)
        for p in tool.params:
            if p.minimum is not None and p.name != "lat" and p.name != "lon":
                assert f"{p.name}` {p.minimum:g}-{p.maximum:g} m, default {p.default:g}" in doc, p.name
    assert "seen_max_facts" in Settings.model_fields and "SIS_SEEN_MAX_FACTS" in doc


def test_the_vendored_map_library_is_the_pinned_version_with_its_license():
    import json
    static = Path(__file__).resolve().parents[1] / "coordinator" / "static" / "review"
    pinned = json.loads((static / "package.json").read_text())["dependencies"]["leaflet"]
    locked = json.loads((static / "package-lock.json").read_text())["packages"]["node_modules/leaflet"]
    assert locked["version"] == pinned and locked["license"] == "BSD-2-Clause"
    assert f"Leaflet {pinned}" in (static / "vendor" / "leaflet" / "leaflet.js").read_text()[:200]
    assert "BSD 2-Clause" in (static / "vendor" / "leaflet" / "LICENSE").read_text()
