"""A bounded fuzz of the OpenAPI document on every route (issue 31).

Schemathesis generates requests from ``/openapi.json`` for every operation, valid
ones and ones that break the schema, with a fixed seed, and sends them to a real
coordinator on loopback (SQLite, the fake upstream and photo provider). Every answer
must be no 5xx, every error in the one error shape, and every answer must match the
document: a documented status, its content type and its schema. The run is bounded
by examples per operation and by time, and prints how many requests it sent.

Per-minute windows are counted but do not refuse here (``SIS_BENCH_UNLIMITED``):
otherwise nearly every request would be a 429 and the fuzz would test little else.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")
hypothesis = pytest.importorskip("hypothesis")
requests = pytest.importorskip("requests")

from hypothesis import HealthCheck, Phase, given, settings as hsettings  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,  # noqa: E402
                                               status_code_conformance)

from coordinator.demo.photos import FakePhotoProvider  # noqa: E402
from coordinator.demo.upstream import FakeUpstream  # noqa: E402
from tests.support import start_coordinator, stop_coordinator  # noqa: E402
from tests.test_sweeps_kit import sweep_settings  # noqa: E402

SEED = 31
TIME_BOUND_S = float(os.environ.get("SIS_FUZZ_SECONDS", "150"))
PER_OPERATION = int(os.environ.get("SIS_FUZZ_EXAMPLES", "15"))     # schemathesis's, each mode
SEEDED_SHARE = 0.8      # of the time bound, for the seeded generator (schemathesis's own has the rest)
MIN_REQUESTS = int(os.environ.get("SIS_FUZZ_MIN_REQUESTS", "10000"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


class Served:
    """A coordinator served from a thread of its own (its own event loop), so that the
    fuzz's blocking HTTP client can call it from the test's thread."""

    def __init__(self, db_url: str) -> None:
        self.db_url = db_url
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def __enter__(self) -> "Served":
        self.thread.start()

        async def up() -> None:
            self.upstream = await FakeUpstream().load_recorded().start()
            self.photos = await FakePhotoProvider().start()
            settings = sweep_settings(self.db_url, self.photos, bench_unlimited=True)
            base = self.upstream.base_url
            for name, src in settings.sources.items():
                if name != "panoramax":
                    src.base_url = f"{base}/{name}"
            self.c = await start_coordinator(settings)

        self.run(up())
        return self

    def __exit__(self, *exc: Any) -> None:
        async def down() -> None:
            await stop_coordinator(self.c)
            await self.photos.stop()
            await self.upstream.stop()

        self.run(down())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

# ---- a fast seeded generator from the document --------------------------------------------
# Schemathesis's own generation costs about 15 ms a case here (two shared cores), so it
# cannot reach 10,000 requests within the time bound alone. Past its share, cases are drawn
# by this generator from the same document (every parameter's and body field's schema:
# valid values, and one value broken per case: out of bounds, of the wrong type, empty,
# unknown, a body not JSON, not an object or nested too deep) and handed to schemathesis as
# ``Case`` objects, so its checks judge every answer alike.

TEXT = ["a", "Zürich", "x" * 300, "  ", "\u0000", "ls_1", "sr_abc", "'; DROP TABLE", "../../etc", "🙂", "1e309",
        "-0", "null", "true", "[]", "{}", "%00", "job-1", "0"]


def _alnum(rng: random.Random, n: int = 8) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") for _ in range(n))


def valid_value(schema: dict, rng: random.Random) -> Any:
    kind = schema.get("type")
    if "enum" in schema:
        return rng.choice(schema["enum"])
    if kind in ("integer", "number"):
        lo, hi = schema.get("minimum", -1000), schema.get("maximum", 1000)
        v = rng.uniform(lo, hi)
        return int(round(v)) if kind == "integer" else round(v, 6)
    pattern = schema.get("pattern", "")
    if pattern.startswith("^-?[0-9.]+"):               # a bbox w,s,e,n
        w, s = rng.uniform(-179, 178), rng.uniform(-89, 88)
        side = rng.choice([0.001, 0.01, 0.1, 0.5, 1, 3])
        return f"{w:.4f},{s:.4f},{min(180, w + side):.4f},{min(90, s + side):.4f}"
    if pattern == "(job-)?[0-9]+":
        return rng.choice(["", "job-"]) + str(rng.choice([1, 2, 7, 10**6, 10**30]))
    if pattern == "[A-Za-z0-9_]+":
        return rng.choice(["ls_", "sr_", ""]) + _alnum(rng, rng.randint(1, 24))
    if schema.get("description", "").startswith("semicolon"):
        return ";".join(f"{rng.uniform(-180, 180):.3f},{rng.uniform(-90, 90):.3f}" for _ in range(rng.randint(1, 4)))
    text = rng.choice(TEXT[:3] + [_alnum(rng, 12)])
    return text[: schema.get("maxLength", 10_000)] or "a"


def broken_value(schema: dict, rng: random.Random) -> Any:
    kind = schema.get("type")
    if kind in ("integer", "number"):
        return rng.choice(["abc", "", "1.5", "NaN", "inf", "-inf", "1e400", str(schema.get("maximum", 10) + 1),
                           str(schema.get("minimum", -10) - 1), "9" * 40, " 1", "0x10", "true"])
    return rng.choice(TEXT + ["", "x" * 5000, "1,2,3", "1,2,3,4,5", "10,10,0,0", "a,b,c,d"])


def body_for(schema: dict, rng: random.Random, broken: bool) -> Any:
    props = schema.get("properties") or {}
    if not props:                                         # a body read whole (a node's result)
        return rng.choice([{}, {"schemaVersion": 1}, [], {"jobId": "job-1", "facts": []}])
    body = {k: valid_value(v, rng) for k, v in props.items()
            if k in schema.get("required", ()) or rng.random() < 0.5}
    if broken:
        how = rng.randrange(4)
        if how == 0 and props:
            body[rng.choice(sorted(props))] = rng.choice([7, None, [], {"a": 1}, True, 1.5])
        elif how == 1:
            body[_alnum(rng, 5)] = "extra"
        elif how == 2 and schema.get("required"):
            body.pop(rng.choice(schema["required"]), None)
        else:
            body = rng.choice([[], "text", 5, None, DEEP_BODY])
    return body


DEEP_BODY = json.loads("[" * 40 + "]" * 40)


def seeded_case(op: Any, raw_op: dict, rng: random.Random) -> Any:
    """One case for ``op``: every declared value valid but, half the time, one broken."""
    params = raw_op.get("parameters", [])
    body_schema = (raw_op.get("requestBody") or {}).get("content", {}).get("application/json", {}).get("schema")
    slots = [p["name"] for p in params] + (["<body>"] if body_schema is not None else []) + ["<unknown>"]
    broken = rng.choice(slots) if rng.random() < 0.5 else None
    path, query = {}, {}
    for p in params:
        if p["in"] == "path" and p["name"] == "cred":
            value = rng.choice(["anon", "anon", "sisk_" + _alnum(rng, 20), _alnum(rng, 6)])
        elif broken == p["name"]:
            value = broken_value(p["schema"], rng)
            if p["in"] == "path" and (not str(value).strip() or "/" in str(value) or str(value) in ("..", ".")):
                value = "!" + str(value).replace("/", "")   # an empty segment or a slash names another route
        elif p.get("required") or p["in"] == "path" or rng.random() < 0.6:
            value = valid_value(p["schema"], rng)
        else:
            continue
        (path if p["in"] == "path" else query)[p["name"]] = value
    if broken == "<unknown>" and raw_op.get("parameters") is not None:
        query[_alnum(rng, 4)] = "1"
    kwargs: dict[str, Any] = {"path_parameters": path, "query": query}
    if body_schema is not None and (raw_op["requestBody"].get("required") or rng.random() < 0.7):
        kwargs["body"] = body_for(body_schema, rng, broken == "<body>")
        kwargs["media_type"] = "application/json"
    return op.Case(**kwargs)


def assert_error_shape(response: Any) -> None:
    if response.status_code < 400:
        return
    body = response.json()
    if "jsonrpc" in body:                   # the MCP endpoints answer JSON-RPC errors
        assert set(body["error"]) >= {"code", "message"}, body
        return
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}, body
    assert isinstance(body["error"]["message"], str) and isinstance(body["error"]["details"], dict), body


def test_fuzz_every_route_of_the_openapi_document(tmp_path, capsys):
    with Served(f"sqlite+aiosqlite:///{tmp_path}/fuzz.db") as served:
        base_url = served.c.base_url
        doc = requests.get(base_url + "/openapi.json", timeout=10).json()
        schema = schemathesis.openapi.from_dict(doc)
        operations = [r.ok() for r in schema.get_all_operations()]
        assert len(operations) >= 40, len(operations)
        session = requests.Session()
        started = time.monotonic()
        deadline = started + TIME_BOUND_S * (1 - SEEDED_SHARE)
        sent: dict[str, int] = {}
        failures: list[str] = []

        def check(label: str, mode: str, case: Any, response: Any) -> None:
            sent[label] = sent.get(label, 0) + 1
            try:
                case.validate_response(response, checks=CHECKS)
                assert_error_shape(response)
            except (Exception, BaseExceptionGroup) as exc:   # collected: one run reports every failing route
                failures.append(f"{label} [{mode}] {case.method} {response.request.url[:200]} "
                                f"-> {response.status_code}: {str(exc)[:400]}")

        for op in operations:
            label = f"{op.method.upper()} {op.path}"
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                try:
                    strategy = op.as_strategy(generation_mode=mode)
                except Exception as exc:    # an operation with nothing to break has no negative cases
                    if mode is GenerationMode.NEGATIVE:
                        continue
                    raise AssertionError(f"{label}: no strategy: {exc}") from exc
                budget = max(2.0, (deadline - time.monotonic()) / max(1, 2 * len(operations) - 2 * len(sent)))
                stop = time.monotonic() + budget

                @hsettings(max_examples=PER_OPERATION, deadline=None, database=None, derandomize=False,
                           phases=[Phase.generate], suppress_health_check=list(HealthCheck))
                @hypothesis.seed(SEED)
                @given(case=strategy)
                def fuzz(case: Any) -> None:
                    if time.monotonic() > min(stop, deadline):
                        return
                    check(label, mode.value, case, case.call(base_url=base_url, session=session, timeout=30))

                try:
                    fuzz()
                except hypothesis.errors.Unsatisfiable:
                    pass

        # The seeded generator, round robin over every operation, until the time bound, and on past it
        # (up to four times it) while fewer than MIN_REQUESTS were sent: the depth asked for is a count,
        # and a machine several times slower (or shared with other work) fell short of it in the bound.
        rng = random.Random(SEED)
        raw = {(op.method.upper(), op.path): doc["paths"][op.path][op.method.lower()] for op in operations}
        end, latest = started + TIME_BOUND_S, started + 4 * TIME_BOUND_S
        while time.monotonic() < end or (sum(sent.values()) < MIN_REQUESTS and time.monotonic() < latest):
            for op in operations:
                label = f"{op.method.upper()} {op.path}"
                case = seeded_case(op, raw[(op.method.upper(), op.path)], rng)
                check(label, "seeded", case, case.call(base_url=base_url, session=session, timeout=30))
            if sum(sent.values()) >= 1.5 * MIN_REQUESTS:    # enough: spare the suite's time
                break

        total = sum(sent.values())
        with capsys.disabled():
            print(f"\nfuzz: {total} requests across {len(sent)} of {len(operations)} operations "
                  f"in {time.monotonic() - started:.0f} s (seed {SEED}); "
                  f"{len(failures)} failures")
        assert not failures, "\n".join(failures[:30])
        assert set(sent) == {f"{op.method.upper()} {op.path}" for op in operations}, "a route was not fuzzed"
        assert total >= MIN_REQUESTS, total
