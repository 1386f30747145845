"""docs/engine.md kept honest: every setting documented, the CLI's commands named."""
from __future__ import annotations

from pathlib import Path

from sweep_engine.cli import parser
from sweep_engine.config import SETTINGS

DOC = (Path(__file__).resolve().parents[2] / "docs" / "engine.md").read_text()


def test_every_engine_setting_is_documented():
    for name in SETTINGS:
        assert f"`SIS_ENGINE_{name.upper()}`" in DOC, f"SIS_ENGINE_{name.upper()} is not in docs/engine.md"


def test_every_cli_command_is_documented():
    commands = parser()._subparsers._group_actions[0].choices
    for name in commands:
        assert f"sis-engine {name}" in DOC, f"sis-engine {name} is not in docs/engine.md"


def test_the_docs_say_the_test_weights_are_untrained_and_the_shipped_ones_weak():
    assert "untrained" in DOC.lower() and "not meaningful" in DOC
    assert "default_weights" in DOC and "weak" in DOC
