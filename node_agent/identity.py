"""The node's identity: generated on first run, enrolled once per coordinator, kept from other users.

The identity is an install id made here (so a volunteer can tell their
machines apart in the logs) plus what each coordinator hands out at enrolment:
a node id and a bearer token. The token is a secret: the file holding it is
created with mode 0600. On Windows a mode means nothing but the read-only bit
(``os.chmod``): the file takes the permissions of its folder. The default one,
``%LOCALAPPDATA%\\sis-node``, lies in the user's profile, which other users
cannot read (SYSTEM and administrators can); a ``SIS_NODE_HOME`` elsewhere
(``D:\\sis-node``) inherits its own folder's, often readable by every user of
the machine, and ``profile_warning`` says so at start (docs/node-agent.md,
Files, gives the ``icacls`` command that restricts it).

A node keeps one enrolment per coordinator, keyed by its URL normalised
(``normalise``), so pointing the agent at another coordinator, even once, and
coming back reuses the first enrolment: its node id, and the trust the
coordinator has built in it. (An identity file held one enrolment until then,
and a second coordinator's replaced it.) The file::

    {"installId", "name",
     "enrolments": {"<coordinator URL>": {"nodeId", "token", "enrolledAt"}, ...},
     "coordinator", "nodeId", "token", "enrolledAt"}     # the one used last

The top-level fields repeat the enrolment used last, as a file of a single
identity had them, so an older agent (after a downgrade) still finds it. A file
of a single identity is read as its one enrolment, and rewritten in the new
form in place the next time the agent starts.
"""
from __future__ import annotations

import logging
import os
import platform
import sys
from pathlib import PureWindowsPath
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .files import Unreadable, read_object, write_json

log = logging.getLogger("sis.node.identity")


@dataclass
class Identity:
    install_id: str
    name: str
    coordinator: str
    node_id: str | None = None
    token: str | None = None
    enrolled_at: float | None = None

    @property
    def enrolled(self) -> bool:
        return bool(self.node_id and self.token)

    def to_dict(self) -> dict[str, Any]:
        return {"installId": self.install_id, "name": self.name, "coordinator": self.coordinator,
                "nodeId": self.node_id, "token": self.token, "enrolledAt": self.enrolled_at}


def platform_text() -> str:
    return f"{platform.system()} {platform.release()} {platform.machine()}; Python {platform.python_version()}"


DEFAULT_PORTS = {"http": 80, "https": 443}


def normalise(url: str) -> str:
    """A coordinator URL as its enrolment is keyed: scheme and host in lower case, no default
    port, no trailing slash, no user info (never written or logged), no fragment.
    ``HTTPS://Sis.example.org:443/`` and ``https://sis.example.org`` are one coordinator,
    and share one enrolment."""
    text = (url or "").strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:      # not a URL the agent could use anyway: keyed as written
        return text.rstrip("/")
    if not parts.scheme or not parts.netloc:
        return text.rstrip("/")
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"          # IPv6
    if port is not None and port != DEFAULT_PORTS.get(scheme):
        host = f"{host}:{port}"
    return urlunsplit((scheme, host, parts.path.rstrip("/"), parts.query, ""))


ENROLMENT_KEYS = ("nodeId", "token", "enrolledAt")


class IdentityUnreadable(Exception):
    """The identity file exists and cannot be used. Never taken for a first run: a new identity
    written over it lost the node's enrolments (node ids, tokens, the coordinators' trust in
    it) for good. The message names the file and what the volunteer can do."""


def _read(path: Path) -> dict[str, Any] | None:
    """The identity file in the current form, in memory, or None before the first run: a file
    of one identity (before enrolments were kept per coordinator) gives its enrolment as the
    only one. ``IdentityUnreadable`` when the file exists and is not an identity."""
    return _read_both(path)[1]


