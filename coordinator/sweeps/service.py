"""The sweep part of one coordinator process: its database, settings, photo provider
and lease sweeper, built once at start-up and kept in ``Services.extras['sweeps']``."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..db import Database
from ..settings import Settings
from .leases import Sweeper
from .photos import PhotoProvider


@dataclass
class Sweeps:
    db: Database
    settings: Settings
    provider: PhotoProvider
    sweeper: Sweeper = field(init=False)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.sweeper = Sweeper(self)


def sweeps_of(services) -> Sweeps:
    return services.extras["sweeps"]


async def attach(services, *, start_background: bool) -> None:
    """Build the sweep part (and, in demo mode, the fake photo provider) and start the sweeper."""
    settings = services.settings
    base_url = settings.photo_provider_base_url
    if settings.demo:
        from ..demo.photos import start_demo_photos
        fake = await start_demo_photos()
        services._closers.append(fake.stop)
        base_url = fake.api_url
        if not settings.engine_builds:
            from ..demo.photos import DEV_ENGINE_BUILD
            settings = settings.model_copy(update={"engine_builds": DEV_ENGINE_BUILD})
    sweeps = Sweeps(services.db, settings, PhotoProvider(base_url, settings.photo_provider_timeout_s))
    services.extras["sweeps"] = sweeps
    services._closers.append(sweeps.sweeper.stop)
    if start_background:
        sweeps.sweeper.start()
