"""What an upstream writes and this service stores, logs or serves: a lone surrogate or a NUL
in its JSON costs that character, not the answer (``values.storable_text``); its error text is
one bounded line (``values.one_line``), so a newline or a terminal escape in it forges no log
line and a huge one fills no answer."""
from __future__ import annotations

import json
import logging

from coordinator.sources.base import SourceError
from coordinator.sources.values import one_line, storable_text
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
