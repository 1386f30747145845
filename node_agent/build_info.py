"""What this agent build carries: its engine build, the weights it runs unless told
otherwise, and the compute backends its torch was built with.

A volunteer (and the coordinator's ``node_app`` answer, through the signed manifest) should
be able to tell one download from another without running a job: ``sis-node --version``
prints this. A compiled binary reads it from ``BUILD_INFO.json``, which
``build/node_app.py`` writes into this package from the environment it compiles, so the
answer is what was built, and costs no ``import torch``; a checkout works it out.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import __version__

BUILD_INFO_FILE = Path(__file__).resolve().parent / "BUILD_INFO.json"


def weights(manifest: str | Path | None = None) -> list[dict[str, Any]]:
    """The pinned weights of a manifest (the shipped ones by default): each slot's name,
    architecture, sha256, whether it was trained, and its license."""
    from sweep_engine.config import DEFAULT_WEIGHTS_MANIFEST

    doc = json.loads(Path(manifest or DEFAULT_WEIGHTS_MANIFEST).read_text(encoding="utf-8"))
    return [{"name": w["name"], "architecture": w["architecture"], "sha256": w["sha256"],
             "trained": bool(w.get("trained")), "license": w.get("license", "")} for w in doc.get("weights", [])]


def backends() -> dict[str, Any]:
    """The compute backends of the torch in this environment: always the CPU; CUDA and
    cuDNN with the versions torch was built against, or null for a CPU-only torch.
    Whether this machine has a GPU to use them is ``sis-node gpus``' question."""
    import torch

    cudnn = torch.backends.cudnn.version() if torch.version.cuda else None
    return {"torch": torch.__version__, "cpu": True, "cuda": torch.version.cuda,
            "cudnn": f"{cudnn // 10000}.{cudnn // 100 % 100}.{cudnn % 100}" if cudnn else None}


def collect() -> dict[str, Any]:
    """Worked out from this environment (what the build writes into BUILD_INFO.json).

    ``engine.build`` is the build a node names in its enrolment and results (its sources and
    its shipped weights together, ``sweep_engine.build_hash`` of the weights manifest): what a
    coordinator must accept (a signed manifest's engine build, or ``SIS_ENGINE_BUILDS``).
    ``engine.source`` is the hash of the sources alone, which a compiled build writes into
    ``sweep_engine/BUILD_ID`` since it has no sources to hash."""
    import sweep_engine
    from sweep_engine.config import DEFAULT_WEIGHTS_MANIFEST

    return {"agentVersion": __version__,
            "engine": {"version": sweep_engine.__version__,
                       "build": sweep_engine.build_hash(DEFAULT_WEIGHTS_MANIFEST),
                       "source": sweep_engine.build_hash()},
            "weights": weights(), "backends": backends()}


def current() -> dict[str, Any]:
    """This build's: from BUILD_INFO.json in a compiled binary, else worked out."""
    if BUILD_INFO_FILE.exists():
        return json.loads(BUILD_INFO_FILE.read_text(encoding="utf-8"))
    return collect()


def describe(info: dict[str, Any]) -> str:
    """The lines ``sis-node --version`` prints."""
    b = info["backends"]
    gpu = (f"NVIDIA CUDA {b['cuda']}" + (f" with cuDNN {b['cudnn']}" if b.get("cudnn") else "")) if b.get("cuda") \
        else "no GPU backend (a CPU-only build)"
    lines = [f"sis-node {info['agentVersion']}",
             f"engine {info['engine']['version']}, build {info['engine']['build']}",
             f"backends: CPU; {gpu} (torch {b['torch']})",
             "weights:"]
    for w in info["weights"]:
        lines.append(f"  {w['name']}: {w['architecture']}, sha256 {w['sha256'][:16]}"
                     + ("" if w["trained"] else " (untrained)"))
    lines += [f"without: {what}" for what in info.get("without", [])]
    return "\n".join(lines)
