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


def test_every_source_setting_is_listed_by_sis_settings_and_the_scheme_is_documented():
    """A source's settings are declared by its adapter and listed by `sis settings` from the
    code; docs/settings.md documents the scheme every source shares (a new panel adds no row)."""
    from coordinator.core.settings import settings_table
    from coordinator.sources.registry import load_adapters, source_settings_rows
    listed = {env for env, _, _ in settings_table(source_settings_rows())}
    for name, cls in load_adapters().items():
        assert f"SIS_SOURCES__{name.upper()}__BASE_URL" in listed
        for opt in cls.options:
            assert f"SIS_SOURCES__{name.upper()}__{opt.upper()}" in listed
        if cls.needs_key or cls.takes_key:      # a key it sends where set is a setting like any other
            assert f"SIS_SOURCES__{name.upper()}__API_KEY" in listed
    text = (ROOT / "docs" / "settings.md").read_text()
    for key in ("BASE_URL", "TIMEOUT_S", "API_KEY", "API_KEY_FILE", "SIS_SOURCES__<NAME>__<KEY>"):
        assert f"`{key}`" in text, key


def test_the_docs_stand_on_their_own():
    """A clone has no steering folder: README and docs never send a reader to it."""
    for f in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = f.read_text()
        for ref in ("../shared", "shared/", "UPSTREAMS.md", "SPEC.md", "DESIGN.md"):
            assert ref not in text, f"{f.name} points to {ref}, which a clone of the repository does not have"


def test_the_settings_document_lists_every_source_as_sis_settings_does():
    """docs/settings.md's table of sources is `sis settings --markdown`'s SIS_SOURCES__ rows:
    every source's every setting, with its default (remake it so when a source is added)."""
    from coordinator.core.settings import markdown_rows
    from coordinator.sources.registry import load_adapters, source_settings_rows
    text = (ROOT / "docs" / "settings.md").read_text()
    start = "<!-- sources: made by `sis settings --markdown`, its SIS_SOURCES__ rows -->"
    assert start in text and "<!-- end of sources -->" in text
    block = text.split(start, 1)[1].split("<!-- end of sources -->", 1)[0]
    documented = [ln for ln in block.strip().splitlines() if ln.startswith("| `SIS_SOURCES__")]
    assert documented == markdown_rows(source_settings_rows()), \
        "docs/settings.md's sources differ from the code: `sis settings --markdown | grep SIS_SOURCES__` makes them"
    for name in load_adapters():
        assert f"`SIS_SOURCES__{name.upper()}__BASE_URL`" in block, name


def test_the_datasets_document_lists_every_kind_sis_datasets_kinds_lists():
    from coordinator.datasets.kinds import KINDS
    text = (ROOT / "docs" / "datasets.md").read_text()
    table = text.split("The kinds there are", 1)[1].split("\n\n", 2)[1]
    rows = {ln.split("|")[1].strip().strip("`"): ln for ln in table.splitlines() if ln.startswith("| `")}
    assert sorted(rows) == sorted(KINDS.names()), "docs/datasets.md's kinds differ from `sis datasets kinds`"
    for name, row in rows.items():
        kind = KINDS.get(name)
        assert kind.license in row, (name, kind.license)
        for suffix in kind.suffixes:
            assert suffix in row, (name, suffix)