def _read_both(path: Path) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the file's object as it is, the identity in the current form): ``_read``, with what
    ``save`` compares its new content to."""
    try:
        raw = read_object(path)
        doc = dict(raw) if raw is not None else None
        if doc is not None and not doc.get("installId"):
            raise Unreadable(f"{path} holds no installId")
    except Unreadable as exc:
        raise IdentityUnreadable(
            f"the node's identity file {exc}. It holds this node's enrolments, so sis-node does not start "
            f"over it as a new node: restore it from a backup, or move it away to start as a new node "
            f"(which enrols again)") from None
    if doc is None:
        return None, None
    enrolments = doc.get("enrolments")
    if not isinstance(enrolments, dict):
        enrolments = {}
        if doc.get("coordinator") and doc.get("nodeId"):
            enrolments[doc["coordinator"]] = {k: doc.get(k) for k in ENROLMENT_KEYS}
    doc["enrolments"] = {normalise(url): e for url, e in enrolments.items() if isinstance(e, dict)}
    doc["coordinator"] = normalise(doc.get("coordinator") or "")
    return raw, doc


def _identity(doc: dict[str, Any], coordinator: str) -> Identity:
    e = doc["enrolments"].get(coordinator) or {}
    return Identity(doc["installId"], doc.get("name") or socket.gethostname(), coordinator,
                    e.get("nodeId"), e.get("token"), e.get("enrolledAt"))


def load(path: Path, coordinator: str | None = None) -> Identity | None:
    """The identity for ``coordinator`` (by default the coordinator used last), or None before
    the first run. Not enrolled when this node has no enrolment there. ``IdentityUnreadable``
    when the file exists and is not an identity."""
    doc = _read(path)
    if doc is None:
        return None
    return _identity(doc, normalise(coordinator) if coordinator else doc["coordinator"])


def enrolments(path: Path) -> dict[str, str]:
    """Every coordinator this node is enrolled with, and its node id there."""
    doc = _read(path) or {"enrolments": {}}
    return {url: e["nodeId"] for url, e in doc["enrolments"].items() if e.get("nodeId") and e.get("token")}


LAST_USED_KEYS = ("coordinator", "nodeId", "token", "enrolledAt")


def save(path: Path, ident: Identity, last_used: bool = True) -> None:
    """Write ``ident`` as its coordinator's enrolment (dropped when it has none), and, when
    ``last_used``, as the one used last; every other coordinator's enrolment is kept. Not
    ``last_used``: the one used last stays as it was (none on a first run).

    The file is written only when its content changes: ``for_coordinator`` saves at every
    start, and rewriting the same content there failed on a full disk (``OSError``), which
    stopped an enrolled node whose spooled results, once sent, would have freed space."""
    raw, doc = _read_both(path)
    doc = doc or {"enrolments": {}}
    key = normalise(ident.coordinator)
    if ident.enrolled:
        doc["enrolments"][key] = {"nodeId": ident.node_id, "token": ident.token, "enrolledAt": ident.enrolled_at}
    else:
        doc["enrolments"].pop(key, None)
    if last_used:
        last = {"coordinator": key, "nodeId": ident.node_id, "token": ident.token, "enrolledAt": ident.enrolled_at}
    else:
        last = {k: doc.get(k) for k in LAST_USED_KEYS} | {"coordinator": doc.get("coordinator") or ""}
    out = {"installId": ident.install_id, "name": ident.name, "enrolments": doc["enrolments"], **last}
    if out != raw:
        write_json(path, out, mode=0o600)


def for_coordinator(path: Path, coordinator: str, name: str = "") -> Identity:
    """The identity for ``coordinator``: its enrolment when this node has one there (kept
    through any time spent with other coordinators), else one not yet enrolled. It becomes the
    coordinator used last only when this node is enrolled there (``enrolled`` makes it so once
    enrolment succeeds): a mistyped URL, whose enrolment fails, was kept as the one used last,
    and ``sis-node status`` said "not enrolled at <the typo>"."""
    key = normalise(coordinator)
    doc = _read(path)
    if doc is None:
        ident = Identity(uuid.uuid4().hex, name or socket.gethostname(), key)
        log.info("first run: new node identity %s", ident.install_id)
    else:
        ident = _identity(doc, key)
        last = doc["coordinator"]
        if last and last != key:
            if ident.enrolled:
                log.info("coordinator changed from %s to %s: this node's enrolment there (node %s) is used "
                         "again", last, key, ident.node_id)
            elif last in doc["enrolments"]:
                log.info("coordinator changed from %s to %s: this node enrols there (its enrolment with %s "
                         "is kept)", last, key, last)
        if name and name != ident.name:
            ident.name = name
    save(path, ident, last_used=ident.enrolled)
    return ident


def enrolled(path: Path, ident: Identity, node_id: str, token: str) -> Identity:
    ident.node_id, ident.token, ident.enrolled_at = node_id, token, time.time()
    save(path, ident)
    return ident


def forget_token(path: Path, ident: Identity) -> Identity:
    """The coordinator no longer knows the token (401): drop it so the next start enrols again
    there; enrolments with other coordinators stay."""
    ident.node_id = ident.token = ident.enrolled_at = None
    save(path, ident)
    return ident


def user_only(path: Path) -> bool:
    """True when no one but the owner can read ``path`` (always true on Windows, see above)."""
    if os.name == "nt":
        return True
    return (path.stat().st_mode & 0o077) == 0


def profile_warning(data_dir: str | os.PathLike[str], env: dict[str, str] | None = None,
                    system: str | None = None) -> str | None:
    """On Windows, what to tell a volunteer whose data folder (the token's) lies outside their
    profile: its permissions are that folder's, not the profile's; None elsewhere."""
    env = os.environ if env is None else env
    if not (system or sys.platform).startswith("win") or not env.get("USERPROFILE"):
        return None
    folder, profile = PureWindowsPath(data_dir), PureWindowsPath(env["USERPROFILE"])
    if folder == profile or profile in folder.parents:     # PureWindowsPath compares case-insensitively
        return None
    return (f"the data folder {folder} is outside your profile ({profile}): the node's token in it is as "
            f"readable as that folder is, by every user of this machine if its permissions allow; restrict it "
            f"(docs/node-agent.md, Files: icacls) or set SIS_NODE_HOME under your profile")

