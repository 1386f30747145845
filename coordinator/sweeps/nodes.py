"""Enrolled nodes: enrolment, bearer-token authentication, listing and revocation.

Bearer tokens (stored only as their SHA-256, and looked up on every request, so
that a revocation holds from the next one) are checked by ``tokens``.
"""
from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import select

from coordinator.core.db.models import Node, SweepJob, SweepLease
from coordinator.core.errors import NotFound
from coordinator.sweeps import transitions as tr
from coordinator.core.db.transactions import for_update, retrying
from coordinator.sweeps.leases import release
from coordinator.sweeps.records import Record
from coordinator.sweeps import tokens
from coordinator.sweeps.tokens import TOKEN_PREFIX, Bearer, bearer, token_hash  # noqa: F401  (the names this module always had)


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


async def authenticate(sweeps, authorization: str | None) -> Record:
    """The node a bearer token belongs to, looked up on every request (so a revocation holds
    from the next one). Lookups arriving together share one query (``sweeps.tokens``, a
    ``Batcher`` in front of ``nodes_by_token``); the node comes back as a ``Record``
    with the columns of ``Node``. Leases and results check their token in their own
    batch instead (``tokens``)."""
    presented = bearer(authorization)
    return tokens.admit(await sweeps.tokens(presented.digest), presented)


async def nodes_by_token(db, digests: list[str]) -> list[Record | None]:
    """The nodes whose token hashes these are (None for an unknown one), in one read."""
    async with db.read() as s:
        return await tokens.nodes_by_token(s, digests)


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
