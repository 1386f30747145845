"""Signed node-app manifests: verified against pinned keys; tampered or unknown-key ones refused."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node_agent import cli, manifest
from node_agent.protocol import Client


def _sign(signed: dict, key: Ed25519PrivateKey) -> dict:
    sig = key.sign(manifest.canonical_json(signed))
    return {"signed": signed, "signatures": [{"keyid": manifest.key_id(key.public_key()), "sig": sig.hex()}]}


def _signed(version: str = "0.2.0", days: int = 30) -> dict:
    return {"_type": "node-app", "version": 1, "agentVersion": version,
            "expires": (datetime.now(timezone.utc) + timedelta(days=days)).isoformat(),
            "builds": [{"platform": "linux", "arch": "x86_64", "file": "sis-node", "size": 1, "sha256": "ab" * 32}]}


@pytest.fixture
def keys(tmp_path):
    key = Ed25519PrivateKey.generate()
    folder = tmp_path / "keys"
    folder.mkdir()
    (folder / "release.pub").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return key, folder


def test_a_manifest_signed_by_a_pinned_key_verifies(keys):
    key, folder = keys
    v = manifest.verify(_sign(_signed(), key), manifest.pinned_keys(folder))
    assert v.signed["agentVersion"] == "0.2.0" and manifest.newer_version(v.signed) == "0.2.0"


def test_a_tampered_manifest_is_refused(keys):
    key, folder = keys
    env = _sign(_signed(), key)
    env["signed"]["builds"][0]["sha256"] = "cd" * 32
    with pytest.raises(manifest.ManifestError, match="altered after signing"):
        manifest.verify(env, manifest.pinned_keys(folder))


def test_a_manifest_signed_by_an_unknown_key_is_refused(keys):
    _, folder = keys
    with pytest.raises(manifest.ManifestError, match="signed by no trusted key"):
        manifest.verify(_sign(_signed(), Ed25519PrivateKey.generate()), manifest.pinned_keys(folder))


def test_an_expired_manifest_is_refused(keys):
    key, folder = keys
    with pytest.raises(manifest.ManifestError, match="expired"):
        manifest.verify(_sign(_signed(days=-1), key), manifest.pinned_keys(folder))


def test_with_no_key_pinned_nothing_is_trusted(keys):
    key, _ = keys
    with pytest.raises(manifest.ManifestError, match="no public key is pinned"):
        manifest.verify(_sign(_signed(), key), {})


def test_verify_manifest_command_answers_with_its_exit_status(keys, tmp_path, capsys):
    key, folder = keys
    good = tmp_path / "m.json"
    good.write_text(json.dumps(_sign(_signed(), key)))
    assert cli.main(["verify-manifest", str(good), "--keys", str(folder)]) == 0
    assert "verified: signed by pinned key" in capsys.readouterr().out
    env = _sign(_signed(), key)
    env["signed"]["version"] = "9.9.9"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(env))
    assert cli.main(["verify-manifest", str(bad), "--keys", str(folder)]) == 1
    assert "not verified" in capsys.readouterr().err
    assert cli.main(["verify-manifest", str(good)]) == 1  # the built-in folder pins no key yet
    assert "no public key is pinned" in capsys.readouterr().err


def test_verify_manifest_names_a_key_folder_that_is_missing_or_holds_no_key(keys, tmp_path, capsys):
    """--keys /nonexistent answered "no public key is pinned in this build"."""
    key, _ = keys
    good = tmp_path / "m.json"
    good.write_text(json.dumps(_sign(_signed(), key)))
    empty = tmp_path / "empty"
    empty.mkdir()
    for folder, why in ((tmp_path / "nonexistent", "does not exist"), (good, "is not a folder"),
                        (empty, "holds no readable *.pub key")):
        assert cli.main(["verify-manifest", str(good), "--keys", str(folder)]) == 1
        err = capsys.readouterr().err
        assert err == f"not verified: the key folder {folder} {why}\n" and "pinned in this build" not in err


async def test_update_notice_only_for_a_verified_newer_version(keys):
    key, folder = keys

    class FakeClient(Client):
        def __init__(self, doc):
            self.doc = doc

        async def manifest(self):
            return self.doc
    pinned = manifest.pinned_keys(folder)
    assert await manifest.update_notice(FakeClient(_sign(_signed("0.2.0"), key)), pinned) == {
        "version": "0.2.0", "current": "0.1.0"}
    assert await manifest.update_notice(FakeClient(_sign(_signed("0.1.0"), key)), pinned) is None
    forged = _sign(_signed("0.3.0"), Ed25519PrivateKey.generate())
    assert await manifest.update_notice(FakeClient(forged), pinned) is None


async def test_a_coordinator_without_a_manifest_gives_no_notice_and_no_error(coord):
    async with Client(coord.base_url) as client:
        assert await manifest.update_notice(client) is None
