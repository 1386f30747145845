"""Model weights as files pinned in a manifest: sha256, license, provenance.

Manifest (JSON)::

    {"manifestVersion": 1,
     "weights": [{"name": "dense", "file": "dense.pt", "architecture": "resnet18",
                  "sha256": "...", "license": "...", "provenance": "...", "trained": false}, ...]}

``file`` is relative to the manifest.  Loading reads the file once into
memory, checks its sha256 against the manifest *before* unpickling anything,
then reads it with ``torch.load(weights_only=True)``.  ``file`` may also name a
folder (a ``transformers`` model folder: ``config.json`` and its weights),
pinned by ``sha256_dir`` and checked before the library reads it.  Nothing is ever fetched
from a hub.  Every failure is a ``WeightsError`` naming the file and the fault.
"""
from __future__ import annotations

import hashlib
import io
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

MANIFEST_VERSION = 1
REQUIRED = ("name", "file", "architecture", "sha256", "license", "provenance", "trained")


class WeightsError(RuntimeError):
    """Weights missing, mismatched or unreadable: the engine refuses to run on them."""


@dataclass(frozen=True)
class WeightsEntry:
    name: str
    file: str
    architecture: str
    sha256: str
    license: str
    provenance: str
    trained: bool


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_digest(path: str | Path) -> str:
    """sha256 of the manifest file: one figure pinning every weights file (the signed node-app
    manifest's ``weights.sha256``)."""
    return sha256_bytes(Path(path).read_bytes())


def read_manifest(path: str | Path) -> dict[str, WeightsEntry]:
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WeightsError(f"weights manifest {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise WeightsError(f"weights manifest {path} is unreadable: {exc}") from None
    if not isinstance(doc, dict) or doc.get("manifestVersion") != MANIFEST_VERSION:
        raise WeightsError(f"weights manifest {path}: manifestVersion must be {MANIFEST_VERSION}")
    entries = {}
    for i, item in enumerate(doc.get("weights") or []):
        missing = [k for k in REQUIRED if not isinstance(item, dict) or k not in item]
        if missing:
            raise WeightsError(f"weights manifest {path}: entry {i} lacks {', '.join(missing)}")
        entries[item["name"]] = WeightsEntry(**{k: item[k] for k in REQUIRED})
    return entries


def sha256_dir(path: str | Path) -> str:
    """sha256 pinning a directory of weights (a ``transformers`` model folder): the sha256 of the text made of one
    line ``<sha256 of the file>  <path relative to the folder, '/'-separated>`` per regular file, sorted by path
    (the output of ``sha256sum`` over the sorted files).  Hidden files and folders (``.cache`` ...) are left out.
    Paths are ordered by their parts, case-sensitively, on every system (a Windows path sorts case-insensitively),
    as a Linux path sorts."""
    path = Path(path)
    lines = []
    for parts in sorted(q.relative_to(path).parts for q in path.rglob("*") if q.is_file()):
        f, rel = path.joinpath(*parts), "/".join(parts)
        if any(part.startswith(".") for part in rel.split("/")):
            continue
        lines.append(f"{sha256_bytes(f.read_bytes())}  {rel}\n")
    return sha256_bytes("".join(lines).encode())


def _entry(manifest: str | Path, name: str, architecture: str) -> tuple[Path, WeightsEntry]:
    """The manifest's entry ``name`` and where its file or folder lies, refused unless it is
    for ``architecture``; nothing of the file is read here."""
    manifest = Path(manifest)
    entries = read_manifest(manifest)
    if name not in entries:
        raise WeightsError(f"weights manifest {manifest} has no entry for '{name}'")
    entry = entries[name]
    if entry.architecture != architecture:
        focal = re.compile(r"/f[\d.]+$")  # a dense network's depth trained for one focal length (models.py)
        hint = ("; the two differ in the focal length the depth was trained for: set dense_focal "
                "(SIS_ENGINE_DENSE_FOCAL; --canonical-focal when training) to the weights' /f value, or 0 where "
                "they have none"
                if focal.sub("", entry.architecture) == focal.sub("", architecture) else "")
        raise WeightsError(f"weights '{name}' are for {entry.architecture}, but the engine is configured "
                           f"for {architecture}{hint}")
    return manifest.parent / entry.file, entry


def verified_entry(manifest: str | Path, name: str, architecture: str) -> tuple[Path, WeightsEntry]:
    """The manifest's entry ``name``, for ``architecture``, and the path of its file or folder, checked against its
    pinned sha256 (a folder's by ``sha256_dir``).  For a folder loaded by a library: nothing in it has been read
    as code or tensors yet."""
    path, entry = _entry(manifest, name, architecture)
    if path.is_dir():
        digest = sha256_dir(path)
    elif path.exists():
        digest = sha256_bytes(path.read_bytes())
    else:
        raise WeightsError(f"weights file {path} does not exist")
    if digest != entry.sha256:
        raise WeightsError(f"weights {'folder' if path.is_dir() else 'file'} {path} has sha256 {digest}, "
                           f"the manifest pins {entry.sha256}: refusing it")
    return path, entry


def load_state_dict(manifest: str | Path, name: str, architecture: str) -> tuple[dict, WeightsEntry]:
    """The verified state dict of the manifest's entry ``name``, which must be for ``architecture``."""
    path, entry = _entry(manifest, name, architecture)
    if path.is_dir():
        raise WeightsError(f"weights '{name}' ({path}) are a folder; {architecture} reads one state-dict file")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise WeightsError(f"weights file {path} does not exist") from None
    digest = sha256_bytes(data)
    if digest != entry.sha256:
        raise WeightsError(f"weights file {path} has sha256 {digest}, the manifest pins {entry.sha256}: "
                           "refusing it")
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # a pickle that is not plain tensors is refused by weights_only
        raise WeightsError(f"weights file {path} is not a plain state dict: {exc}") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise WeightsError(f"weights file {path} is not a state dict of tensors")
    return state, entry


def _names(keys, limit: int = 8) -> str:
    keys = sorted(keys)
    return ", ".join(keys[:limit]) + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def key_mismatch(expected, found) -> str | None:
    """What differs between a model's state-dict keys and a file's, naming the keys; None when they agree."""
    missing, unexpected = set(expected) - set(found), set(found) - set(expected)
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing key(s): {_names(missing)}")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected key(s): {_names(unexpected)}")
    return "; ".join(parts) or None


