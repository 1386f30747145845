"""What an upstream writes and this service stores, logs or serves: a lone surrogate or a NUL
in its JSON costs that character, not the answer (``values.storable_text``); its error text is
one bounded line (``values.one_line``), so a newline or a terminal escape in it forges no log
line and a huge one fills no answer."""
from __future__ import annotations

import asyncio
import json
import logging

from coordinator.sources.base import SourceError
from coordinator.core.text import one_line
from coordinator.sources.values import storable_text
from tests.support import make_settings, start_coordinator, stop_coordinator


def test_odd_characters_in_upstream_json_are_made_storable_and_real_ones_kept():
    body = json.dumps({"t": "a\ud800b", "n": ["x\x00y"], "ok": "\U0001f600", "k\udfff": 1}).encode()
    assert storable_text(json.loads(body), body) == {"t": "a\ufffdb", "n": ["xy"], "ok": "\U0001f600", "k\ufffd": 1}
    raw = b'{"t": "\xed\xa0\x80"}'                      # a surrogate as bytes, which json.loads lets through
    assert storable_text(json.loads(raw), raw) == {"t": "\ufffd"}
    plain = b'{"t": "plain"}'
    doc = json.loads(plain)
    assert storable_text(doc, plain) is doc             # nothing odd: not walked


def test_an_upstream_error_is_one_bounded_line():
    assert one_line("Bad.\n2026 ERROR forged\x1b[2J\u2028") == "Bad.\\x0a2026 ERROR forged\\x1b[2J\\u2028"
    assert len(one_line("x" * 5000)) == 1000 and one_line("x" * 5000).endswith("\u2026")
    assert str(SourceError("FRED said 400: a\nb")) == "FRED said 400: a\\x0ab"


async def test_a_forged_line_in_an_upstream_message_reaches_neither_log_nor_answer_as_a_line(
        sqlite_url, upstream, caplog):
    caplog.set_level(logging.INFO)
    forged = "Bad Request.\n2026-12-03 10:00:00,000 ERROR sis.http: request 0000 failed: forged\x1b[2J" + "y" * 3000
    upstream.set_json("/fred/series/observations", {"error_code": 400, "error_message": forged}, 400)
    c = await start_coordinator(make_settings(sqlite_url, upstream, sources={"fred": {"api_key": "FREDKEY"}}))
    try:
        body = (await c.get("/earth/w/fred-unrate")).json()
    finally:
        await stop_coordinator(c)
    error = body["health"]["sources"][0]["error"]
    assert error.startswith("FRED said 400: Bad Request.\\x0a2026") and "\x1b" not in error and len(error) <= 1000
    assert not any("\n" in r.getMessage() or "\x1b" in r.getMessage() for r in caplog.records if "FRED" in r.getMessage())


async def test_a_nodes_platform_line_prints_as_one_row_of_sis_nodes_list(sqlite_url, upstream, capsys):
    """Text a node gave at its (open) enrolment reached the operator's terminal raw: a newline
    and a terminal escape in it printed a convincing extra "trusted" row."""
    from coordinator.cli import main
    from coordinator.core.db.migrate import with_database
    from coordinator.sweeps import nodes as registry
    from tests.support import make_settings as settings_of

    forged = "Linux / g\nnd_0000000000000000000  trusted     99     99       0  2026-12-03  \x1b[31mLinux\x1b[0m"

    async def enrol(db):
        await registry.enrol(db, name="", platform=forged, gpu="g\x00", engine_version="0.1.0",
                             engine_build="sha256:x")
        return 0
    await with_database(settings_of(sqlite_url, upstream), enrol, create=True)
    assert await asyncio.to_thread(main, ["nodes", "list", "--database", sqlite_url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and out[2] == "1 node (0 trusted, 1 untrusted, 0 revoked)" and "\x1b" not in out[1] and "\\x0and_000" in out[1], out
