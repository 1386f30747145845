"""Upstream source adapters, registered by name (``registry``), each with its
recorded samples beside it (``samples/<name>/``)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Query, Source, SourceConfig, SourceError, SourceRead
from .registry import check_settings, load_adapters, make_source

if TYPE_CHECKING:  # pragma: no cover
    from coordinator.core.settings import Settings

__all__ = ["Query", "Source", "SourceConfig", "SourceError", "SourceRead", "Sources", "build_sources"]


class Sources(dict):
    """Adapters by name. ``demo`` says whether they point at the bundled samples."""

    demo: bool = False


def build_sources(settings: "Settings", *, demo_base_url: str | None = None,
                  adapters: dict[str, type[Source]] | None = None) -> Sources:
    """One adapter of every registered kind, pointed at its configured URL, or at the
    in-process demo upstream."""
    adapters = load_adapters() if adapters is None else adapters
    check_settings(settings, adapters)
    sources = Sources({name: make_source(cls, settings, demo_base_url=demo_base_url)
                       for name, cls in adapters.items()})
    sources.demo = demo_base_url is not None
    return sources
