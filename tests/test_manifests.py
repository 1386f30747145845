"""Signed node-app manifests: each way a manifest can be wrong is refused as documented."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from sweep_engine import manifest as mf
from tests.support import make_settings, start_coordinator, stop_coordinator

ROOT = Path(__file__).resolve().parents[1]


def signed_doc(version: int = 1, days: int = 30, keys: list | None = None, sha: str = "ab" * 32) -> dict:
    doc = {"_type": "node-app", "version": version,
           "expires": (datetime.now(timezone.utc) + timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "engine": {"version": "0.1.0", "build": "e" * 64}, "weights": {"sha256": "f" * 64},
           "builds": [{"platform": "linux", "arch": "x86_64", "file": "sis-node", "size": 10, "sha256": sha,
                       "requirements": {"gpu": "NVIDIA", "minDriver": "535"}}],
           "threshold": 1}
    if keys is not None:
        doc["keys"] = mf.TrustedKeys({mf.key_id(k.public_key()): k.public_key() for k in keys}).as_json()
    return doc


@pytest.fixture
def old_key():
    return mf.generate_key()[0]


@pytest.fixture
def trusted(old_key):
    return mf.TrustedKeys({mf.key_id(old_key.public_key()): old_key.public_key()})


def test_a_good_manifest_verifies(old_key, trusted):
    v = mf.verify(mf.sign(signed_doc(keys=[old_key]), [old_key]), trusted)
    assert v.signers == set(trusted.keys) and not v.rotated


def test_tampered_manifest_is_refused(old_key, trusted):
    env = mf.sign(signed_doc(), [old_key])
    env["signed"]["builds"][0]["sha256"] = "cd" * 32
    with pytest.raises(mf.ManifestError, match="altered after signing"):
        mf.verify(env, trusted)


def test_expired_manifest_is_refused(old_key, trusted):
    with pytest.raises(mf.ManifestError, match="expired"):
        mf.verify(mf.sign(signed_doc(days=-1), [old_key]), trusted)


def test_unknown_key_is_refused(trusted):
    stranger = mf.generate_key()[0]
    with pytest.raises(mf.ManifestError, match="no trusted key"):
        mf.verify(mf.sign(signed_doc(), [stranger]), trusted)


def test_rollback_to_an_older_version_is_refused(old_key, trusted):
    with pytest.raises(mf.ManifestError, match="rollback"):
        mf.verify(mf.sign(signed_doc(version=2), [old_key]), trusted, min_version=3)


def test_malformed_build_hash_is_refused(old_key, trusted):
    with pytest.raises(mf.ManifestError, match="64 hex"):
        mf.verify(mf.sign(signed_doc(sha="xyz"), [old_key]), trusted)


def test_wrong_sha256_of_a_download_is_caught(tmp_path, old_key, trusted):
    art = tmp_path / "sis-node"
    art.write_bytes(b"0123456789")
    sha, size = mf.sha256_file(art)
    v = mf.verify(mf.sign(signed_doc(sha=sha), [old_key]), trusted)
    mf.verify_file_against(v.signed["builds"][0], art)         # the genuine file passes
    art.write_bytes(b"0123456780")                              # same size, other bytes
    with pytest.raises(mf.ManifestError, match="sha256"):
        mf.verify_file_against(v.signed["builds"][0], art)


def test_rotation_moves_trust_to_the_new_key(old_key, trusted):
    new_key = mf.generate_key()[0]
    # Signed by old and new, listing only the new key: trust moves.
    v = mf.verify(mf.sign(signed_doc(version=2, keys=[new_key]), [old_key, new_key]), trusted)
    assert v.rotated and set(v.trusted_after.keys) == {mf.key_id(new_key.public_key())}
    # Afterwards the new key alone is enough, and the old key alone is no longer trusted.
    mf.verify(mf.sign(signed_doc(version=3, keys=[new_key]), [new_key]), v.trusted_after)
    with pytest.raises(mf.ManifestError, match="no trusted key"):
        mf.verify(mf.sign(signed_doc(version=3, keys=[old_key]), [old_key]), v.trusted_after)


def test_rotation_without_the_new_keys_signature_is_refused(old_key, trusted):
    new_key = mf.generate_key()[0]
    with pytest.raises(mf.ManifestError, match="every new key must also sign"):
        mf.verify(mf.sign(signed_doc(version=2, keys=[new_key]), [old_key]), trusted)


def test_the_threshold_is_the_trust_roots_not_the_manifests_own(tmp_path, old_key):
    """Two pinned keys and threshold 2: a thief of one cannot sign alone by writing threshold 1,
    nor rotate the other key out; the two together may lower it for the manifests after."""
    other, thief = mf.generate_key()[0], mf.generate_key()[0]
    for i, k in enumerate((old_key, other)):
        (tmp_path / f"k{i}.pub").write_text(mf.public_raw(k.public_key()).hex())
    (tmp_path / "threshold").write_text("2\n")
    root = mf.TrustedKeys.from_dir(tmp_path)
    assert root.threshold == 2
    v1 = mf.verify(mf.sign({**signed_doc(keys=[old_key, other]), "threshold": 2}, [old_key, other]), root)
    assert v1.trusted_after.threshold == 2
    for trust in (root, v1.trusted_after):
        with pytest.raises(mf.ManifestError, match="only 1 trusted signature"):
            mf.verify(mf.sign(signed_doc(version=2), [old_key]), trust)               # it says threshold 1
        with pytest.raises(mf.ManifestError, match="only 1 trusted signature"):
            mf.verify(mf.sign({**signed_doc(version=2, keys=[old_key, thief])}, [old_key, thief]), trust)
    lowered = mf.verify(mf.sign(signed_doc(version=2, keys=[old_key, other]), [old_key, other]), v1.trusted_after)
    assert lowered.trusted_after.threshold == 1
    mf.verify(mf.sign(signed_doc(version=3), [other]), lowered.trusted_after)
    with pytest.raises(mf.ManifestError, match="more than the 2 key"):
        mf.verify(mf.sign({**signed_doc(version=2), "threshold": 3}, [old_key, other]), root)
    for bad in ("0", "3", "two"):
        (tmp_path / "threshold").write_text(bad)
        with pytest.raises(mf.ManifestError, match="not a whole number from 1 to the 2 pinned"):
            mf.TrustedKeys.from_dir(tmp_path)


def test_release_tool_keygen_sign_verify(tmp_path):
    tool = [sys.executable, str(ROOT / "build" / "manifest.py")]
    keys = tmp_path / "pub"
    priv = tmp_path / "secret" / "release.key"
    assert subprocess.run([*tool, "keygen", "--private-out", str(priv), "--public-dir", str(keys)]).returncode == 0
    assert (priv.stat().st_mode & 0o777) == 0o600
    refused = subprocess.run([*tool, "keygen", "--private-out", str(ROOT / "leak.key"), "--public-dir", str(keys)],
                             capture_output=True, text=True)
    assert refused.returncode == 2 and "inside the repository" in refused.stderr
    art = tmp_path / "sis-node-linux"
    art.write_bytes(b"binary")
    out = tmp_path / "node-app-1.json"
    sign = [*tool, "sign", "--key", str(priv), "--artefact", str(art), "--platform", "linux",
            "--arch", "x86_64", "--version", "1", "--out", str(out)]
    # No build record and no --engine-build: a manifest every volunteer would be refused under.
    r = subprocess.run(sign, capture_output=True, text=True)
    assert r.returncode != 0 and "no engine build" in r.stderr and not out.exists()
    r = subprocess.run([*sign, "--engine-build", "cd" * 32], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    ok = subprocess.run([*tool, "verify", str(out), "--keys", str(keys)], capture_output=True, text=True)
    assert ok.returncode == 0 and "valid: version 1" in ok.stdout
    env = json.loads(out.read_text())
    env["signed"]["version"] = 9
    out.write_text(json.dumps(env))
    bad = subprocess.run([*tool, "verify", str(out), "--keys", str(keys)], capture_output=True, text=True)
    assert bad.returncode == 1 and "NOT VALID" in bad.stderr


async def test_node_app_serves_the_newest_valid_manifest(tmp_path, sqlite_url, upstream, old_key):
    folder = tmp_path / "manifests"
    (folder / "keys").mkdir(parents=True)
    (folder / "keys" / "release.pub").write_text(mf.public_raw(old_key.public_key()).hex())
    c = await start_coordinator(make_settings(sqlite_url, upstream, manifests_dir=str(folder)))
    try:
        body = (await c.get("/earth/node-app")).json()
        assert body["published"] is False and body["caveats"][0].startswith("No signed node-app build")
        for v in (1, 2):
            (folder / f"node-app-{v}.json").write_text(json.dumps(mf.sign(signed_doc(version=v), [old_key])))
        forged = mf.sign(signed_doc(version=5), [mf.generate_key()[0]])
        (folder / "node-app-5.json").write_text(json.dumps(forged))
        r = await c.get("/earth/node-app")
        body = r.json()
        assert r.status == 200 and body["published"] is True and body["version"] == 2
        assert body["builds"][0]["sha256"] == "ab" * 32 and body["manifest"]["signatures"]
        assert any("failed verification" in cav for cav in body["caveats"])
        mf.verify(copy.deepcopy(body["manifest"]), mf.TrustedKeys.from_dir(folder / "keys"))
    finally:
        await stop_coordinator(c)


def test_signing_states_what_each_build_carries_from_its_record(tmp_path):
    """The build record beside an artefact (build/node_app.py) puts the build's weights and
    compute backends into its signed entry; a record of another file is refused, not signed."""
    tool = [sys.executable, str(ROOT / "build" / "manifest.py")]
    priv = tmp_path / "secret" / "release.key"
    assert subprocess.run([*tool, "keygen", "--private-out", str(priv), "--public-dir", str(tmp_path / "pub")],
                          capture_output=True).returncode == 0
    art = tmp_path / "sis-node-linux-x86_64"
    art.write_bytes(b"binary")
    sha, _ = mf.sha256_file(art)
    carries = {"weights": [{"name": "dense", "architecture": "sis-dense/x", "sha256": "ef" * 32, "trained": True,
                            "license": "Apache-2.0"}],
               "backends": {"torch": "2.15.0", "cpu": True, "cuda": "13.2", "cudnn": "9.26.0"}}
    record = art.with_name(art.name + ".json")
    sign = [*tool, "sign", "--key", str(priv), "--artefact", str(art), "--platform", "linux", "--arch", "x86_64",
            "--version", "1", "--out", str(tmp_path / "m.json")]
    record.write_text(json.dumps({"sha256": "00" * 32, **carries}))
    stale = subprocess.run(sign, capture_output=True, text=True)
    assert stale.returncode != 0 and "describes another file" in stale.stderr
    record.write_text(json.dumps({"sha256": sha, "engineBuild": "12" * 32, **carries}))
    assert subprocess.run(sign, capture_output=True, text=True).returncode == 0
    signed = json.loads((tmp_path / "m.json").read_text())["signed"]
    build = signed["builds"][0]
    assert build["weights"] == carries["weights"] and build["backends"] == carries["backends"]
    assert signed["engine"]["build"] == "12" * 32 and "engineBuild" not in build     # the record's, once
    other = subprocess.run([*sign, "--engine-build", "34" * 32], capture_output=True, text=True)
    assert other.returncode != 0 and "is not the build recorded" in other.stderr
