"""Sweep engine: street photos in, georeferenced street facts out.

Public entry points (see ``docs/engine.md``):

- ``sweep_engine.pipeline.Engine(config).run_job(job, fetch=...)`` (async) -> ``schema.Result``
- ``sweep_engine.schema``: the wire types (pure Python; the coordinator imports only this)
- ``__version__`` and ``build_hash()``

Importing this package imports neither torch nor numpy.
"""
from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

__version__ = "0.1.0"

_HERE = Path(__file__).resolve().parent
BUILD_ID_FILE = _HERE / "BUILD_ID"


@functools.cache
def source_hash() -> str:
    """sha256 over the engine's own source files (path and bytes, in path order).

    The same sources name the same build on every system: paths are ordered by their
    '/'-separated parts, case-sensitively (a Windows path sorts case-insensitively), and
    CRLF line ends (a Windows checkout's) are read as LF. An LF-only tree hashes as it
    always did.

    A compiled build has no sources to read; the build writes ``BUILD_ID``
    beside this file with the hash computed from the sources it compiled.
    """
    if BUILD_ID_FILE.exists():
        return BUILD_ID_FILE.read_text(encoding="utf-8").strip()
    h = hashlib.sha256()
    for rel in sorted(path.relative_to(_HERE).parts for path in _HERE.rglob("*.py")):
        h.update("/".join(rel).encode() + b"\0")
        h.update(_HERE.joinpath(*rel).read_bytes().replace(b"\r\n", b"\n") + b"\0")
    return h.hexdigest()


def build_hash(weights_manifest: str | Path | None = None) -> str:
    """The engine build a result names: its source hash and, when given, the pinned weights.

    With a manifest, sha256 over the source hash and the manifest's (name,
    architecture, sha256) entries, so two nodes with the same code but other
    weights report different builds.
    """
    if weights_manifest is None:
        return source_hash()
    doc = json.loads(Path(weights_manifest).read_text(encoding="utf-8"))
    pins = sorted((w["name"], w["architecture"], w["sha256"]) for w in doc.get("weights", []))
    return hashlib.sha256(json.dumps([source_hash(), pins]).encode()).hexdigest()
