"""Embed tokens (minted from a key by API and CLI, budget per visitor carried
across renewals, origin checked once and only steering browsers) and
revocation (on the next request, cached answers included, from another process)."""
from __future__ import annotations

import asyncio
import os
import sys

import pytest

from coordinator.core.access import credentials as creds
from tests.support import make_settings, start_coordinator, stop_coordinator
from tests.test_access_support import embed, key
from tests.test_error_shape import assert_error_shape

VISITOR_A = {"X-Forwarded-For": "203.0.113.10"}
VISITOR_B = {"X-Forwarded-For": "198.51.100.20"}


async def sis(*args: str) -> tuple[int, str, str]:
    """The real `sis` command, in its own process."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "coordinator.cli", *args,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                env={**os.environ, "PYTHONPATH": os.getcwd()})
    out, err = await proc.communicate()
    return proc.returncode, out.decode(), err.decode()


async def test_an_embed_budget_is_per_visitor_and_carried_across_renewals(sqlite_url, upstream):
    c = await start_coordinator(make_settings(sqlite_url, upstream, trusted_proxies="127.0.0.1/32"))
    try:
        owner, rec = await key(c, "Pro")
        minted = await embed(c, owner, budget=4)
        assert minted["budgetPerVisitor"] == 4 and minted["origin"] == "https://maps.example.org"
        token = minted["token"]
        assert token.startswith("sise_")
        for _ in range(2):
            assert (await c.get(f"/public/v1/{token}/events", headers=VISITOR_A)).status == 200
        r = await c.get(f"/public/v1/{token}/renew", headers=VISITOR_A)          # the 3rd request of A
        assert r.status == 200
        renewed = r.json()
        assert renewed["chain"] == minted["chain"] and renewed["token"] != token
        assert renewed["usedByThisVisitor"] == 3 and r.headers["Cache-Control"] == "no-store"
        new = renewed["token"]
        r = await c.get(f"/public/v1/{new}/limits", headers=VISITOR_A)           # reading the budget spends none
        assert r.status == 200
        assert r.json()["kind"] == "embed" and r.json()["embed"]["usedByThisVisitor"] == 3
        assert (await c.get(f"/public/v1/{new}/events", headers=VISITOR_A)).status == 200   # the 4th: the last
        for t in (new, token):                                                     # old and new share the budget
            r = await c.get(f"/public/v1/{t}/events", headers=VISITOR_A)
            assert r.status == 403
            assert_error_shape(r.json(), "forbidden")
            assert r.json()["error"]["details"]["reason"] == "embed_budget_exhausted"
        r = await c.get(f"/public/v1/{new}/limits", headers=VISITOR_A)           # a spent budget is still readable
        assert r.status == 200 and r.json()["embed"]["usedByThisVisitor"] == 4
        assert r.json()["embed"]["budgetPerVisitor"] == 4
        assert (await c.get(f"/public/v1/{new}/events", headers=VISITOR_B)).status == 200   # B has its own
        usage = await c.services.access.key_usage(rec)
        # The key pays for its embeds: the mint and the five admitted embed requests (refusals and /limits
        # count nowhere).
        assert usage["publicToday"] == 6 and usage["embedLoadsToday"] == 5
    finally:
        await stop_coordinator(c)


async def test_an_embed_token_steers_browsers_to_its_origin_and_ignores_request_origin_headers(coordinator):
    owner, _ = await key(coordinator, "Basic")
    token = (await embed(coordinator, owner, origin="https://Maps.Example.org:443"))["token"]
    forged = {"Origin": "https://evil.example", "Referer": "https://evil.example/page",
              "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Dest": "iframe"}
    for headers in ({}, forged, {"Origin": "https://maps.example.org"}):
        r = await coordinator.get(f"/public/v1/{token}/events", headers=headers)
        assert r.status == 200
        assert r.headers["Access-Control-Allow-Origin"] == "https://maps.example.org"
        assert r.headers["Content-Security-Policy"] == "frame-ancestors https://maps.example.org"
        assert r.headers["Cache-Control"].startswith("private") or r.headers["Cache-Control"] == "no-store"
    r = await coordinator.get("/public/v1/anon/events", headers=forged)
    assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] == "*"
    assert "Content-Security-Policy" not in r.headers
    # A key's answers do not change with the Origin header either.
    r = await coordinator.get(f"/public/v1/{owner}/events", headers=forged)
    assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] == "*"


async def test_minting_checks_the_origin_once_and_the_plans_token_count(coordinator):
    owner, _ = await key(coordinator, "Free")
    for bad in ("http://evil.example", "https://x.example/path", "javascript:alert(1)", "", "https://x.example:99999"):
        r = await coordinator.post(f"/public/v1/{owner}/embed-tokens", {"origin": bad})
        assert r.status == 400, bad
    await embed(coordinator, owner)
    await embed(coordinator, owner)
    r = await coordinator.post(f"/public/v1/{owner}/embed-tokens", {"origin": "https://c.example"})
    assert r.status == 409
    assert r.json()["error"]["details"]["maxEmbedKeys"] == 2
    # The OpenAPI document lists the answers the route gives: a mint is 201 (it said 200) and the count 409.
    op = (await coordinator.get("/openapi.json")).json()["paths"]["/public/v1/{cred}/embed-tokens"]["post"]
    assert {"201", "409"} <= set(op["responses"]) and "200" not in op["responses"], sorted(op["responses"])
    r = await coordinator.post("/public/v1/anon/embed-tokens", {"origin": "https://c.example"})
    assert r.status == 403
    minted = await embed(coordinator, (await key(coordinator, "Pro"))[0])
    r = await coordinator.post(f"/public/v1/{minted['token']}/embed-tokens", {"origin": "https://c.example"})
    assert r.status == 403 and r.json()["error"]["details"]["missingScopes"] == ["earth.embed"]


def lifetime_s(token: dict) -> float:
    from datetime import datetime
    return (datetime.fromisoformat(token["expiresAt"]) - datetime.fromisoformat(token["createdAt"])).total_seconds()


@pytest.mark.parametrize("ttl", [60, 7 * 86400])
async def test_a_renewed_embed_token_keeps_the_lifetime_it_was_minted_with(coordinator_db, ttl):
    coordinator = coordinator_db
    assert coordinator.services.settings.embed_ttl_s == 3600
    owner, _ = await key(coordinator, "Pro")
    r = await coordinator.post(f"/public/v1/{owner}/embed-tokens?origin=https://maps.example.org&ttl={ttl}")
    assert r.status == 201, r.body
    minted = r.json()
    assert minted["ttlS"] == ttl and lifetime_s(minted) == ttl
    # Written as every other served instant (times.iso): it came with microseconds and +00:00.
    assert all(t.endswith("Z") and "." not in t for t in (minted["createdAt"], minted["expiresAt"]))
    token = minted["token"]
    for _ in range(2):                                     # a renewal of a renewal too
        r = await coordinator.get(f"/public/v1/{token}/renew")
        assert r.status == 200, r.body
        renewed = r.json()
        assert renewed["chain"] == minted["chain"] and renewed["ttlS"] == ttl and lifetime_s(renewed) == ttl
        token = renewed["token"]
    limits = (await coordinator.get(f"/public/v1/{token}/limits")).json()
    assert limits["embed"]["ttlS"] == ttl


async def test_a_token_minted_without_ttl_renews_for_the_default(coordinator):
    owner, _ = await key(coordinator, "Pro")
    minted = await embed(coordinator, owner)
    assert minted["ttlS"] == 3600 and lifetime_s(minted) == 3600
    renewed = (await coordinator.get(f"/public/v1/{minted['token']}/renew")).json()
    assert renewed["ttlS"] == 3600 and lifetime_s(renewed) == 3600


async def test_an_expired_embed_token_does_not_renew(coordinator):
    from tests.test_access_support import expire_embed
    owner, _ = await key(coordinator, "Pro")
    minted = await embed(coordinator, owner)
    await expire_embed(coordinator, minted["id"])
    r = await coordinator.get(f"/public/v1/{minted['token']}/renew")
    assert r.status == 401 and r.json()["error"]["details"]["reason"] == "expired"


@pytest.mark.slow
async def test_a_key_revoked_from_the_cli_is_refused_on_the_next_request_cached_answers_included(tmp_path, upstream):
    db_url = f"sqlite+aiosqlite:///{tmp_path}/sis.db"
    c = await start_coordinator(make_settings(db_url, upstream))
    try:
        rc, out, err = await sis("keys", "create", "--plan", "Basic", "--name", "site", "--database", db_url)
        assert rc == 0, err
        key_id, plan, secret = out.strip().split("\t")
        assert plan == "Basic" and secret.startswith("sisk_")
        rc, out, err = await sis("embed", "mint", key_id, "--origin", "https://maps.example.org", "--budget", "9",
                                 "--database", db_url)
        assert rc == 0, err
        token = out.strip().split("\t")[-1]
        for cred in (secret, token):
            r = await c.get(f"/public/v1/{cred}/events")
            assert r.status == 200
            assert r.headers["Cache-Control"].startswith("private")        # never in a shared cache
        r = await c.get("/earth/events", headers={"X-Api-Key": secret})
        assert r.status == 200 and r.headers["Cache-Control"].startswith("private")
        # One embed chain revoked from the CLI: that chain is refused, the key and other chains are not.
        rc, out, err = await sis("embed", "mint", key_id, "--origin", "https://other.example", "--database", db_url)
        assert rc == 0, err
        other_id, chain, _, other = out.strip().split("\t")
        assert (await c.get(f"/public/v1/{other}/events")).status == 200
        rc, out, err = await sis("embed", "list", "--key", key_id, "--database", db_url)
        assert rc == 0 and chain in out and other not in out and token not in out
        rc, out, err = await sis("embed", "revoke", chain, "--database", db_url)
        assert rc == 0 and "1 live token(s) revoked" in out, out + err
        r = await c.get(f"/public/v1/{other}/events")
        assert r.status == 401 and r.json()["error"]["details"]["reason"] == "revoked"
        assert (await c.get(f"/public/v1/{token}/events")).status == 200

        hits = c.services.cache.hits
        assert hits >= 1                                                   # the events answer is served from cache

        rc, out, err = await sis("keys", "revoke", key_id, "--database", db_url)
        assert rc == 0, err
        for path, headers in ((f"/public/v1/{secret}/events", {}), (f"/public/v1/{token}/events", {}),
                              ("/earth/events", {"X-Api-Key": secret})):
            r = await c.get(path, headers=headers)
            assert r.status == 401, path
            assert r.json()["error"]["details"]["reason"] == "revoked"
        assert c.services.cache.hits == hits                               # refused before the cache
        assert (await c.get("/public/v1/anon/events")).status == 200

        rc, out, err = await sis("keys", "list", "--database", db_url)
        assert rc == 0 and key_id in out and "revoked" in out and secret not in out
    finally:
        await stop_coordinator(c)


async def test_keys_are_stored_hashed(coordinator):
    secret, rec = await key(coordinator, "Free")
    from sqlalchemy import text
    async with coordinator.services.db.read() as s:
        rows = (await s.execute(text("SELECT key_hash, prefix FROM access_keys"))).all()
    assert rows == [(creds.digest(secret), secret[:9])]
    minted = await embed(coordinator, secret)
    async with coordinator.services.db.read() as s:
        stored = (await s.execute(text("SELECT token_hash FROM embed_tokens"))).scalar_one()
    assert stored == creds.digest(minted["token"]) and minted["token"] not in stored


async def test_sis_embed_refuses_a_zero_budget_a_key_without_the_scope_and_an_unknown_chain(tmp_path, upstream):
    """--budget 0 became the default 500, a key without earth.embed minted from the CLI where the HTTP route
    refuses it, and a mistyped chain id was 'revoked' with exit 0."""
    db_url = f"sqlite+aiosqlite:///{tmp_path}/sis.db"
    c = await start_coordinator(make_settings(db_url, upstream))
    try:
        _, full = await creds.create_key(c.services.db, "full", "Basic")
        _, narrow = await creds.create_key(c.services.db, "narrow", "Basic", ["earth.events"])
        origin = ("--origin", "https://maps.example.org", "--database", db_url)
        for flag in ("--budget", "--ttl"):
            rc, out, err = await sis("embed", "mint", full.id, flag, "0", *origin)
            assert rc == 1 and out == "" and ("'budget' must be at least 1" if flag == "--budget" else "'ttl'") in err
        rc, out, err = await sis("embed", "mint", narrow.id, *origin)
        assert rc == 1 and "lacks the scope earth.embed" in err
        rc, out, err = await sis("embed", "revoke", "chn_typo", "--database", db_url)
        assert rc == 1 and "no embed chain with id chn_typo" in err
        rc, out, err = await sis("embed", "list", "--database", db_url)
        assert rc == 0 and out == ""                                   # nothing was minted
    finally:
        await stop_coordinator(c)


async def test_an_error_shared_by_single_flight_carries_each_callers_own_embed_headers(sqlite_url, upstream):
    """Callers waiting on one computation are handed one error object; each caller's embed headers
    were set on it in place, so one token's origin and frame-ancestors went to the others."""
    from coordinator.catalogue import all_tools
    from coordinator.core.errors import NotFound
    from coordinator.core.registry import Tool, ToolRegistry
    from tests.support import start_coordinator as start

    async def slow_not_found(ctx, params):
        await asyncio.sleep(0.3)
        raise NotFound("nothing here", {})

    registry = ToolRegistry([*all_tools(), Tool(name="slow_missing", title="Slow", description="fails slowly",
                                                handler=slow_not_found, routes={"public": "/slow-missing"},
                                                scopes=("earth.events",), cache_ttl_s=60)])
    c = await start(make_settings(sqlite_url, upstream), registry)
    try:
        owner, _ = await key(c, "Enterprise")
        origins = ["https://a.example", "https://b.example"]
        tokens = [(await embed(c, owner, origin=o))["token"] for o in origins]
        callers = [(tokens[i % 2], origins[i % 2]) for i in range(6)] + [(owner, "*")]
        answers = await asyncio.gather(*(c.get(f"/public/v1/{cred}/slow-missing") for cred, _ in callers))
        assert [r.status for r in answers] == [404] * len(callers)
        assert [r.headers["Access-Control-Allow-Origin"] for r in answers] == [o for _, o in callers]
        assert [r.headers.get("Content-Security-Policy") for r in answers] == [
            None if o == "*" else f"frame-ancestors {o}" for _, o in callers]
    finally:
        await stop_coordinator(c)


