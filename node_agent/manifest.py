"""Signed node-app manifests: verified offline against pinned public keys, never acted on.

The envelope is ``{"signed": {...}, "signatures": [{"keyid": ..., "sig": ...}]}``
(TUF-like). The signed bytes are the canonical JSON of ``signed``: keys
sorted, no spaces, UTF-8. A key id is the SHA-256 (hex) of the raw 32-byte
Ed25519 public key; a signature is base64 (hex is accepted too). One valid
signature by a pinned key is enough; signatures by unknown keys are ignored,
and a manifest signed by no pinned key is refused. ``signed.expires`` (ISO
8601) must be in the future.

Pinned keys are ``*.pub`` files in ``node_agent/keys/`` (PEM SubjectPublicKeyInfo,
or the raw key as 64 hex characters). The agent reads a verified manifest
only to tell the volunteer a newer version exists; it downloads nothing.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from . import __version__

log = logging.getLogger("sis.node.manifest")
KEYS_DIR = Path(__file__).resolve().parent / "keys"


class ManifestError(ValueError):
    """The manifest cannot be trusted; the message says why."""


def canonical(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def raw_key(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(key: Ed25519PublicKey) -> str:
    return hashlib.sha256(raw_key(key)).hexdigest()


def load_key(text: str) -> Ed25519PublicKey:
    text = text.strip()
    if text.startswith("-----BEGIN"):
        key = serialization.load_pem_public_key(text.encode())
        if not isinstance(key, Ed25519PublicKey):
            raise ManifestError("a pinned key is not an Ed25519 key")
        return key
    return Ed25519PublicKey.from_public_bytes(bytes.fromhex(text))


def pinned_keys(folder: Path = KEYS_DIR) -> dict[str, Ed25519PublicKey]:
    keys = {}
    for path in sorted(folder.glob("*.pub")):
        try:
            key = load_key(path.read_text(encoding="utf-8"))
        except (ValueError, ManifestError) as exc:
            log.error("pinned key %s cannot be read: %s", path.name, exc)
            continue
        keys[key_id(key)] = key
    return keys


def _sig_bytes(text: Any) -> bytes:
    if not isinstance(text, str):
        raise ValueError("not text")
    try:
        return bytes.fromhex(text) if len(text) == 128 else base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error):
        raise ValueError("neither base64 nor hex") from None


@dataclass
class Verified:
    signed: dict[str, Any]
    keyid: str


def verify(envelope: Any, keys: dict[str, Ed25519PublicKey], now: datetime | None = None) -> Verified:
    if not isinstance(envelope, dict) or not isinstance(envelope.get("signed"), dict) \
            or not isinstance(envelope.get("signatures"), list):
        raise ManifestError('not a signed manifest: expected {"signed": {...}, "signatures": [...]}')
    if not keys:
        raise ManifestError("no public key is pinned in this build, so no manifest can be trusted")
    body = canonical(envelope["signed"])
    unknown, bad = [], []
    for sig in envelope["signatures"]:
        kid = sig.get("keyid") if isinstance(sig, dict) else None
        key = keys.get(kid) if isinstance(kid, str) else None
        if key is None:
            unknown.append(str(kid))
            continue
        try:
            key.verify(_sig_bytes(sig.get("sig")), body)
        except (InvalidSignature, ValueError):
            bad.append(kid)
            continue
        signed = envelope["signed"]
        expires = signed.get("expires")
        try:
            when = datetime.fromisoformat(str(expires).replace("Z", "+00:00"))
        except ValueError:
            raise ManifestError(f"signed.expires {expires!r} is not an ISO 8601 time") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        if when <= (now or datetime.now(timezone.utc)):
            raise ManifestError(f"the manifest expired at {expires}")
        return Verified(signed, kid)
    if bad:
        raise ManifestError(f"the signature by pinned key {bad[0][:16]}… does not match the manifest: "
                            "it was altered after signing, or is damaged")
    raise ManifestError("signed by no pinned key (key ids: "
                        + (", ".join(k[:16] + "…" for k in unknown) or "none") + ")")


def _version_tuple(text: str) -> tuple[int, ...]:
    out = []
    for part in str(text).split("."):
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def newer_version(signed: dict[str, Any], current: str = __version__) -> str | None:
    """The manifest's version when it is newer than ``current``; else None."""
    version = signed.get("version")
    if isinstance(version, str) and _version_tuple(version) > _version_tuple(current):
        return version
    return None


async def update_notice(client, keys: dict[str, Ed25519PublicKey] | None = None) -> dict[str, Any] | None:
    """Ask the coordinator for its manifest; a notice when a verified newer version exists.
    Tells the volunteer only: nothing is downloaded."""
    from .protocol import ProtocolError

    try:
        envelope = await client.manifest()
    except ProtocolError as exc:
        log.debug("no node-app manifest from the coordinator (%s)", exc.message)
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
