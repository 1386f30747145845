"""Reviewer keys: keys of the access system (``access_keys``) holding the ``review`` scope.

There is one key system. ``sis reviewers create`` makes a key as ``sis keys create
--scopes review`` would (``credentials.create_key``: ``sisk_...``, only its SHA-256
stored), so ``sis keys list`` shows it and ``sis keys revoke`` revokes it; ``sis
reviewers`` is a convenience over the same rows, listing only the keys with the
scope. ``authenticate`` looks a presented key up through the access system
(``credentials.find_key``) on every request, uncached, so a revocation by either
command is refused on the next request.

Keys made before migration 0011 (``sisr_...``, from the old ``reviewers`` table)
were copied into ``access_keys`` under their ids with the same stored hash (both
systems store the SHA-256 of the whole secret), so they are found by the same
lookup and keep working until revoked; ``LEGACY_RE`` lets their form through the
format check.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from coordinator.core.access import credentials as creds
from coordinator.core.db.models import SweepTransition
from coordinator.core.errors import Forbidden, NotFound, Unauthorized
from ..sweeps import transitions as tr

SCOPE = creds.REVIEW_SCOPE
PLAN = "Free"       # a plan is required of a key; the review API is not metered by it
LEGACY_RE = re.compile(r"sisr_[A-Za-z0-9_-]{43}")      # secrets.token_urlsafe(32) after the prefix


@dataclass(frozen=True)
class ReviewerKey:
    """The reviewer a key belongs to, as the review API and its log name them: ``id`` is
    the key's id (``reviewer:<id>`` in ``sweep_transitions``), ``scopes`` space-separated."""

    id: str
    name: str
    scopes: str
    prefix: str
    created_at: datetime
    revoked_at: datetime | None

    @classmethod
    def of(cls, rec: creds.KeyRecord) -> "ReviewerKey":
        return cls(rec.id, rec.name, " ".join(rec.scopes), rec.prefix, rec.created_at, rec.revoked_at)


async def create(db, name: str) -> tuple[ReviewerKey, str]:
    """A key of the access system with the ``review`` scope only; the secret is returned once."""
    secret, rec = await creds.create_key(db, name[:120], PLAN, [SCOPE])
    return ReviewerKey.of(rec), secret


async def list_all(db) -> list[ReviewerKey]:
    """Every key holding the ``review`` scope, oldest first, revoked ones included."""
    return [ReviewerKey.of(r) for r in await creds.list_keys(db) if SCOPE in r.scopes]


async def revoke(db, key_id: str, reason: str, actor: str = "operator") -> ReviewerKey:
    """Revoke a reviewer's key (``credentials.revoke_key``, as ``sis keys revoke`` does) and
    keep the reason, which the access system has no column for, as a ``sweep_transitions``
    row (subject ``reviewer``) beside the verdicts the key made. ``NotFound`` for a key
    that does not exist or lacks the scope. A key already revoked is left as it was."""
    rec = await creds.find_key_by_id(db, key_id)
    if rec is None or SCOPE not in rec.scopes:
        raise NotFound("no such reviewer key", {"keyId": key_id})
    if rec.revoked_at is None:
        rec = await creds.revoke_key(db, key_id)
        async with db.write() as s:
            await tr.record(s, tr.row("reviewer", key_id, "active", "revoked", actor, reason,
                                      rec.revoked_at or tr.utcnow()))
    return ReviewerKey.of(rec)


def token_from(headers) -> str | None:
    """``Authorization: Bearer <key>`` or ``X-Api-Key: <key>``."""
    auth = headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return (headers.get("X-Api-Key") or "").strip() or None


async def _revocation_reason(db, key_id: str) -> str | None:
    async with db.read() as s:
        q = (select(SweepTransition.reason).where(SweepTransition.subject == "reviewer",
                                                  SweepTransition.subject_id == key_id,
                                                  SweepTransition.to_state == "revoked")
             .order_by(SweepTransition.id.desc()).limit(1))
        return (await s.execute(q)).scalar_one_or_none()


# A 401 names its scheme (RFC 9110 section 11.6.1), as the node protocol's does.
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="review"'}
CHALLENGE_INVALID = {"WWW-Authenticate": 'Bearer realm="review", error="invalid_token"'}


async def authenticate(db, token: str | None) -> ReviewerKey:
    """The reviewer a presented key belongs to, read through the access system's lookup on
    every request: 401 for no key or one that is not known, 403 for a revoked key (with
    its reason) or a key without the ``review`` scope."""
    if not token:
        raise Unauthorized("a reviewer key is needed (Authorization: Bearer <key> or X-Api-Key)",
                           headers=CHALLENGE)
    rec = None
    if creds.KEY_RE.fullmatch(token) or LEGACY_RE.fullmatch(token):
        rec = await creds.find_key(db, token)
    if rec is None:
        raise Unauthorized("this reviewer key is not known", headers=CHALLENGE_INVALID)
    if rec.revoked_at is not None:
        raise Forbidden("this reviewer key was revoked", {"reason": await _revocation_reason(db, rec.id)})
    if SCOPE not in rec.scopes:
        raise Forbidden(f"this key lacks the scope {SCOPE}", {"missingScopes": [SCOPE]})
    return ReviewerKey.of(rec)
