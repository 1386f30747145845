"""The coordinator's refusals in words a volunteer can act on.

A refusal that ends the agent (revoked, enrolment refused) is the last thing a
volunteer reads, often on their first day: it says what was refused, why, and
what to check, in one line. The coordinator's own words stay in it where they
say more than that (an operator's reason, a refusal without a hint here); a
404 at a path the URL made up ("no such path: /sis/node/v1/enrol") or the name
of a header ("X-Enrol-Secret") said nothing a volunteer could act on.
"""
from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from .protocol import PREFIX, Refused, revocation


class Fatal(Exception):
    """The agent cannot go on (revoked, engine build refused); the message says why. Here, with
    the words of the refusals that end the agent, so that each part of the agent can raise it."""


class BuildRefused(Fatal):
    """The coordinator no longer accepts this node's engine build: a new node-app release, or
    its operators withdrew the build. A stop, not a pause: the build changes only with a new
    node app, so nothing ``sis-node resume`` could lift would make its results acceptable;
    every job leased on would run on the volunteer's GPU for a result refused for good."""


def short_build(build: str) -> str:
    """An engine build as a volunteer reads it: ``sha256:`` and the first 12 hex digits."""
    kind, _, digest = build.rpartition(":")
    digest = digest or build
    return f"{kind + ':' if kind else ''}{digest[:12]}{'…' if len(digest) > 12 else ''}"


def build_withdrawn(coordinator: str, build: str) -> str:
    """This coordinator refused this node's engine build (a lease 403, or a result 422 naming it)."""
    return (f"{coordinator} no longer accepts this node's engine build ({short_build(build)}), so it gets no more "
            f"jobs there: download the current node app (its coordinator lists it at {base_of(coordinator)}"
            "/earth/node-app) and run that instead of this one")


def revoked(coordinator: str, node_id: str | None, reason: str) -> str:
    """A revoked node: the operator's reason (``sis nodes revoke --reason``, "shown to the node")."""
    why = f': "{reason}"' if reason else " (they gave no reason)"
    return (f"this node{f' ({node_id})' if node_id else ''} was revoked by the operators of {coordinator}{why}. "
            f"It can do no more work there: ask them, or point this node at another coordinator")


def base_of(url: str) -> str:
    """``url`` without its path: what a coordinator URL with a path (``…/node/v1``) most likely meant."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "", "", ""))


def enrolment_refused(coordinator: str, exc: Refused, secret_given: bool) -> str:
    """Why enrolment was refused, with what to check: a wrong path in the URL (404 or 405: no
    node protocol there), a missing or wrong enrolment secret (401), else the coordinator's words."""
    reason = revocation(exc)
    if reason is not None:
        return revoked(coordinator, None, reason)
    if exc.status in (404, 405):
        path = urlsplit(coordinator).path
        guess = f"; did you mean {base_of(coordinator)}?" if path.strip("/") else ""
        return (f"enrolment refused: {coordinator} has no node protocol (it answered {exc.status} at "
                f"{path.rstrip('/')}{PREFIX}/enrol): the coordinator URL is its base address, such as "
                f"https://sis.example.org, without {PREFIX} or any other path{guess}")
    if exc.status == 401:
        if secret_given:
            return (f"enrolment refused: {coordinator} did not take the enrolment secret given: check that the file "
                    "of --enrol-secret-file (or SIS_NODE_ENROL_SECRET) holds exactly the secret its operators gave")
        return (f"enrolment refused: {coordinator} takes only nodes with its enrolment secret: ask its operators for "
                "it, and give it with --enrol-secret-file FILE (or SIS_NODE_ENROL_SECRET)")
    return f"enrolment refused: {exc.message}"
