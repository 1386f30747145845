"""Signed node-app manifests: the envelope, canonical JSON, Ed25519 signing and
offline verification with pinned keys.

Shared by the release tooling (``build/manifest.py`` signs), the coordinator
(serves the newest manifest and reads its published engine builds) and the node
agent (verifies offline). Pure Python plus ``cryptography``; no torch.

Envelope (TUF-like)::

    {"signed": {"_type": "node-app", "version": 3, "expires": "2027-05-01T00:00:00Z",
                "engine": {"version": ..., "build": ...}, "weights": {"sha256": ...},
                "builds": [{"platform", "arch", "file", "size", "sha256", "requirements": {...}}],
                "keys": {"<keyid>": {"keytype": "ed25519", "public": "<hex>"}}, "threshold": 1},
     "signatures": [{"keyid": "<keyid>", "sig": "<hex>"}]}

What is signed is the canonical JSON of ``signed`` (sorted keys, no spaces,
UTF-8). A key id is the sha256 of the raw 32-byte public key, in hex.

Trust and rotation: a verifier holds trusted keys and a threshold (pinned in
the agent and in ``manifests/keys/``: ``*.pub`` files and, for more than one
signature, a ``threshold`` file). A manifest is valid when at least the
*verifier's* threshold of its trusted keys signed it, it has not expired, and
(when the verifier remembers one) its version is not older than the last one
accepted. The manifest's own ``signed.threshold`` is what it asks of the
manifests after it, never what it is checked against: were it read from the
manifest being checked, a thief of one of two keys would write threshold 1 and
sign alone. Rotation: a manifest signed by enough trusted (old) keys that lists
a new key in ``signed.keys`` and is also signed by that new key moves trust to
the keys it lists: the verifier then trusts exactly ``signed.keys``, with the
manifest's threshold. A key that is dropped from ``signed.keys`` is no longer
trusted after that.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

MANIFEST_TYPE = "node-app"


class ManifestError(Exception):
    """A manifest that must not be trusted; the message says why."""


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def public_raw(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(key: Ed25519PublicKey) -> str:
    return hashlib.sha256(public_raw(key)).hexdigest()


def public_from_hex(text: str) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(bytes.fromhex(text.strip()))


THRESHOLD_FILE = "threshold"


@dataclass(frozen=True)
class TrustedKeys:
    keys: dict[str, Ed25519PublicKey]
    threshold: int = 1    # trusted signatures a manifest needs: the trust root's, never the manifest's own

    @classmethod
    def from_hex(cls, hexes: Iterable[str], threshold: int = 1) -> "TrustedKeys":
        ks = [public_from_hex(h) for h in hexes]
        return cls({key_id(k): k for k in ks}, threshold)

    @classmethod
    def from_dir(cls, folder: Path) -> "TrustedKeys":
        """Public keys as ``*.pub`` files holding the hex of the raw key, and the ``threshold`` file's."""
        keys = cls.from_hex(p.read_text() for p in sorted(Path(folder).glob("*.pub"))).keys
        return cls(keys, pinned_threshold(Path(folder), len(keys)))

    def as_json(self) -> dict[str, dict[str, str]]:
        return {kid: {"keytype": "ed25519", "public": public_raw(k).hex()} for kid, k in sorted(self.keys.items())}


def pinned_threshold(folder: Path, n_keys: int) -> int:
    """The signatures a pinned folder's keys require: its ``threshold`` file (a whole number, at
    most the number of keys), or 1 without one."""
    path = folder / THRESHOLD_FILE
    if not path.exists():
        return 1
    text = path.read_text().strip()
    if not text.isdigit() or not 1 <= int(text) <= max(n_keys, 1):
        raise ManifestError(f"{path}: {text!r} is not a whole number from 1 to the {n_keys} pinned key(s)")
    return int(text)


def generate_key() -> tuple[Ed25519PrivateKey, str]:
    key = Ed25519PrivateKey.generate()
    return key, key_id(key.public_key())


