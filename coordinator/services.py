"""Shared resources of one coordinator process, built once at start-up."""
from __future__ import annotations

import functools
import gc
import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator.core.access.policy import Access
from coordinator.core.cache import AnswerCache, make_cache
from coordinator.core.db import Database
from coordinator.core.db.migrate import prepare_database
from .hazards.history import Poller
from coordinator.core.registry import ToolRegistry
from coordinator.core.settings import Settings
from .demo.photos import DEMO_CENTRE, DEV_ENGINE_BUILD, start_demo_photos
from .demo.upstream import start_demo_upstream
from .features.demo import load_demo_map
from .sites.demo import load_demo_population
from .sources.panoramax import PhotoProvider
from .sources.registry import config_for
from .sources import Sources, build_sources
from .sweeps.service import attach as attach_sweeps
from .catalogue import default_registry

log = logging.getLogger("sis")


@dataclass
class Services:
    settings: Settings
    db: Database
    sources: Sources
    registry: ToolRegistry
    cache: AnswerCache
    poller: Poller
    access: Access | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    _closers: list[Any] = field(default_factory=list)

    async def close(self) -> None:
        await self.poller.stop()
        if self.access is not None:
            await self.access.close()
        for closer in reversed(self._closers):
            await closer()
        await self.cache.close()
        await self.db.close()


async def create_services(settings: Settings, registry: ToolRegistry | None = None,
                          *, start_background: bool = True, adapters: dict | None = None,
                          prepare: bool = True, upgrade: bool = True) -> Services:
    """Everything one coordinator process shares. ``registry`` and ``adapters`` default to
    the catalogue's tools and the registered sources (tests hand in others). ``prepare``
    False skips the schema step: ``sis serve --workers N`` takes it once, before forking,
    and each worker then builds its own services (pools, Redis clients, event loop) after
    the fork, since none of them may be shared across it. ``upgrade`` False: a SQLite
    database of an earlier release is refused, not migrated (``prepare_database``), for the
    tools that are not ``sis serve`` (``sis poll``)."""
    db = Database(settings.database_url)
    closers = []
    try:
        if prepare:
            await prepare_database(settings, db, upgrade=upgrade)
        demo_base = None
        if settings.demo:
            demo = await start_demo_upstream(adapters)
            demo_base = demo.base_url
            closers.append(demo.stop)
            log.info("demo mode: sources answer from bundled samples at %s", demo_base)
        sources = build_sources(settings, demo_base_url=demo_base, adapters=adapters)
        if settings.demo:
            settings = await _demo_photos(settings, sources, closers)
            settings = _demo_data_dir(settings)
            await load_demo_map(db, DEMO_CENTRE)
            await load_demo_population(db, DEMO_CENTRE, settings.data_dir)
    except BaseException:
        await db.close(after_error=True)
        raise
    services = Services(settings=settings, db=db, sources=sources,
                        registry=registry or default_registry(),
                        cache=make_cache(settings.redis_url, cache_prefix(settings), settings.cache_max_mb * 2**20),
                        poller=Poller(db, sources, settings.poll_interval_s, settings.polls_kept),
                        access=Access(settings, db), _closers=closers)
    try:
        await attach_sweeps(services, start_background=start_background)
    except BaseException:
        await services.close()
        raise
    if start_background:
        services.poller.start()
        services.access.pruner.start()
    _freeze_startup_objects()
    return services


def cache_prefix(settings: Settings) -> str:
    """The answer cache's prefix in a shared Redis. A --demo coordinator's answers are of its own
    data: under the live prefix, a live coordinator served the demo's sample events as its own, and
    a demo one live places with the demo's caveat. And the answers of one release of this code
    (``code_tag``) are apart from another's: after an upgrade the new code served what the old had
    cached, in the old answers' shape (an audit saw the demo's caveat in a live answer that way),
    and in a rolling upgrade each release keeps to its own."""
    return settings.rate_limit_prefix + (":demo" if settings.demo else "") + ":" + code_tag()


@functools.cache
def code_tag(root: Path = Path(__file__).resolve().parent) -> str:
    """12 hex digits of sha256 over the coordinator's files (path and bytes, in path order), as
    the engine's build is hashed: what writes the answers, its data files with it (the widget
    catalogue, the recorded samples). Some 250 files, 4 MB, read once (about 10 ms)."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def _demo_data_dir(settings: Settings) -> Settings:
    """Demo mode keeps its loaded files in a folder of its own database's, apart from the
    data an operator loads. (Before migration 0018 a version's files lived under its id
    alone, and two demo databases, a test's and the last run's, numbered their versions
    alike; a demo database loaded then still finds its grid here.)"""
    tag = hashlib.sha256(settings.database_url.encode()).hexdigest()[:12]
    return settings.model_copy(update={"data_dir": str(Path(settings.data_dir) / f"demo-{tag}")})


async def _demo_photos(settings: Settings, sources: Sources, closers: list) -> Settings:
    """Demo mode's street photos: a fake provider on loopback (generated scenes around
    Bandung) in place of the real one, and the development engine build accepted from
    nodes unless builds are configured."""
    fake = await start_demo_photos(settings.port)    # the port after the coordinator's: job URLs outlive a restart
    closers.append(fake.stop)
    sources[PhotoProvider.name] = PhotoProvider(config_for(PhotoProvider, settings, base_url=fake.api_url),
                                                demo=True)
    if not settings.engine_builds:
        settings = settings.model_copy(update={"engine_builds": DEV_ENGINE_BUILD})
    return settings


_frozen = False


def _freeze_startup_objects() -> None:
    """Take what start-up made (modules, classes, compiled statements: some 120,000 objects)
    out of the cyclic garbage collector's view, once per process. They live as long as the
    process, yet every full collection walked them all: one came every thousand or so
    sweep jobs and held the event loop, every request with it, for 50-150 ms
    (``bench/queue.py``). Garbage is collected first, so only live objects are frozen.
    ``sis serve`` freezes again once its app is built and makes young collections rarer
    (``cli.settle_gc``)."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.collect()
        gc.freeze()
