"""Release tooling for node-app manifests: keys, signing, verification.

    python build/manifest.py keygen --private-out ~/.sis/release.key --public-dir manifests/keys
    python build/manifest.py sign --key ~/.sis/release.key [--key NEW.key] \
        --artefact build/out/sis-node-linux-x86_64 --platform linux --arch x86_64 \
        --version 3 --expires-days 180 --out manifests/node-app.json
    python build/manifest.py verify manifests/node-app.json [--keys manifests/keys]

Private keys never enter the repository: they are read from a file outside it
(or from the environment variable SIS_MANIFEST_KEY holding the PEM), and
``keygen`` refuses to write a private key inside the repository.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sweep_engine import manifest as mf  # noqa: E402

MIN_DRIVER = "535"


def _agent_version() -> str:
    from node_agent import __version__
    return __version__


def _inside_repo(path: Path) -> bool:
    try:
        path.resolve().relative_to(ROOT)
        return True
    except ValueError:
        return False


def cmd_keygen(a: argparse.Namespace) -> int:
    out = Path(a.private_out).expanduser()
    if _inside_repo(out):
        print(f"refusing to write a private key inside the repository ({out})", file=sys.stderr)
        return 2
    if out.exists():
        print(f"{out} exists; not overwriting a private key", file=sys.stderr)
        return 2
    key, kid = mf.generate_key()
    out.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(mf.private_to_pem(key))
    pub_dir = Path(a.public_dir)
    pub_dir.mkdir(parents=True, exist_ok=True)
    (pub_dir / f"{kid[:16]}.pub").write_text(mf.public_raw(key.public_key()).hex() + "\n")
    print(f"key {kid}\n  private: {out} (mode 600; keep it offline)\n  public:  {pub_dir / (kid[:16] + '.pub')}")
    return 0


def _load_keys(paths: list[str]) -> list:
    keys = [mf.private_from_pem(Path(p).expanduser().read_bytes()) for p in paths]
    if not keys and os.environ.get("SIS_MANIFEST_KEY"):
        keys = [mf.private_from_pem(os.environ["SIS_MANIFEST_KEY"].encode())]
    if not keys:
        raise SystemExit("no signing key: give --key FILE or set SIS_MANIFEST_KEY")
    return keys


def _carries(artefact: Path, sha: str) -> dict:
    """What a build carries (its weights and compute backends), from the record
    build/node_app.py wrote beside it, so that the coordinator's node_app answer can say it.
    A record of another file (a rebuild since) is refused rather than signed."""
    record_file = artefact.with_name(artefact.name + ".json")
    if not record_file.exists():
        print(f"note: no build record {record_file.name} beside the artefact: its weights and backends "
              "are not stated in the manifest", file=sys.stderr)
        return {}
    record = json.loads(record_file.read_text())
    if record.get("sha256") != sha:
        raise SystemExit(f"{record_file} describes another file (sha256 {str(record.get('sha256'))[:16]}…, "
                         f"not {sha[:16]}…): build again or remove the stale record")
    return {k: record[k] for k in ("weights", "backends", "without", "engineBuild") if k in record}


def cmd_sign(a: argparse.Namespace) -> int:
    keys = _load_keys(a.key)
    builds = []
    recorded = set()
    for art, plat, arch in zip(a.artefact, a.platform, a.arch):
        sha, size = mf.sha256_file(Path(art))
        build = {"platform": plat, "arch": arch, "file": Path(art).name, "size": size, "sha256": sha,
                 "requirements": {"gpu": "NVIDIA", "minDriver": a.min_driver}}
        carries = _carries(Path(art), sha)
        if "engineBuild" in carries:
            recorded.add(carries.pop("engineBuild"))
        build.update(carries)
        builds.append(build)
    if len(builds) != len(a.artefact):
        raise SystemExit("give one --platform and one --arch per --artefact")
    # The engine build is what a coordinator accepts results from (its nodes name it), so a
    # manifest without one would have every volunteer of these builds refused at enrolment.
    engine_build = a.engine_build or (recorded.pop() if len(recorded) == 1 else "")
    if not engine_build:
        raise SystemExit("no engine build: give --engine-build (the build a node of these artefacts names: "
                         "its sis-node --version prints it)" + (f"; the build records disagree: {sorted(recorded)}"
                                                                if len(recorded) > 1 else ", or sign beside "
                                                                "the build record build/node_app.py wrote"))
    if recorded and a.engine_build and a.engine_build not in recorded:
        raise SystemExit(f"--engine-build {a.engine_build[:16]}… is not the build recorded with the artefact "
                         f"({sorted(recorded)[0][:16]}…)")
    listed = mf.TrustedKeys({mf.key_id(k.public_key()): k.public_key() for k in keys})
    signed = {
        "_type": mf.MANIFEST_TYPE,
        "version": a.version,
        "agentVersion": a.agent_version,
        "expires": (datetime.now(timezone.utc) + timedelta(days=a.expires_days)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "engine": {"version": a.engine_version, "build": engine_build},
        "weights": {"sha256": a.weights_sha256},
        "builds": builds,
        "keys": listed.as_json(),
        "threshold": a.threshold,
    }
    env = mf.sign(signed, keys)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(env, indent=1, sort_keys=True) + "\n")
    print(f"wrote {a.out}: version {a.version}, {len(builds)} build(s), {len(keys)} signature(s)")
    return 0


def cmd_verify(a: argparse.Namespace) -> int:
    env = json.loads(Path(a.manifest).read_text())
    try:
        v = mf.verify(env, mf.TrustedKeys.from_dir(Path(a.keys)))
    except mf.ManifestError as exc:
        print(f"NOT VALID: {exc}", file=sys.stderr)
        return 1
    print(f"valid: version {v.signed['version']}, expires {v.signed['expires']}, signed by {sorted(v.signers)}"
          + (" (rotates trust to its listed keys)" if v.rotated else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Node-app manifest keys, signing and verification.")
    sub = p.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("keygen", help="make an Ed25519 signing key (private outside the repo, public in it)")
    k.add_argument("--private-out", required=True)
    k.add_argument("--public-dir", default=str(ROOT / "manifests" / "keys"))
    k.set_defaults(run=cmd_keygen)
    s = sub.add_parser("sign", help="write a signed manifest for built artefacts")
    s.add_argument("--key", action="append", default=[], help="private key PEM file (repeat to co-sign)")
    s.add_argument("--artefact", action="append", default=[], required=True)
    s.add_argument("--platform", action="append", default=[], required=True)
    s.add_argument("--arch", action="append", default=[], required=True)
    s.add_argument("--version", type=int, required=True)
    s.add_argument("--expires-days", type=int, default=180)
    s.add_argument("--agent-version", default=_agent_version(), help="sis-node version of the builds (default: this checkout's)")
    s.add_argument("--engine-version", default="")
    s.add_argument("--engine-build", default="",
                   help="the engine build nodes of these artefacts name (default: the build records')")
    s.add_argument("--weights-sha256", default="")
    s.add_argument("--min-driver", default=MIN_DRIVER)
    s.add_argument("--threshold", type=int, default=1)
    s.add_argument("--out", required=True)
    s.set_defaults(run=cmd_sign)
    v = sub.add_parser("verify", help="verify a manifest against the public keys")
    v.add_argument("manifest")
    v.add_argument("--keys", default=str(ROOT / "manifests" / "keys"))
    v.set_defaults(run=cmd_verify)
    a = p.parse_args(argv)
    return a.run(a)


if __name__ == "__main__":
    sys.exit(main())
