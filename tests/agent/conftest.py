"""Fixtures of the agent tests: the fake street-photo provider and a real coordinator
with its sweep queue, on loopback."""
from __future__ import annotations

from typing import AsyncIterator

import pytest

from coordinator.demo.photos import FakePhotoProvider
from tests.support import Coordinator

from .support import start_photos, start_sweep_coordinator, stop_sweep_coordinator


@pytest.fixture
async def photos() -> AsyncIterator[FakePhotoProvider]:
    fake = await start_photos()
    yield fake
    await fake.stop()


@pytest.fixture
async def coord(sqlite_url, photos) -> AsyncIterator[Coordinator]:
    c = await start_sweep_coordinator(sqlite_url, photos)
    yield c
    await stop_sweep_coordinator(c)
