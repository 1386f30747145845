"""Reviewers are keys of the access system with the ``review`` scope: ``sis reviewers`` is a
convenience over ``sis keys``, the review API looks keys up through the access system, a
key revoked with ``sis keys revoke`` is refused on the next request, and reviewer keys
made before migration 0011 (``sisr_...``, the old ``reviewers`` table) still work."""
from __future__ import annotations

import hashlib
from datetime import datetime, timezone

from sqlalchemy import insert, select, table, column, String, DateTime, Text

from coordinator.core.access import credentials as creds
from coordinator.core.access import plans
from coordinator.core.db import Database
from coordinator.core.db import migrate
from coordinator.core.db.models import SweepTransition
from tests.support import stop_coordinator
from tests.test_access_embed import sis
from tests.test_error_shape import assert_error_shape
from tests.test_review_kit import photo_in_every_cell, sweep_to_review
from tests.test_sweeps_kit import photos, start  # noqa: F401


async def test_a_reviewer_is_a_key_and_sis_keys_revoke_refuses_it_on_the_next_request(db_url, photos):
    photo_in_every_cell(photos)
    c = await start(db_url, photos)
    try:
        await sweep_to_review(c, photos)
        rc, out, err = await sis("reviewers", "create", "--name", "Rita Reviewer", "--database", db_url)
        assert rc == 0, err
        key = out.split("X-Api-Key): ")[1].split()[0]
        key_id = out.split()[1]
        assert creds.KEY_RE.fullmatch(key) and key_id.startswith("key_")

        rc, out, err = await sis("keys", "list", "--database", db_url)      # one key system
        line = next(ln for ln in out.splitlines() if ln.startswith(key_id))
        assert line.split("\t")[-1] == "review" and "Rita Reviewer" in line and "live" in line

        me = await c.get("/review/v1/me", headers={"Authorization": f"Bearer {key}"})
        doc = me.json()
        assert me.status == 200 and doc.pop("baseMap") is None     # no tile server configured by default
        assert doc == {"reviewerId": key_id, "name": "Rita Reviewer", "scopes": ["review"]}
        pending = await c.get("/review/v1/pending", headers={"X-Api-Key": key})
        assert pending.status == 200 and pending.json()["count"] >= 1
        job = pending.json()["pending"][0]["jobId"]
        assert (await c.post(f"/review/v1/jobs/{job}/approve", {"reason": "ok"},
                             headers={"X-Api-Key": key})).status == 200
        async with c.services.db.read() as s:
            verdict = (await s.execute(select(SweepTransition).where(SweepTransition.to_state == "approved",
                                                                     SweepTransition.subject == "job"))).scalar_one()
        assert verdict.actor == f"reviewer:{key_id}"

        rc, out, err = await sis("keys", "revoke", key_id, "--database", db_url)
        assert rc == 0, err
        r = await c.get("/review/v1/pending", headers={"X-Api-Key": key})
        assert r.status == 403, r.body
        assert_error_shape(r.json(), "forbidden")
        rc, out, err = await sis("reviewers", "list", "--database", db_url)
        assert rc == 0 and key_id in out and "revoked" in out
    finally:
        await stop_coordinator(c)


async def test_sis_reviewers_revoke_keeps_its_reason_and_the_review_scope_is_never_given_by_default(sqlite_url,
                                                                                                     photos):
    c = await start(sqlite_url, photos)
    try:
        rc, out, err = await sis("reviewers", "create", "--name", "Ann", "--database", sqlite_url)
        key, key_id = out.split("X-Api-Key): ")[1].split()[0], out.split()[1]
        rc, out, err = await sis("reviewers", "revoke", key_id, "--reason", "left the project",
                                 "--database", sqlite_url)
        assert rc == 0, err
        r = await c.get("/review/v1/me", headers={"Authorization": f"Bearer {key}"})
        assert r.status == 403 and r.json()["error"]["details"]["reason"] == "left the project"
        rc, out, err = await sis("keys", "list", "--database", sqlite_url)
        assert f"{key_id}\t" in out and "revoked" in out.split(key_id)[1].splitlines()[0]

        # A key made without scopes holds every scope of the public contract, not review.
        plain, rec = await creds.create_key(c.services.db, "dashboard")
        assert "review" not in rec.scopes and "review" not in plans.ANON_SCOPES
        r = await c.get("/review/v1/me", headers={"X-Api-Key": plain})
        assert r.status == 403 and r.json()["error"]["details"]["missingScopes"] == ["review"]
        anon = (await c.get("/public/v1/anon/limits")).json()
        assert "review" not in anon["scopes"]
        # ... and a reviewer's key is no key to the public API's tools.
        rc, out, err = await sis("reviewers", "create", "--name", "Bo", "--database", sqlite_url)
        review_only = out.split("X-Api-Key): ")[1].split()[0]
        r = await c.get(f"/public/v1/{review_only}/events")
        assert r.status == 403 and "earth.events" in r.json()["error"]["details"]["missingScopes"]
        assert (await c.get("/review/v1/me", headers={"X-Api-Key": "sisk_" + "x" * 32})).status == 401
        rc, out, err = await sis("reviewers", "revoke", "key_000000000000", "--reason", "x",
                                 "--database", sqlite_url)
        assert rc == 1 and "no such reviewer key" in err
    finally:
        await stop_coordinator(c)


async def test_reviewer_keys_made_before_migration_0011_keep_working_until_revoked(db_url, photos):
    """The old table stored the SHA-256 of each ``sisr_`` token, as the access system stores
    a key's: migration 0011 copies the rows under their ids, and the same token is found."""
    if not db_url.startswith("sqlite"):
        from tests.conftest import reset_postgres
        await reset_postgres(db_url)
    live, gone = "sisr_" + "a" * 43, "sisr_" + "b" * 43
    at = datetime(2026, 11, 1, tzinfo=timezone.utc)
    old = table("reviewers", column("id", String), column("name", String), column("token_hash", String),
                column("scopes", String), column("created_at", DateTime(timezone=True)),
                column("revoked_at", DateTime(timezone=True)), column("revoked_reason", Text))
    db = Database(db_url)
    try:
        await migrate.upgrade_async(db.write_engine, db_url, "0010")
        async with db.write() as s:
            await s.execute(insert(old), [
                {"id": "rv_" + "1" * 20, "name": "Old Olga", "token_hash": hashlib.sha256(live.encode()).hexdigest(),
                 "scopes": "review", "created_at": at, "revoked_at": None, "revoked_reason": None},
                {"id": "rv_" + "2" * 20, "name": "Gone Gus", "token_hash": hashlib.sha256(gone.encode()).hexdigest(),
                 "scopes": "review", "created_at": at, "revoked_at": at, "revoked_reason": "moved on"}])
        await migrate.upgrade_async(db.write_engine, db_url)
    finally:
        await db.close()
    c = await start(db_url, photos)
    try:
        me = await c.get("/review/v1/me", headers={"Authorization": f"Bearer {live}"})
        assert me.status == 200 and me.json()["reviewerId"] == "rv_" + "1" * 20
        r = await c.get("/review/v1/me", headers={"X-Api-Key": gone})
        assert r.status == 403 and r.json()["error"]["details"]["reason"] == "moved on"
        rc, out, err = await sis("keys", "revoke", "rv_" + "1" * 20, "--database", db_url)
        assert rc == 0, err
        assert (await c.get("/review/v1/me", headers={"X-Api-Key": live})).status == 403
    finally:
        await stop_coordinator(c)
