"""Enrolled nodes: enrolment, bearer-token authentication, listing and revocation.

A token is 32 random bytes shown once at enrolment; only its SHA-256 is stored.
A salted slow hash buys nothing for a random 256-bit secret (there is no
dictionary to slow down) and would cost every request a key derivation.
Revocation takes effect on the next request: every call looks the token up.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

from sqlalchemy import bindparam, select

from ..db.models import Node, SweepJob, SweepLease
from ..errors import Forbidden, NotFound, Unauthorized
from ..sweeps import transitions as tr
from ..sweeps.leases import for_update, release, retrying
from ..sweeps.records import NODES, Record, record

TOKEN_PREFIX = "sisn_"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def enrol(db, *, name: str, platform: str, gpu: str, engine_version: str,
                engine_build: str) -> tuple[Node, str]:
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    now = tr.utcnow()
    node = Node(id=tr.new_id("nd"), token_hash=token_hash(token), name=name, platform=platform, gpu=gpu,
                engine_version=engine_version, engine_build=engine_build, enrolled_at=now, last_seen_at=now,
                revoked_at=None, revoked_reason=None, streak=0, valid_total=0, invalid_total=0, trusted=False)
    async with db.write() as s:
        s.add(node)
        await s.flush()
        await tr.record(s, tr.row("node", node.id, None, "untrusted", f"node:{node.id}",
                                  f"enrolled: {platform}; {gpu}; engine {engine_version} build {engine_build}", now))
    return node, token


async def authenticate(sweeps, authorization: str | None) -> Node:
    """The node a bearer token belongs to, looked up on every request (so a revocation holds
    from the next one). Lookups arriving together share one query (``sweeps.tokens``, a
    ``Batcher`` in front of ``nodes_by_token``); the node comes back as a ``Record``
    with the columns of ``Node``."""
    if not authorization or not authorization.startswith("Bearer "):
        raise Unauthorized("a node token is needed: Authorization: Bearer <token>", {"scheme": "Bearer"},
                           headers={"WWW-Authenticate": 'Bearer realm="node"'})
    token = authorization[len("Bearer "):].strip()
    digest = token_hash(token)
    node = await sweeps.tokens(digest)
    if node is None or not hmac.compare_digest(node.token_hash, digest):
        raise Unauthorized("the node token is not valid", headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
    if node.revoked_at is not None:
        raise Forbidden("this node has been revoked", {"nodeId": node.id, "reason": node.revoked_reason})
    return node


_BY_TOKEN = select(NODES).where(NODES.c.token_hash.in_(bindparam("digests", expanding=True)))


async def nodes_by_token(db, digests: list[str]) -> list[Record | None]:
    """The nodes whose token hashes these are (None for an unknown one), in one read."""
    async with db.read() as s:
        found = {row.token_hash: record(row) for row in await s.execute(_BY_TOKEN, {"digests": sorted(set(digests))})}
    return [found.get(d) for d in digests]


def node_json(node: Node, *, private: bool = False) -> dict[str, Any]:
    out = {"nodeId": node.id, "name": node.name, "platform": node.platform, "gpu": node.gpu,
           "engineVersion": node.engine_version, "engineBuild": node.engine_build,
           "enrolledAt": tr.iso(node.enrolled_at), "lastSeenAt": tr.iso(node.last_seen_at),
           "trusted": node.trusted, "streak": node.streak, "validTotal": node.valid_total,
           "invalidTotal": node.invalid_total}
    if private:
        out["revokedAt"] = tr.iso(node.revoked_at)
        out["revokedReason"] = node.revoked_reason
    return out


async def list_nodes(db) -> list[Node]:
    async with db.read() as s:
        return list((await s.execute(select(Node).order_by(Node.enrolled_at, Node.id))).scalars())


async def revoke(db, node_id: str, reason: str, actor: str, max_failures: int) -> int:
    """Revoke a node and return its active leases to the queue (not counted as job failures).
    Returns how many leases were released."""
    return await retrying(lambda: _revoke(db, node_id, reason, actor, max_failures))


async def _revoke(db, node_id: str, reason: str, actor: str, max_failures: int) -> int:
    now = tr.utcnow()
    async with db.write() as s:
        node = await s.get(Node, node_id, with_for_update=for_update(db))
        if node is None:
            raise NotFound(f"no node {node_id}")
        logs = []
        if node.revoked_at is None:
            logs.append(tr.row("node", node.id, "trusted" if node.trusted else "untrusted", "revoked", actor,
                               reason, now))
            node.revoked_at, node.revoked_reason = now, reason
            node.trusted = False
        leases = list((await s.execute(select(SweepLease).where(
            SweepLease.node_id == node_id, SweepLease.state == tr.LEASE_ACTIVE).order_by(SweepLease.id))).scalars())
        for lease in leases:
            job = await s.get(SweepJob, lease.job_id, with_for_update=for_update(db))
            logs += await release(s, lease, job, tr.LEASE_CANCELLED, actor, f"node {node_id} revoked: {reason}",
                                  now, max_failures, count_failure=False)
        await tr.record(s, *logs)
        return len(leases)
