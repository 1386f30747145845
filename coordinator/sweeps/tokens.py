"""Node bearer tokens: what a request presents, and how it is checked.

A token is 32 random bytes shown once at enrolment; only its SHA-256 is stored.
A salted slow hash buys nothing for a random 256-bit secret (there is no
dictionary to slow down) and would cost every request a key derivation.

A token is looked up on every request, so a revocation holds from the next one.
Where the request writes anyway (a lease, a result), the lookup is one statement
of the claim or submit batch's own transaction (``leases.claim_batch``,
``results.submit_batch`` take a ``Bearer`` in place of a node). A read
transaction of its own for each batch of lookups cost about a fifth of the
coordinator's CPU per job in ``bench/queue.py`` over HTTP (2.6-2.9 against
2.0-2.2 ms on PostgreSQL, 2.8-3.0 against 2.3-2.6 ms on SQLite, alternating
runs on a shared 2-core machine). It also reads the node's trust in the
transaction that uses it. The other routes
look tokens up through ``Sweeps.tokens``, a ``Batcher`` of read transactions.
"""
from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select

from coordinator.core.errors import Forbidden, ServiceError, Unauthorized
from coordinator.sweeps.records import NODES, Record, record

TOKEN_PREFIX = "sisn_"
_SCHEME = "Bearer "


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Bearer:
    """The token a request presented, as its SHA-256 (what the database holds); not yet
    checked."""

    digest: str


def bearer(authorization: str | None) -> Bearer:
    """The token of an ``Authorization`` header; 401 when there is none."""
    if not authorization or not authorization.startswith(_SCHEME):
        raise Unauthorized("a node token is needed: Authorization: Bearer <token>", {"scheme": "Bearer"},
                           headers={"WWW-Authenticate": 'Bearer realm="node"'})
    return Bearer(token_hash(authorization[len(_SCHEME):].strip()))


def admit(node: Record | None, presented: Bearer) -> Record:
    """The node a looked-up token belongs to: 401 for a token nobody holds, 403 for a
    revoked node."""
    if node is None or not hmac.compare_digest(node.token_hash, presented.digest):
        raise Unauthorized("the node token is not valid", headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
    if node.revoked_at is not None:
        raise Forbidden("this node has been revoked", {"nodeId": node.id, "reason": node.revoked_reason})
    return node


_BY_TOKEN = select(NODES).where(NODES.c.token_hash.in_(bindparam("digests", expanding=True)))


async def nodes_by_token(s, digests: list[str]) -> list[Record | None]:
    """The nodes whose token hashes these are (None for an unknown one), in one statement
    of the session ``s``."""
    found = {row.token_hash: record(row) for row in await s.execute(_BY_TOKEN, {"digests": sorted(set(digests))})}
    return [found.get(d) for d in digests]


async def resolve(s, who: list[Any]) -> list[Any]:
    """Each of ``who`` as a node: a node stays as it is, a ``Bearer`` is looked up (all of
    them in one statement of ``s``) and becomes its node, or the ``ServiceError`` its
    request is to get."""
    presented = [w for w in who if isinstance(w, Bearer)]
    if not presented:
        return list(who)
    found = dict(zip((b.digest for b in presented), await nodes_by_token(s, [b.digest for b in presented])))
    out: list[Any] = []
    for w in who:
        if isinstance(w, Bearer):
            try:
                w = admit(found[w.digest], w)
            except ServiceError as exc:
                w = exc
        out.append(w)
    return out
