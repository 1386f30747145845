"""Upstream source adapters, registered by name."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Source, SourceError, SourceRead
from .gdacs import GdacsSource
from .usgs import UsgsSource

if TYPE_CHECKING:  # pragma: no cover
    from ..settings import Settings

__all__ = ["Source", "SourceError", "SourceRead", "Sources", "build_sources"]


class Sources(dict):
    """Adapters by name. ``demo`` says whether they point at the bundled samples."""

    demo: bool = False


def build_sources(settings: "Settings", *, demo_base_url: str | None = None) -> Sources:
    """Point each adapter at its configured URL, or at the in-process demo upstream."""
    t = settings.source_timeout_s
    demo = demo_base_url is not None
    gdacs = f"{demo_base_url}/gdacs" if demo else settings.gdacs_base_url
    usgs = f"{demo_base_url}/usgs" if demo else settings.usgs_base_url
    sources = Sources(
        gdacs=GdacsSource(gdacs, t, demo=demo),
        usgs=UsgsSource(usgs, t, feed=settings.usgs_feed, demo=demo),
    )
    sources.demo = demo
    return sources
