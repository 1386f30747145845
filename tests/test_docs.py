"""Documentation that tests keep honest."""
from __future__ import annotations

from pathlib import Path

from coordinator.core.settings import Settings
from coordinator.catalogue import default_registry

ROOT = Path(__file__).resolve().parents[1]


def test_every_setting_is_documented():
    text = (ROOT / "docs" / "settings.md").read_text()
    for name in Settings.model_fields:
        assert f"`SIS_{name.upper()}`" in text, f"SIS_{name.upper()} is not in docs/settings.md"


def test_every_direct_route_is_documented():
    text = (ROOT / "docs" / "api.md").read_text() + "".join(
        p.read_text() for p in (ROOT / "docs").glob("*.md"))
    for t in default_registry():
        if "earth" in t.routes:
            assert f"/earth{t.routes['earth']}" in text, f"/earth{t.routes['earth']} is not documented"


def test_readme_leads_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert text.index("make run") < text.index("make test") < 1500


def test_every_source_setting_is_documented():
    from coordinator.sources.registry import source_settings_rows
    text = (ROOT / "docs" / "settings.md").read_text()
    for env, _default, _help in source_settings_rows():
        if not env.endswith("__TIMEOUT_S") or "PANORAMAX" in env:   # every source takes TIMEOUT_S: said once
            assert f"`{env}`" in text, f"{env} is not in docs/settings.md"
