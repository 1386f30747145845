"""Published node-app manifests: read from the manifests folder, verified
against the public keys committed beside them, newest valid one served."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from sweep_engine import manifest as mf

log = logging.getLogger("sis.manifests")


@dataclass
class Published:
    envelope: dict
    verified: mf.Verified
    path: Path


def load_published(folder: Path) -> tuple[list[Published], list[str]]:
    """Every valid manifest in ``folder`` (newest version first) and the reasons others were refused.

    Trust follows rotations in version order, as an agent that saw every manifest would."""
    try:
        trusted = mf.TrustedKeys.from_dir(folder / "keys")
    except mf.ManifestError as exc:      # a threshold file that cannot be read: nothing can be trusted
        log.warning("manifest keys refused: %s", exc)
        return [], [str(exc)]
    envelopes = []
    refused: list[str] = []
    for path in sorted(folder.glob("node-app*.json")):
        try:
            env = json.loads(path.read_text())
            version = int(env["signed"]["version"])
        except (ValueError, KeyError, TypeError):
            refused.append(f"{path.name}: not a manifest envelope")
            continue
        envelopes.append((version, path, env))
    good: list[Published] = []
    for version, path, env in sorted(envelopes, key=lambda t: t[0]):
        try:
            v = mf.verify(env, trusted)
        except mf.ManifestError as exc:
            refused.append(f"{path.name}: {exc}")
            continue
        trusted = v.trusted_after
        good.append(Published(env, v, path))
    for r in refused:
        log.warning("manifest refused: %s", r)
    return sorted(good, key=lambda p: p.verified.signed["version"], reverse=True), refused


def published_engine_builds(folder: Path) -> set[str]:
    """Engine build hashes named by valid, unexpired manifests (what node results may claim)."""
    good, _ = load_published(folder)
    return {b for p in good if (b := (p.verified.signed.get("engine") or {}).get("build"))}
