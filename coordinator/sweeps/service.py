"""The sweep part of one coordinator process: its database, settings, photo provider
and lease sweeper, built once at start-up and kept in ``Services.extras['sweeps']``."""
from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from coordinator.core.db import Database
from coordinator.core.settings import Settings
from coordinator.sweeps import nodes as registry
from . import leases, results
from .batching import Batcher
from .leases import Sweeper
from ..sources.panoramax import PhotoProvider

MAX_BATCH = 64      # requests per batch of claims, submissions or token lookups (``batching``)


class SerialWrites:
    """The database as the sweep part uses it. On SQLite, write transactions of this process
    take turns on an asyncio lock before ``BEGIN IMMEDIATE``: SQLite admits one writer at a
    time anyway, and leaving 32 connections to its busy handler (which sleeps and retries
    with growing pauses) cost seven times the throughput in ``bench/queue.py``. Other
    processes are still kept apart by ``BEGIN IMMEDIATE`` itself. On PostgreSQL writes run
    concurrently and rows are claimed with ``FOR UPDATE SKIP LOCKED``."""

    def __init__(self, db: Database) -> None:
        self.inner = db
        self.is_sqlite = db.is_sqlite
        self._lock = asyncio.Lock() if db.is_sqlite else None

    def read(self):
        return self.inner.read()

    def write(self):
        """A write transaction in an ORM session (``Database.write``)."""
        return self._serial(self.inner.write)

    def write_core(self):
        """A write transaction on a bare connection, for Core statements (``Database.write_core``)."""
        return self._serial(self.inner.write_core)

    @contextlib.asynccontextmanager
    async def _serial(self, begin) -> AsyncIterator[Any]:
        if self._lock is None:
            async with begin() as s:
                yield s
            return
        async with self._lock:
            async with begin() as s:
                yield s


@dataclass
class Sweeps:
    db: SerialWrites
    settings: Settings
    provider: PhotoProvider
    sweeper: Sweeper = field(init=False)
    claims: Batcher = field(init=False)     # leases.claim goes through it
    submits: Batcher = field(init=False)    # results.submit goes through it
    tokens: Batcher = field(init=False)     # nodes.registry.authenticate (heartbeat, me) goes through it
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.sweeper = Sweeper(self)
        self.claims = Batcher(lambda nodes: leases.claim_batch(self, nodes), max_batch=MAX_BATCH,
                              name="claims")
        self.submits = Batcher(lambda subs: results.submit_batch(self, subs), max_batch=MAX_BATCH,
                               key=lambda sub: sub.lease_id, name="submissions")
        self.tokens = Batcher(lambda digests: registry.nodes_by_token(self.db, digests), max_batch=MAX_BATCH,
                              name="token lookups")


def sweeps_of(services) -> Sweeps:
    return services.extras["sweeps"]


async def attach(services, *, start_background: bool) -> None:
    """Build the sweep part on the services' photo provider (in demo mode the fake one the
    services started) and start the sweeper."""
    sweeps = Sweeps(SerialWrites(services.db), services.settings, services.sources[PhotoProvider.name])
    services.extras["sweeps"] = sweeps
    services._closers.append(sweeps.sweeper.stop)
    if start_background:
        sweeps.sweeper.start()
