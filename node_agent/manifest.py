"""Signed node-app manifests, as the agent sees them: verified offline against
the keys pinned in this build, and never acted on.

The format and the verification rules (canonical JSON, Ed25519, expiry,
rollback, key rotation) are ``sweep_engine.manifest``'s, the one implementation
the release tool and the coordinator use too; this module adds what is the
agent's own: where its pinned keys live, which agent version a manifest
announces (``signed.agentVersion``), and the notice it gives the volunteer.

Pinned keys are ``*.pub`` files in ``node_agent/keys/`` (the raw key as 64 hex
characters, as ``build/manifest.py keygen`` writes them, or PEM
SubjectPublicKeyInfo). The agent reads a verified manifest only to tell the
volunteer a newer version exists; it downloads nothing.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sweep_engine.manifest import ManifestError, TrustedKeys, Verified, canonical_json, key_id, pinned_threshold
from sweep_engine.manifest import verify as verify_envelope

from . import __version__

__all__ = ["KEYS_DIR", "ManifestError", "Verified", "canonical_json", "key_id", "load_key", "newer_version",
           "pinned_keys", "update_notice", "verify"]

log = logging.getLogger("sis.node.manifest")
KEYS_DIR = Path(__file__).resolve().parent / "keys"


def load_key(text: str) -> Ed25519PublicKey:
    text = text.strip()
    if text.startswith("-----BEGIN"):
        key = serialization.load_pem_public_key(text.encode())
        if not isinstance(key, Ed25519PublicKey):
            raise ManifestError("a pinned key is not an Ed25519 key")
        return key
    return Ed25519PublicKey.from_public_bytes(bytes.fromhex(text))


def pinned_keys(folder: Path = KEYS_DIR) -> TrustedKeys:
    keys = {}
    for path in sorted(folder.glob("*.pub")):
        try:
            key = load_key(path.read_text(encoding="utf-8"))
        except (ValueError, ManifestError) as exc:
            log.error("pinned key %s cannot be read: %s", path.name, exc)
            continue
        keys[key_id(key)] = key
    return TrustedKeys(keys, pinned_threshold(folder, len(keys)))


def verify(envelope: Any, keys: TrustedKeys | dict[str, Ed25519PublicKey], **kw: Any) -> Verified:
    if isinstance(keys, dict):
        keys = TrustedKeys(keys)
    if not keys.keys:
        raise ManifestError("no public key is pinned in this build, so no manifest can be trusted")
    return verify_envelope(envelope, keys, **kw)


def _version_tuple(text: str) -> tuple[int, ...]:
    out = []
    for part in str(text).split("."):
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def newer_version(signed: dict[str, Any], current: str = __version__) -> str | None:
    """The agent version a manifest announces, when it is newer than ``current``; else None."""
    version = signed.get("agentVersion")
    if isinstance(version, str) and _version_tuple(version) > _version_tuple(current):
        return version
    return None


async def update_notice(client, keys: TrustedKeys | None = None) -> dict[str, Any] | None:
    """Ask the coordinator for its manifest; a notice when a verified newer version exists.
    Tells the volunteer only: nothing is downloaded."""
    from .protocol import ProtocolError

    try:
        doc = await client.manifest()
    except ProtocolError as exc:
        log.debug("no node-app manifest from the coordinator (%s)", exc.message)
        return None
    # GET /earth/node-app wraps the envelope: {"published": bool, "manifest": envelope, ...}.
    envelope = doc.get("manifest") if isinstance(doc, dict) and "published" in doc else doc
    if envelope is None:
        log.debug("the coordinator has published no node-app manifest")
        return None
    try:
        verified = verify(envelope, pinned_keys() if keys is None else keys)
    except ManifestError as exc:
        log.warning("the coordinator's node-app manifest is not trusted: %s", exc)
        return None
    version = newer_version(verified.signed)
    if version is None:
        return None
    log.warning("a newer sis-node (%s; this is %s) is published; download it from the project's page. "
                "This agent never updates itself.", version, __version__)
    return {"version": version, "current": __version__}
