"""Throwaway PostgreSQL databases for test runs and benchmarks.

Each run makes a database of its own on the server (so concurrent runs on one
server do not step on each other) and drops it afterwards.
"""
from __future__ import annotations

import os
import uuid

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine


async def _admin(server_url: str, sql: str) -> None:
    eng = create_async_engine(make_url(server_url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    async with eng.connect() as c:
        await c.execute(text(sql))
    await eng.dispose()


async def create_scratch_database(server_url: str, prefix: str) -> str:
    """Create ``{prefix}_{pid}_{random}`` on the server of ``server_url``; return its URL."""
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    await _admin(server_url, f'CREATE DATABASE "{name}"')
    return make_url(server_url).set(database=name).render_as_string(hide_password=False)


async def drop_scratch_database(url: str) -> None:
    name = make_url(url).database
    await _admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
