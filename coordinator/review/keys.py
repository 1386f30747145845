"""Reviewer keys: a small table of its own (``reviewers``), hashed tokens with the
``review`` scope, made with ``sis reviewers create``.

Kept self-contained on purpose: when the access system (keys, plans, scopes)
lands, a reviewer becomes a key of that system with the ``review`` scope and this
module's ``authenticate`` becomes a call into it. A token is 256 random bits, so a
plain SHA-256 of it is as good as a slow hash (nothing to guess).
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime

from sqlalchemy import select, update

from coordinator.core.db.models import Reviewer
from coordinator.core.errors import Forbidden, NotFound, Unauthorized
from ..sweeps import transitions as tr

SCOPE = "review"
TOKEN_PREFIX = "sisr_"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def create(db, name: str) -> tuple[Reviewer, str]:
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    now = tr.utcnow()
    reviewer = Reviewer(id=tr.new_id("rv"), name=name[:120], token_hash=token_hash(token), scopes=SCOPE,
                        created_at=now)
    async with db.write() as s:
        s.add(reviewer)
    return reviewer, token


async def list_all(db) -> list[Reviewer]:
    async with db.read() as s:
        return list((await s.execute(select(Reviewer).order_by(Reviewer.created_at))).scalars())


async def revoke(db, reviewer_id: str, reason: str) -> None:
    async with db.write() as s:
        r = await s.get(Reviewer, reviewer_id)
        if r is None:
            raise NotFound("no such reviewer", {"reviewerId": reviewer_id})
        if r.revoked_at is None:
            r.revoked_at, r.revoked_reason = tr.utcnow(), reason


def token_from(headers) -> str | None:
    """``Authorization: Bearer <token>`` or ``X-Api-Key: <token>``."""
    auth = headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return (headers.get("X-Api-Key") or "").strip() or None


async def authenticate(db, token: str | None, *, touch: bool = True) -> Reviewer:
    if not token:
        raise Unauthorized("a reviewer key is needed (Authorization: Bearer <key> or X-Api-Key)")
    digest = token_hash(token)
    async with db.read() as s:
        r = (await s.execute(select(Reviewer).where(Reviewer.token_hash == digest))).scalar_one_or_none()
    if r is None or not hmac.compare_digest(r.token_hash, digest):
        raise Unauthorized("this reviewer key is not known")
    if r.revoked_at is not None:
        raise Forbidden("this reviewer key was revoked", {"reason": r.revoked_reason})
    if SCOPE not in r.scopes.split():
        raise Forbidden(f"this key lacks the scope {SCOPE}", {"missingScopes": [SCOPE]})
    if touch:
        now: datetime = tr.utcnow()
        last = tr.aware(r.last_used_at)
        if last is None or (now - last).total_seconds() > 60:   # not a write per request
            async with db.write() as s:
                await s.execute(update(Reviewer).where(Reviewer.id == r.id).values(last_used_at=now))
    return r
