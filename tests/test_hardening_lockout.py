"""Failed-credential lockouts (issue 31, item 7): an address that has presented 60 bad
credentials in a minute is refused 429 for further guesses, without a lookup, but a valid
key or embed token presented from it is still served, even one never looked up before:
someone sharing the address cannot lock out its key users."""
from __future__ import annotations

import time

from coordinator.core.access import credentials as creds
from coordinator.core.access.policy import FAILED_CREDENTIALS_PER_MINUTE
from tests.test_access_support import embed, key
from tests.test_error_shape import assert_error_shape


async def spend_failure_budget(c, headers: dict | None = None) -> None:
    for i in range(FAILED_CREDENTIALS_PER_MINUTE):
        r = await c.get(f"/public/v1/sisk_{i:032d}/events", headers=headers)
        assert r.status == 401
    r = await c.get("/public/v1/sisk_" + "C" * 32 + "/events", headers=headers)
    assert r.status == 429
    assert_error_shape(r.json(), "rate_limited")
    assert r.json()["error"]["details"]["limit"] == "failedCredentialsPerMinute"


async def test_a_valid_key_still_works_after_60_failures_from_its_address(coordinator_db):
    coordinator = coordinator_db
    early, _ = await key(coordinator, "Pro")           # exists before the address is locked out
    minted = await embed(coordinator, early)
    await spend_failure_budget(coordinator)
    late, _ = await key(coordinator, "Free")           # made after: not in any cache or list yet
    assert (await coordinator.get(f"/public/v1/{early}/events")).status == 200
    assert (await coordinator.get(f"/public/v1/{late}/events")).status == 200
    assert (await coordinator.get("/earth/events", headers={"X-Api-Key": (await key(coordinator))[0]})).status == 200
    assert (await coordinator.get(f"/public/v1/{minted['token']}/events")).status == 200
    assert (await coordinator.get("/public/v1/anon/events")).status == 200


async def test_guessing_is_still_refused_without_a_lookup_per_guess(coordinator_db, monkeypatch):
    coordinator = coordinator_db
    secret, record = await key(coordinator)
    await spend_failure_budget(coordinator)
    lookups = []
    real_find_key = creds.find_key

    async def counted(db, presented):  # noqa: ANN001
        lookups.append(presented)
        return await real_find_key(db, presented)

    monkeypatch.setattr(creds, "find_key", counted)
    live = coordinator.services.access.live
    monkeypatch.setattr(live, "RELOAD_S", 0.1)             # each missed guess waits for a fresh read
    started = time.monotonic()
    for i in range(20):
        r = await coordinator.get(f"/public/v1/sisk_{i + 100:032d}/events")
        assert r.status == 429, r.body
        assert r.json()["error"]["details"]["limit"] == "failedCredentialsPerMinute"
        r = await coordinator.get("/earth/events", headers={"X-Api-Key": f"sisk_{i + 500:032d}"})
        assert r.status == 429
    assert lookups == []                                     # no guess reached the keys' rows
    assert live.reads <= (time.monotonic() - started) / live.RELOAD_S + 2
    # A key revoked since the live set was read is looked up once and refused as a failed credential.
    await creds.revoke_key(coordinator.services.db, record.id)
    r = await coordinator.get(f"/public/v1/{secret}/events")
    assert r.status == 429
    fresh, _ = await key(coordinator)
    assert (await coordinator.get(f"/public/v1/{fresh}/events")).status == 200
    assert lookups == [secret, fresh]
