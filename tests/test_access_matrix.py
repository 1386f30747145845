"""Every credentialed route x every kind of caller -> the status docs/access.md documents.

The routes come from the registry (the real tools plus stand-ins for tools not
built yet), so a new credentialed route joins the matrix by being declared.
"""
from __future__ import annotations

from urllib.parse import urlencode

import pytest

from coordinator.core.access import credentials as creds
from coordinator.core.access import plans, policy
from coordinator.core.registry import Tool
from tests.support import make_settings, start_coordinator, stop_coordinator
from tests.test_access_support import embed, expire_embed, key, registry_with_standins
from tests.test_error_shape import assert_error_shape
from tests.test_mcp_sdk import sample_arguments

PLANS = ("Free", "Basic", "Pro", "Enterprise")
CASES = ("anon", *PLANS, "missing-scope", "revoked", "invalid", "malformed", "embed", "expired-embed",
         "exhausted-budget")
EMBED_SCOPES = frozenset(s for s in creds.ALL_SCOPES if s != "earth.embed")
# A key holding none of the public scopes (a key with no scope at all is refused at creation).
MISSING_SCOPES = frozenset({creds.REVIEW_SCOPE})


def sample_params(tool: Tool) -> dict:
    """Valid arguments off the declaration (the faces' tests' own), and an embed origin."""
    out = sample_arguments(tool)
    if "origin" in out:
        out["origin"] = "https://maps.example.org"
    return out


def expected(tool: Tool, case: str) -> tuple[int, str | None]:
    """(status, details.reason or None) as docs/access.md states them."""
    if case in ("revoked", "invalid", "malformed", "expired-embed"):
        return 401, {"revoked": "revoked", "invalid": "unknown", "malformed": "malformed",
                     "expired-embed": "expired"}[case]
    have = {"anon": frozenset(plans.ANON_SCOPES), "missing-scope": MISSING_SCOPES, "embed": EMBED_SCOPES,
            "exhausted-budget": EMBED_SCOPES}.get(case, frozenset(creds.ALL_SCOPES))
    if case == "anon" and not tool.keyless:      # said before any scope: anon needs a key, not a scope
        return 403, "needs_key"
    if not set(tool.scopes) <= have:
        return 403, None
    if case == "exhausted-budget" and tool.name not in policy.SELF_READS:   # /limits reads a spent budget
        return 403, "embed_budget_exhausted"
    if tool.name == "renew_embed":
        return (200, None) if case == "embed" else (403, "not_renewable")
    if tool.method == "POST":
        return 201, None
    return 200, None


def public_tools(registry) -> list[Tool]:
    return [t for t in registry if "public" in t.routes]


async def test_every_credentialed_route_answers_every_kind_of_caller_as_documented(sqlite_url, upstream, monkeypatch):
    # Some 80 routes' bad credentials come from one address here: the per-address lockout of
    # failed credentials (tests/test_hardening_lockout.py) would answer 429 before the matrix ends.
    monkeypatch.setattr(policy, "FAILED_CREDENTIALS_PER_MINUTE", 100_000)
    registry = registry_with_standins()
    tools = public_tools(registry)
    names = {t.name for t in tools}
    # The matrix covers the real credentialed routes and the access routes of this issue.
    assert {"hazard_events", "event_changes", "credential_limits", "renew_embed", "mint_embed"} <= names
    c = await start_coordinator(make_settings(sqlite_url, upstream), registry)
    try:
        creds_by_case: dict[str, str] = {"anon": "anon", "invalid": "sisk_" + "A" * 32, "malformed": "not-a-key"}
        for plan in PLANS:
            creds_by_case[plan] = (await key(c, plan))[0]
        creds_by_case["missing-scope"] = (await key(c, "Pro", scopes=sorted(MISSING_SCOPES)))[0]
        revoked, rec = await key(c, "Basic")
        assert (await c.get(f"/public/v1/{revoked}/events")).status == 200   # cached as valid in the process
        await creds.revoke_key(c.services.db, rec.id)
        creds_by_case["revoked"] = revoked
        owner = (await key(c, "Enterprise"))[0]
        creds_by_case["embed"] = (await embed(c, owner))["token"]
        expired = await embed(c, owner)
        await expire_embed(c, expired["id"])
        creds_by_case["expired-embed"] = expired["token"]
        spent = (await embed(c, owner, budget=1))["token"]
        assert (await c.get(f"/public/v1/{spent}/events")).status == 200
        creds_by_case["exhausted-budget"] = spent

        failures = []
        for tool in tools:
            for case in CASES:
                want_status, want_reason = expected(tool, case)
                path = f"/public/v1/{creds_by_case[case]}{tool.routes['public']}"
                params = sample_params(tool)
                if tool.method == "POST":
                    r = await c.post(path, params)
                else:
                    r = await c.get(path + ("?" + urlencode(params) if params else ""))
                got_reason = None
                if r.status >= 400:
                    body = r.json()
                    assert_error_shape(body, {401: "unauthorized", 403: "forbidden"}.get(r.status, body["error"]["code"]))
                    got_reason = body["error"]["details"].get("reason")
                if want_status == 200 and r.status == 202 and tool.cold == "accepted":
                    continue   # admitted; an accepted tool's cold point (/hazard-index) answers 202 until ready
                if r.status != want_status or (want_reason and got_reason != want_reason):
                    failures.append(f"{tool.name} {case}: got {r.status} {got_reason}, want {want_status} {want_reason}")
        assert not failures, "\n".join(failures)
    finally:
        await stop_coordinator(c)


@pytest.mark.parametrize("case", ["anon", "Free", "missing-scope"])
async def test_site_intel_needs_its_scope_and_is_not_keyless(sqlite_url, upstream, case):
    c = await start_coordinator(make_settings(sqlite_url, upstream), registry_with_standins())
    try:
        cred = "anon" if case == "anon" else (await key(c, "Free", None if case == "Free" else list(plans.ANON_SCOPES)))[0]
        r = await c.get(f"/public/v1/{cred}/site-intel?lat=1&lon=1")
        if case == "Free":
            assert r.status == 200
        else:
            assert r.status == 403
            assert r.json()["error"]["details"]["missingScopes"] == ["earth.site-intel"]
            assert r.json()["error"]["details"].get("reason") == ("needs_key" if case == "anon" else None)
    finally:
        await stop_coordinator(c)