def private_to_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def private_from_pem(data: bytes) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(data, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ManifestError("the private key is not an Ed25519 key")
    return key


def sign(signed: dict[str, Any], private_keys: Iterable[Ed25519PrivateKey]) -> dict[str, Any]:
    payload = canonical_json(signed)
    sigs = [{"keyid": key_id(k.public_key()), "sig": k.sign(payload).hex()} for k in private_keys]
    if not sigs:
        raise ManifestError("a manifest needs at least one signature")
    return {"signed": signed, "signatures": sigs}


def _parse_time(text: Any) -> datetime:
    if not isinstance(text, str):
        raise ManifestError("signed.expires is missing")
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ManifestError(f"signed.expires is not a time: {text!r}") from None
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def _valid_signers(envelope: dict[str, Any], candidates: dict[str, Ed25519PublicKey]) -> set[str]:
    payload = canonical_json(envelope["signed"])
    good = set()
    for s in envelope.get("signatures") or []:
        if not isinstance(s, dict):
            continue
        kid, sig = s.get("keyid"), s.get("sig")
        key = candidates.get(kid) if isinstance(kid, str) else None
        if key is None or not isinstance(sig, str):
            continue
        try:
            key.verify(bytes.fromhex(sig), payload)
        except (InvalidSignature, ValueError):
            continue
        good.add(kid)
    return good


@dataclass
class Verified:
    signed: dict[str, Any]
    signers: set[str]
    trusted_after: TrustedKeys   # the keys to trust from now on (changed by a rotation)
    rotated: bool


def verify(envelope: Any, trusted: TrustedKeys, *, now: datetime | None = None,
           min_version: int | None = None) -> Verified:
    """Check an envelope against trusted keys; raise ManifestError naming the fault."""
    if not isinstance(envelope, dict) or not isinstance(envelope.get("signed"), dict) \
            or not isinstance(envelope.get("signatures"), list):
        raise ManifestError("not a signed envelope: expected {signed: {...}, signatures: [...]}")
    signed = envelope["signed"]
    if signed.get("_type") != MANIFEST_TYPE:
        raise ManifestError(f"signed._type is {signed.get('_type')!r}, not {MANIFEST_TYPE!r}")
    version = signed.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ManifestError("signed.version must be a positive integer")
    threshold = signed.get("threshold", 1)   # what this manifest asks of the ones after it
    if not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 1:
        raise ManifestError("signed.threshold must be a positive integer")
    signers = _valid_signers(envelope, trusted.keys)
    if not signers:
        known = {s.get("keyid") for s in envelope["signatures"] if isinstance(s, dict)}
        if known & set(trusted.keys):
            raise ManifestError("bad signature: the manifest was altered after signing, or the signature is corrupt")
        raise ManifestError("signed by no trusted key (unknown key id)")
    if len(signers) < trusted.threshold:
        raise ManifestError(f"only {len(signers)} trusted signature(s); the threshold is {trusted.threshold}")
    now = now or datetime.now(timezone.utc)
    if _parse_time(signed.get("expires")) <= now:
        raise ManifestError(f"expired at {signed['expires']}")
    if min_version is not None and version < min_version:
        raise ManifestError(f"version {version} is older than the version {min_version} already accepted "
                            "(a rollback)")
    for b in signed.get("builds") or []:
        sha = b.get("sha256") if isinstance(b, dict) else None
        if not (isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)):
            raise ManifestError("every build needs a sha256 of 64 hex digits")

    after, rotated = trusted.keys, False
    listed = signed.get("keys")
    if isinstance(listed, dict) and listed:
        try:
            new = {kid: public_from_hex(v["public"]) for kid, v in listed.items()}
        except (KeyError, TypeError, ValueError):
            raise ManifestError("signed.keys holds a malformed key") from None
        if any(key_id(k) != kid for kid, k in new.items()):
            raise ManifestError("signed.keys: a key id does not match its key")
        if set(new) != set(trusted.keys):
            newcomers = set(new) - set(trusted.keys)
            if newcomers - _valid_signers(envelope, new):
                raise ManifestError("rotation refused: every new key must also sign the manifest")
            after, rotated = new, True
    if threshold > len(after):
        raise ManifestError(f"signed.threshold {threshold} is more than the {len(after)} key(s) trusted after it: "
                            "no later manifest could be valid")
    return Verified(signed, signers, TrustedKeys(after, threshold), rotated)


def sha256_file(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def verify_file_against(build: dict[str, Any], path: Path) -> None:
    """Check a downloaded artefact against its manifest entry (size and sha256)."""
    sha, size = sha256_file(path)
    if size != build.get("size"):
        raise ManifestError(f"{path.name}: size {size} does not match the manifest's {build.get('size')}")
    if sha != build.get("sha256"):
        raise ManifestError(f"{path.name}: sha256 {sha} does not match the manifest's {build.get('sha256')}")
