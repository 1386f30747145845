"""What a failing upstream or an unreachable database writes to the log: once when it starts,
a count at most once a minute, and a line when it is well again; never a line per request.

The log audit's cases: with GDACS and USGS answering malformed GeoJSON, 5 requests to
/earth/events wrote 150 lines (a traceback per source per request, and a line more); an
upstream down, a line per source per request naming no setting; each leader role of each
worker warned every 5 s while the database was down, its first lines SQLAlchemy's several
(``[SQL: ...]``, ``[parameters: ...]``); and a poll no source answered logged
``event poll 14: 0 events, 0 changes``, which reads as a quiet day."""
from __future__ import annotations

import asyncio
import logging
import os
import re
import time

import pytest
from sqlalchemy import text
from sqlalchemy.exc import InterfaceError

from coordinator.core.db.leader import Leadership
from coordinator.demo.upstream import Canned, sample
from coordinator.sources import Query, Source, SourceError
from coordinator.sources import outages
from coordinator.sources.outages import Outages
from tests.support import free_port, make_settings, start_coordinator, stop_coordinator

GDACS = "/gdacs/events/geteventlist/EVENTS4APP"
USGS = "/usgs/4.5_week.geojson"
MALFORMED = {"type": "FeatureCollection", "features": [{"properties": {}}]}     # no eventtype, no geometry


def lines(caplog, logger: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger]


def said(caplog, logger: str, words: str) -> list[str]:
    return [r.getMessage() for r in lines(caplog, logger) if words in r.getMessage()]


@pytest.fixture
def minute(monkeypatch) -> float:
    """A source's minute between counts, shortened for the test."""
    monkeypatch.setattr(outages, "SAID_EVERY_S", 1.0)
    return 1.0


# ---- 1. a failing upstream -------------------------------------------------------------------

async def test_a_malformed_upstream_is_logged_once_with_its_traceback_then_counted_then_said_answering(
        sqlite_url, upstream, caplog, minute):
    caplog.set_level(logging.INFO)
    c = await start_coordinator(make_settings(sqlite_url, upstream))
    try:
        upstream.set_json(GDACS, MALFORMED)
        upstream.set_json(USGS, MALFORMED)
        t0 = time.monotonic()
        for _ in range(20):
            body = (await c.get("/earth/events")).json()
            # What answers say is unchanged: only the log is.
            assert body["health"]["sourcesUsable"] == 0
            assert [(s["name"], s["ok"], s["error"]) for s in body["health"]["sources"]] == [
                ("GDACS", False, "unparseable answer (KeyError)"), ("USGS", False, "unparseable answer (KeyError)")]
            assert body["caveats"][0].startswith("Degraded: 2 of 2 sources did not answer")
        elapsed = time.monotonic() - t0
        first = [r for r in lines(caplog, "sis.sources") if "still unusable" not in r.getMessage()]
        assert len(first) == 2, [r.getMessage() for r in first]
        for r, name in zip(sorted(first, key=lambda r: r.getMessage()), ("gdacs", "usgs")):
            assert r.levelno == logging.WARNING and r.exc_info and r.exc_info[0] is KeyError   # the traceback, once
            message = r.getMessage()
            assert message.startswith(f"{name.upper()} unusable: unparseable answer (KeyError): KeyError(")
            assert f"check SIS_SOURCES__{name.upper()}__BASE_URL (now {upstream.base_url}/{name})" in message
            assert "\n" not in message

        await asyncio.sleep(minute + 0.3)                  # the minute ends: the count of each source
        counted = {"GDACS": 0, "USGS": 0}
        for r in lines(caplog, "sis.sources")[2:]:
            m = re.fullmatch(r"(GDACS|USGS) still unusable: (\d+) failures? in the last \d+ s: "
                             r"unparseable answer \(KeyError\)", r.getMessage())
            assert m and r.levelno == logging.WARNING and not r.exc_info, r.getMessage()
            counted[m[1]] += int(m[2])
        assert counted == {"GDACS": 19, "USGS": 19}        # every repeat counted (in one line a minute)
        summaries = len(lines(caplog, "sis.sources")) - 2
        assert summaries == 2 or elapsed > minute          # one each, unless this machine took the minute

        for _ in range(5):
            await c.get("/earth/events")
        upstream.set_json(GDACS, sample("gdacs", "events/geteventlist/EVENTS4APP"))
        upstream.set_json(USGS, sample("usgs", "4.5_week.geojson"))
        body = (await c.get("/earth/events")).json()
        assert body["health"]["sourcesUsable"] == 2
        back = [r.getMessage() for r in lines(caplog, "sis.sources") if " answers again, after " in r.getMessage()]
        assert len(back) == 2 and all(re.fullmatch(r"(GDACS|USGS) answers again, after 25 failures in \d+ s "
                                                   r"\(the last: unparseable answer \(KeyError\)\)", m) for m in back), back
        written = len(lines(caplog, "sis.sources"))
        await asyncio.sleep(minute + 0.3)
        assert len(lines(caplog, "sis.sources")) == written    # nothing left unsaid, nothing more said
        assert written <= 8                                    # 26 requests: 2 first lines, 2 answers, a few counts
    finally:
        await stop_coordinator(c)