def load_into(module: torch.nn.Module, manifest: str | Path, name: str, architecture: str,
              absent: tuple[str, ...] = ()) -> WeightsEntry:
    """Load the manifest's entry ``name`` into ``module``, refusing any other layout. ``absent``: key prefixes
    of parts the file may lack whole, left as the module has them (a fine-tune that adds a head to trained
    weights); a part the file has only some keys of is refused."""
    state, entry = load_state_dict(manifest, name, architecture)
    expected = list(module.state_dict())
    for prefix in absent:   # a part the file has whole or not at all: half a head is a broken file
        part = [k for k in expected if k.startswith(prefix)]
        if not any(k in state for k in part):
            expected = [k for k in expected if k not in part]
    mismatch = key_mismatch(expected, state.keys())
    if mismatch:
        raise WeightsError(f"weights '{name}' ({entry.file}) are not in the {architecture} layout: {mismatch}")
    try:
        module.load_state_dict(state, strict=not absent)
    except RuntimeError as exc:
        raise WeightsError(f"weights '{name}' do not fit the {architecture} model: {str(exc)[:400]}") from None
    return entry


def pin(manifest: str | Path, name: str, path: str | Path, architecture: str, *, license: str, provenance: str,
        trained: bool = True) -> WeightsEntry:
    """Add (or replace) the manifest's entry ``name`` for a file or folder an operator provides, pinned by its
    sha256 as it is now; the manifest is created when missing.  ``path`` is stored relative to the manifest."""
    manifest, path = Path(manifest).resolve(), Path(path).resolve()
    if not path.exists():
        raise WeightsError(f"weights {path} do not exist")
    doc = {"manifestVersion": MANIFEST_VERSION, "weights": []}
    if manifest.exists():
        read_manifest(manifest)  # refuses a malformed one before it is rewritten
        doc = json.loads(manifest.read_text(encoding="utf-8"))
    try:
        rel = path.relative_to(manifest.parent).as_posix()
    except ValueError:
        raise WeightsError(f"weights {path} must lie in the manifest's folder {manifest.parent} or below it") \
            from None
    digest = sha256_dir(path) if path.is_dir() else sha256_bytes(path.read_bytes())
    entry = WeightsEntry(name=name, file=rel, architecture=architecture, sha256=digest, license=license,
                         provenance=provenance, trained=trained)
    doc["weights"] = [w for w in doc["weights"] if w.get("name") != name] + [asdict(entry)]
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps(doc, indent=2), encoding="utf-8", newline="\n")
    return entry


def write_weights(out_dir: str | Path, modules: dict[str, tuple[torch.nn.Module, str]], *, provenance: str,
                  license: str, trained: bool) -> Path:
    """Save modules' weights and a manifest pinning them; returns the manifest's path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    for name, (module, architecture) in modules.items():
        buf = io.BytesIO()
        torch.save({k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}, buf)
        data = buf.getvalue()
        (out_dir / f"{name}.pt").write_bytes(data)
        entries.append(asdict(WeightsEntry(name=name, file=f"{name}.pt", architecture=architecture,
                                           sha256=sha256_bytes(data), license=license, provenance=provenance,
                                           trained=trained)))
    path = out_dir / "weights.json"
    path.write_text(json.dumps({"manifestVersion": MANIFEST_VERSION, "weights": entries}, indent=2), encoding="utf-8",
                    newline="\n")
    return path
