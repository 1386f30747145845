"""Text and bytes as Windows reads and writes them unless told (audit h13), simulated on Linux: the locale's
ANSI code page (cp1252) for text without an encoding, LF written as CRLF in text mode, and os.open in
text mode unless given O_BINARY."""
from __future__ import annotations

import json
import os
import pathlib

import pytest

import sweep_engine
from node_agent import files
from sweep_engine import weights


@pytest.fixture
def windows_text(monkeypatch):
    real_read, real_write = pathlib.Path.read_text, pathlib.Path.write_text

    def read_text(self, encoding=None, errors=None):
        return real_read(self, encoding=encoding or "cp1252", errors=errors)

    def write_text(self, data, encoding=None, errors=None, newline=None):
        if newline is None:
            data = data.replace("\n", "\r\n")
        return real_write(self, data, encoding=encoding or "cp1252", errors=errors, newline="")
    monkeypatch.setattr(pathlib.Path, "read_text", read_text)
    monkeypatch.setattr(pathlib.Path, "write_text", write_text)


def _manifest(tmp_path):
    (tmp_path / "w.pt").write_bytes(b"\0weights")
    doc = {"manifestVersion": weights.MANIFEST_VERSION,
           "weights": [{"name": "dense", "file": "w.pt", "architecture": "dense/tiny",
                        "sha256": weights.sha256_bytes(b"\0weights"), "license": "CC BY 4.0",
                        "provenance": "trained in T\u014dky\u014d", "trained": True}]}
    path = tmp_path / "weights.json"
    path.write_bytes(json.dumps(doc, ensure_ascii=False).encode("utf-8"))
    return path


def test_a_weights_manifest_is_read_as_utf8(windows_text, tmp_path):
    path = _manifest(tmp_path)
    assert weights.read_manifest(path)["dense"].provenance == "trained in T\u014dky\u014d"
    assert sweep_engine.build_hash(path)


def test_a_pinned_manifest_is_written_the_same_on_every_system(windows_text, tmp_path):
    path = _manifest(tmp_path)
    (tmp_path / "seg.bin").write_bytes(b"seg")
    weights.pin(path, "segmenter", tmp_path / "seg.bin", "segformer/b0", license="MIT", provenance="\u2192 here")
    data = path.read_bytes()
    assert b"\r" not in data and json.loads(data.decode("utf-8"))["weights"][1]["provenance"] == "\u2192 here"


def test_durable_writes_are_binary(monkeypatch, tmp_path):
    """os.open without O_BINARY is a text-mode descriptor on Windows: os.write writes each LF as CRLF."""
    O_BINARY = 0x40000000
    monkeypatch.setattr(os, "O_BINARY", O_BINARY, raising=False)
    real_open, real_write = os.open, os.write
    text_mode: set[int] = set()

    def open_(path, flags, mode=0o777, *, dir_fd=None):
        fd = real_open(path, flags & ~O_BINARY, mode, dir_fd=dir_fd)
        if not flags & O_BINARY:
            text_mode.add(fd)
        return fd

    def write(fd, data):
        if fd in text_mode:
            n = real_write(fd, bytes(data).replace(b"\n", b"\r\n"))
            return min(n, len(data))
        return real_write(fd, data)
    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "write", write)
    files.write_atomic(tmp_path / "identity.json", b'{\n "token": "t"\n}')
    assert (tmp_path / "identity.json").read_bytes() == b'{\n "token": "t"\n}'