async def test_an_upstream_down_is_said_once_per_source_naming_its_base_url_setting(sqlite_url, caplog):
    caplog.set_level(logging.INFO)
    c = await start_coordinator(make_settings(sqlite_url, None, source_timeout_s=2))    # nothing on port 9
    try:
        for _ in range(10):
            body = (await c.get("/earth/events")).json()
            assert all(s["error"].startswith("unreachable") for s in body["health"]["sources"])
    finally:
        await stop_coordinator(c)
    logged = sorted(r.getMessage() for r in lines(caplog, "sis.sources"))
    assert len(logged) == 2, logged
    for message, name in zip(logged, ("GDACS", "USGS")):
        assert message.startswith(f"{name} unusable: unreachable")
        assert f"check SIS_SOURCES__{name}__BASE_URL (now http://127.0.0.1:9/{name.lower()})" in message
    assert all(r.levelno == logging.WARNING for r in lines(caplog, "sis.sources"))


class Parted(Source[dict]):
    """An adapter (not registered) read in two parts; part "b" fails as ``trouble`` says."""

    name = "parted"
    label = "Parted"
    trouble: BaseException | None = KeyError("code")

    async def fetch(self, query: Query) -> list[dict]:
        async def one(part: str) -> list[dict]:
            if part == "feed b" and self.trouble is not None:
                raise self.trouble
            return [{"part": part}]
        return await self.read_parts(["feed a", "feed b"], one)


async def test_a_part_that_fails_is_said_once_and_when_it_answers_again(caplog):
    src = Parted.at("http://127.0.0.1:9/parted")
    caplog.set_level(logging.INFO, logger="sis.sources")
    for _ in range(30):
        got = await src.read()
        assert got.report.ok and [p.error for p in got.parts] == [None, "unparseable answer (KeyError)"]
    logged = lines(caplog, "sis.sources")
    assert len(logged) == 1 and logged[0].exc_info and logged[0].exc_info[0] is KeyError
    assert logged[0].getMessage().startswith("Parted feed b unusable: unparseable answer (KeyError): KeyError('code')")
    assert "SIS_SOURCES__PARTED__BASE_URL (now http://127.0.0.1:9/parted)" in logged[0].getMessage()
    src.trouble = SourceError("HTTP 500")           # a failure of another kind, without a traceback: counted
    await src.read()
    assert len(lines(caplog, "sis.sources")) == 1
    src.trouble = None
    await src.read()
    back = [r.getMessage() for r in lines(caplog, "sis.sources")[1:]]
    assert len(back) == 1 and re.fullmatch(r"Parted feed b answers again, after 31 failures in \d+ s "
                                           r"\(the last: HTTP 500\)", back[0]), back


