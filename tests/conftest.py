"""Shared fixtures: real databases (SQLite, and PostgreSQL where
SIS_TEST_DATABASE_URL names one), the fake upstream, and a real coordinator
on a loopback port."""
from __future__ import annotations

import asyncio
import os
from typing import AsyncIterator

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from coordinator.core.db.scratch import create_scratch_database, drop_scratch_database
from coordinator.demo.upstream import FakeUpstream
from tests.support import Coordinator, make_settings, start_coordinator, stop_coordinator

PG_URL = os.environ.get("SIS_TEST_DATABASE_URL", "")


@pytest.fixture(scope="session", autouse=True)
def data_dir(tmp_path_factory) -> str:
    """Loaded files (grids, demo folders) go to a folder of this test session's, not the
    checkout's var/data: a test's --demo coordinator on a scratch database made a
    ``var/data/demo-<hash>`` folder there on every run, and nothing removed it. An
    environment variable, so coordinators the tests start as processes use it too."""
    folder = str(tmp_path_factory.mktemp("data"))
    before = os.environ.get("SIS_DATA_DIR")
    os.environ["SIS_DATA_DIR"] = folder
    yield folder
    if before is None:
        os.environ.pop("SIS_DATA_DIR", None)
    else:
        os.environ["SIS_DATA_DIR"] = before


# ---- databases -------------------------------------------------------------

@pytest.fixture(scope="session")
def pg_database() -> str | None:
    """A database of this test session's own on the PostgreSQL server (dropped at the end),
    so that concurrent test runs on one server do not step on each other."""
    if not PG_URL:
        yield None
        return
    url = asyncio.run(create_scratch_database(PG_URL, "sis_test"))
    yield url
    asyncio.run(drop_scratch_database(url))


async def reset_postgres(url: str) -> None:
    eng = create_async_engine(url, isolation_level="AUTOCOMMIT")
    async with eng.connect() as c:
        await c.execute(text("DROP SCHEMA public CASCADE"))
        await c.execute(text("CREATE SCHEMA public"))
    await eng.dispose()


async def fresh_postgres(url: str) -> str:
    """The PostgreSQL database at ``url`` emptied and migrated to the newest schema."""
    await reset_postgres(url)
    from coordinator.core.db import migrate
    eng = create_async_engine(url)
    await migrate.upgrade_async(eng, url)
    await eng.dispose()
    return url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def db_url(request, tmp_path, pg_database) -> str:
    """Each database backend in turn: a fresh SQLite file, then a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/sis.db"
    if not pg_database:
        pytest.skip("PostgreSQL suite: set SIS_TEST_DATABASE_URL")
    return await fresh_postgres(pg_database)


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path}/sis.db"


# ---- upstreams and the coordinator -----------------------------------------

@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    fake = await FakeUpstream().load_recorded().start()
    yield fake
    await fake.stop()


@pytest.fixture
async def coordinator(sqlite_url, upstream) -> AsyncIterator[Coordinator]:
    """A real coordinator on loopback, SQLite, sources pointed at the fake upstream."""
    c = await start_coordinator(make_settings(sqlite_url, upstream))
    yield c
    await stop_coordinator(c)


@pytest.fixture
async def coordinator_db(db_url, upstream) -> AsyncIterator[Coordinator]:
    """The same, once per database backend."""
    c = await start_coordinator(make_settings(db_url, upstream))
    yield c
    await stop_coordinator(c)
