"""The coordinator's refusals in words a volunteer can act on.

A refusal that ends the agent (revoked) is the last thing a volunteer reads:
it says what was refused, why, and what to do, in one line. The coordinator's
own words stay in it.
"""
from __future__ import annotations


def revoked(coordinator: str, node_id: str | None, reason: str) -> str:
    """A revoked node: the operator's reason (``sis nodes revoke --reason``, "shown to the node")."""
    why = f': "{reason}"' if reason else " (they gave no reason)"
    return (f"this node{f' ({node_id})' if node_id else ''} was revoked by the operators of {coordinator}{why}. "
            f"It can do no more work there: ask them, or point this node at another coordinator")
