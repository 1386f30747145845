"""The node's identity: generated on first run, enrolled once, kept readable by the user only.

The identity is an install id made here (so a volunteer can tell their
machines apart in the logs) plus what the coordinator hands out at enrolment:
a node id and a bearer token. The token is a secret: the file holding it is
created with mode 0600 (on Windows it lives in the user's own profile folder,
whose ACL already keeps other users out). An identity belongs to one
coordinator; pointing the agent at another enrols again.
"""
from __future__ import annotations

import logging
import os
import platform
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .files import read_json, write_json

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


def load(path: Path) -> Identity | None:
    doc = read_json(path)
    if not isinstance(doc, dict) or not doc.get("installId"):
        return None
    return Identity(doc["installId"], doc.get("name") or socket.gethostname(), doc.get("coordinator") or "",
                    doc.get("nodeId"), doc.get("token"), doc.get("enrolledAt"))


def save(path: Path, ident: Identity) -> None:
    write_json(path, ident.to_dict(), mode=0o600)


def for_coordinator(path: Path, coordinator: str, name: str = "") -> Identity:
    """The identity for ``coordinator``: the stored one, or a new one (not yet enrolled)."""
    coordinator = coordinator.rstrip("/")
    ident = load(path)
    if ident is None:
        ident = Identity(uuid.uuid4().hex, name or socket.gethostname(), coordinator)
        log.info("first run: new node identity %s", ident.install_id)
    elif ident.coordinator != coordinator:
        log.info("coordinator changed from %s to %s: this node enrols again", ident.coordinator, coordinator)
        ident = Identity(ident.install_id, name or ident.name, coordinator)
    elif name and name != ident.name:
        ident.name = name
    save(path, ident)
    return ident


def enrolled(path: Path, ident: Identity, node_id: str, token: str) -> Identity:
    ident.node_id, ident.token, ident.enrolled_at = node_id, token, time.time()
    save(path, ident)
    return ident


def forget_token(path: Path, ident: Identity) -> Identity:
    """The coordinator no longer knows the token (401): drop it so the next start enrols again."""
    ident.node_id = ident.token = ident.enrolled_at = None
    save(path, ident)
    return ident


def user_only(path: Path) -> bool:
    """True when no one but the owner can read ``path`` (always true on Windows, see above)."""
    if os.name == "nt":
        return True
    return (path.stat().st_mode & 0o077) == 0