def test_a_source_failing_by_turns_writes_a_few_lines_a_minute_and_the_count_later():
    """One area read failing, another answering, request after request: each would start and end
    an outage. Outside an event loop, the count is said by the next line about the source."""
    now = [1000.0]
    log = logging.getLogger("test.outages")
    got: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            got.append(record.getMessage())

    handler = Keep()
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        o = Outages(log, clock=lambda: now[0])
        for i in range(1000):                         # 1000 failures and 1000 answers in 50 s
            o.failed("X", f"HTTP 50{i % 3}", check="SIS_SOURCES__X__BASE_URL")
            o.answered("X")
            now[0] += 0.05
        assert got[0].startswith("X unusable: HTTP 500; check SIS_SOURCES__X__BASE_URL")
        assert got[1].startswith("X answers again, after 1 failure in 0 s")
        assert len(got) == 2, got                     # the rest: counted
        now[0] += 20
        o.failed("X", "HTTP 503")                      # the minute is over: the count, then this failure
        assert got[2] == "X answers again, after 999 failures in the last 70 s (the last: HTTP 500); " \
                         "it answered again 999 times between them"
        assert got[3].startswith("X unusable: HTTP 503")    # a minute after the last start was said: said
        assert len(got) == 4
        for _ in range(100):
            now[0] += 0.2
            o.failed("X", "unreachable: Connection refused")
        assert len(got) == 4
        now[0] += 41
        o.answered("X")
        assert got[4:] == ["X still unusable: 100 failures in the last 61 s: unreachable: Connection refused",
                           "X answers again, after 101 failures in 61 s (the last: unreachable: Connection refused)"]
    finally:
        log.removeHandler(handler)


def test_a_new_kind_of_failure_with_a_traceback_is_said_at_once_a_few_kinds_at_most():
    """An upstream down, then back but answering what the parser cannot read: the parser's
    traceback is not lost in the outage's count."""
    now = [0.0]
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    log = logging.getLogger("test.outages.kinds")
    handler = Keep()
    log.addHandler(handler)
    try:
        o = Outages(log, clock=lambda: now[0])
        o.failed("X", "unreachable: Connection refused")
        for kind in (KeyError, ValueError, TypeError, IndexError, AttributeError, OverflowError, KeyError):
            for _ in range(3):
                o.failed("X", f"unparseable answer ({kind.__name__})", exc=kind("odd"), detail=repr(kind("odd")))
        kinds = [r for r in records if r.exc_info]
        assert [r.exc_info[0] for r in kinds] == [KeyError, ValueError, TypeError, IndexError]
        assert kinds[0].getMessage() == ("X unusable, another kind of failure: unparseable answer (KeyError): "
                                         "KeyError('odd') (2 failures in this outage)")
        assert len(records) == 5
    finally:
        log.removeHandler(handler)


# ---- 2. a leader role that cannot reach the database ----------------------------------------

async def run_for(leader: Leadership, seconds: float) -> None:
    async def work() -> None:
        await asyncio.sleep(3600)
    task = asyncio.get_running_loop().create_task(leader.run(work))
    await asyncio.sleep(seconds)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_role_that_cannot_reach_the_database_says_so_once_in_one_line_then_when_it_does(
        caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="sis.leader")
    leader = Leadership("postgresql+asyncpg://sis@127.0.0.1:5432/sis", "test-role", retry_s=0.01)
    down = [True]

    async def try_lock() -> bool:
        if down[0]:       # what SQLAlchemy raises on a connection gone: four lines, the statement among them
            raise InterfaceError("SELECT pg_try_advisory_lock($1)", (leader.key,),
                                 Exception("cannot call PreparedStatement.fetch(): the underlying connection is closed"))
        return False       # reached; another process leads

    monkeypatch.setattr(leader, "_try_lock", try_lock)
    assert "\n[SQL: " in str(InterfaceError("SELECT 1", (), Exception("x")))
    await run_for(leader, 0.5)                          # some 50 tries
    logged = [r.getMessage() for r in lines(caplog, "sis.leader")]
    assert logged == ["test-role: cannot reach the database to try for leadership: Exception: cannot call "
                      "PreparedStatement.fetch(): the underlying connection is closed; standing by, trying again "
                      "every 0.01 s (said again when it reaches it)"], logged
    down[0] = False
    await run_for(leader, 0.3)
    logged = [r.getMessage() for r in lines(caplog, "sis.leader")]
    assert len(logged) == 2 and re.fullmatch(r"test-role: reaches the database again \(127\.0\.0\.1:5432/sis\), "
                                             r"after \d+ failed tries in \d+ s", logged[1]), logged