async def test_a_renewal_authenticated_before_its_chain_was_revoked_is_refused(coordinator_db):
    """A `sis embed revoke` between a renewal's authentication and its write left the new token
    unrevoked: a live token of a revoked chain. The renewal reads its token again, locked, in its
    own write; the revocation locks the chain's rows first (on PostgreSQL an UPDATE that waited
    on the renewal's lock would not see the token it inserted)."""
    from coordinator.core.errors import Unauthorized
    c = coordinator_db
    owner, _ = await key(c, "Pro")
    minted = await embed(c, owner)
    db = c.services.db
    (stale,) = [r for r in await creds.list_embeds(db) if r.id == minted["id"]]   # as authenticated
    assert await creds.revoke_embed_chain(db, minted["chain"]) == 1
    with pytest.raises(Unauthorized) as refused:
        await creds.renew_embed(db, stale)
    assert refused.value.details["reason"] == "revoked"
    assert [r.id for r in await creds.list_embeds(db) if r.chain_id == minted["chain"]] == [minted["id"]]


async def test_embed_list_says_an_expired_token_is_expired(coordinator):
    """`sis embed list` showed every unrevoked token as live, expired ones too."""
    from tests.test_access_support import expire_embed
    owner, _ = await key(coordinator, "Pro")
    old, new = await embed(coordinator, owner), await embed(coordinator, owner)
    await expire_embed(coordinator, old["id"])
    code, out, err = await sis("embed", "list", "--database", coordinator.services.settings.database_url)
    assert code == 0, err
    state = {line.split("\t")[0]: line.split("\t")[-1] for line in out.splitlines()}
    assert state[old["id"]] == "expired" and state[new["id"]] == "live", out


async def test_concurrent_mints_keep_to_the_plans_live_tokens_per_key(coordinator_db):
    """Each mint counted the key's live chains before any of the others had committed (READ
    COMMITTED on PostgreSQL): 50 concurrent mints of a Free key, which allows 2, gave 10-11."""
    from coordinator.core.access import plans
    from coordinator.core.errors import Conflict
    c = coordinator_db
    _, record = await key(c, "Free")
    allowed = plans.PLANS["Free"].max_embed_keys
    got = await asyncio.gather(*(creds.mint_embed(c.services.db, record, "https://a.example", 10, 3600)
                                 for _ in range(30)), return_exceptions=True)
    assert sum(1 for g in got if isinstance(g, tuple)) == allowed
    assert all(isinstance(g, (tuple, Conflict)) for g in got), [g for g in got if not isinstance(g, tuple)][:2]
    assert len({r.chain_id for r in await creds.list_embeds(c.services.db) if r.key_id == record.id}) == allowed
