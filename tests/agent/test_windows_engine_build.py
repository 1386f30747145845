"""The engine build a checkout names is the same on Windows as on Linux: line ends and path order
(Windows-portability audit h13). Windows is simulated on Linux: CRLF files as Git for Windows checks
them out without .gitattributes, and path comparison case-insensitive as PureWindowsPath's."""
from __future__ import annotations

import hashlib
import pathlib
import shutil
import subprocess
from pathlib import Path

import pytest

import sweep_engine
from sweep_engine import weights

ROOT = Path(__file__).resolve().parents[2]


def _source_hash(monkeypatch, here: Path) -> str:
    monkeypatch.setattr(sweep_engine, "_HERE", here)
    monkeypatch.setattr(sweep_engine, "BUILD_ID_FILE", here / "BUILD_ID")
    return sweep_engine.source_hash.__wrapped__()


def _old_source_hash(here: Path) -> str:
    """The hash as it was computed before: Path order, raw bytes (what every LF tree must keep)."""
    h = hashlib.sha256()
    for path in sorted(here.rglob("*.py")):
        h.update(path.relative_to(here).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def _engine_copy(tmp_path: Path, crlf: bool) -> Path:
    here = tmp_path / ("crlf" if crlf else "lf")
    src = Path(sweep_engine.__file__).resolve().parent
    for f in src.rglob("*.py"):
        dst = here / f.relative_to(src)
        dst.parent.mkdir(parents=True, exist_ok=True)
        data = f.read_bytes()
        dst.write_bytes(data.replace(b"\n", b"\r\n") if crlf else data)
    return here


def _windows_order(monkeypatch):
    """Paths compare as on Windows: case-insensitively."""
    monkeypatch.setattr(pathlib.PurePath, "__lt__", lambda a, b: str(a).casefold() < str(b).casefold())
    monkeypatch.setattr(pathlib.PurePath, "__gt__", lambda a, b: str(a).casefold() > str(b).casefold())


def test_a_crlf_checkout_names_the_same_engine_build(monkeypatch, tmp_path):
    lf, crlf = _engine_copy(tmp_path, False), _engine_copy(tmp_path, True)
    assert _source_hash(monkeypatch, crlf) == _source_hash(monkeypatch, lf)


def test_an_lf_tree_hashes_as_it_always_did(monkeypatch, tmp_path):
    """Names whose Path order differs from their string order ('a.py' < 'a/x.py' as strings, after it as
    paths): the order stays Linux's Path order, so no build id of an existing tree changes."""
    lf = _engine_copy(tmp_path, False)
    for name in ("a.py", "a-b.py", "a/x.py", "A/y.py", "a_c.py", "Z.py"):
        (lf / name).parent.mkdir(parents=True, exist_ok=True)
        (lf / name).write_text(f"# {name}\n")
    assert _source_hash(monkeypatch, lf) == _old_source_hash(lf)


def test_path_order_does_not_depend_on_the_system(monkeypatch, tmp_path):
    lf = _engine_copy(tmp_path, False)
    (lf / "Zeta.py").write_text("z = 1\n")
    (lf / "alpha.py").write_text("a = 1\n")
    linux = _source_hash(monkeypatch, lf)
    _windows_order(monkeypatch)
    assert _source_hash(monkeypatch, lf) == linux


def test_a_weights_folder_pins_the_same_on_every_system(monkeypatch, tmp_path):
    folder = tmp_path / "segmenter"
    for name, data in (("Zeta.json", b"{}"), ("alpha.bin", b"\0\1"), ("sub/Config.json", b"[]"), ("sub/b", b"b")):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    linux = weights.sha256_dir(folder)
    _windows_order(monkeypatch)
    assert weights.sha256_dir(folder) == linux


def _tracked() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


def _attrs(paths: list[str]) -> dict[str, dict[str, str]]:
    out = subprocess.run(["git", "check-attr", "-z", "text", "eol", "--stdin"], cwd=ROOT, check=True,
                         input="\0".join(paths).encode(), capture_output=True).stdout.decode().split("\0")
    attrs: dict[str, dict[str, str]] = {}
    for path, attr, value in zip(out[0::3], out[1::3], out[2::3]):
        attrs.setdefault(path, {})[attr] = value
    return attrs


def test_git_checks_every_text_file_out_with_lf_and_leaves_binary_files_alone():
    """Git for Windows checks text out with CRLF unless .gitattributes says otherwise; a file with a NUL
    byte (a PNG, the shipped weights) must never be converted."""
    paths = _tracked()
    attrs = _attrs(paths)
    for p in paths:
        binary = b"\0" in (ROOT / p).read_bytes()[:8000]
        if binary:
            assert attrs[p]["text"] == "unset", f"{p} is binary and may be converted ({attrs[p]})"
        elif p.endswith(".py") or p.startswith("sweep_engine/"):
            assert attrs[p] == {"text": "auto", "eol": "lf"}, f"{p} may be checked out with CRLF ({attrs[p]})"