async def test_a_database_nothing_listens_for_is_named_in_one_line_per_role(caplog):
    caplog.set_level(logging.INFO, logger="sis.leader")
    port = free_port()                                 # nothing listens there
    url = f"postgresql+asyncpg://postgres@127.0.0.1:{port}/sis_h45"
    roles = [Leadership(url, role, retry_s=0.05) for role in ("hazard-poller", "lease-sweeper", "access-prune")]
    await asyncio.gather(*(run_for(r, 0.6) for r in roles))
    logged = sorted(r.getMessage() for r in lines(caplog, "sis.leader"))
    assert logged == sorted(f"{role}: cannot reach the database to try for leadership: cannot reach PostgreSQL at "
                            f"127.0.0.1:{port} (database 'sis_h45'): nothing answers there; is the server running?; "
                            "standing by, trying again every 0.05 s (said again when it reaches it)"
                            for role in ("hazard-poller", "lease-sweeper", "access-prune")), logged


@pytest.mark.postgres
async def test_a_standbys_connection_cut_is_tried_again_at_once_unsaid(caplog):
    """A standby's kept connection cut while the database is well (a restart, an idle cut): the
    next try opens a fresh one, and the log is not told the database was unreachable."""
    server = os.environ.get("SIS_TEST_DATABASE_URL", "")
    if not server:
        pytest.skip("PostgreSQL suite: set SIS_TEST_DATABASE_URL")
    caplog.set_level(logging.INFO, logger="sis.leader")
    role = f"test-log-volume-{os.getpid()}"
    leader, standby = Leadership(server, role, retry_s=0.1), Leadership(server, role, retry_s=0.1)

    async def work() -> None:
        await asyncio.sleep(3600)
    tasks = [asyncio.get_running_loop().create_task(leader.run(work))]
    try:
        for _ in range(50):
            await asyncio.sleep(0.05)
            if leader.leading:
                break
        tasks.append(asyncio.get_running_loop().create_task(standby.run(work)))
        await asyncio.sleep(0.3)
        pid = await standby.backend_pid()
        assert leader.leading and not standby.leading and pid is not None
        await leader._conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        await asyncio.sleep(0.5)
        assert not standby.leading
        assert [r.getMessage() for r in lines(caplog, "sis.leader") if r.levelno >= logging.WARNING] == []
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# ---- 3. a poll no source answered -------------------------------------------------------------

async def test_a_poll_says_how_many_sources_answered_and_why_the_others_did_not(sqlite_url, upstream, caplog):
    caplog.set_level(logging.INFO, logger="sis.history")
    c = await start_coordinator(make_settings(sqlite_url, None, source_timeout_s=2))
    try:
        await c.services.poller.run_once()
    finally:
        await stop_coordinator(c)
    assert said(caplog, "sis.history", "event poll") == [
        "event poll 1: 0 events, 0 changes, sources usable 0/2 (GDACS: unreachable: Connection refused; "
        "USGS: unreachable: Connection refused)"]

    caplog.clear()
    c = await start_coordinator(make_settings(sqlite_url, upstream))
    try:
        upstream.set(USGS, Canned(status=500, body=b"down", content_type="text/plain"))
        await c.services.poller.run_once()
    finally:
        await stop_coordinator(c)
    assert said(caplog, "sis.history", "event poll") == [
        "event poll 2: 6 events, 6 changes, sources usable 1/2 (USGS: HTTP 500)"]
