"""The token's folder on Windows (audit h13): a mode there sets only the read-only bit, so the token is as
private as its folder; the agent warns when that folder is outside the user's profile."""
from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from node_agent import cli, gpu, identity

PROFILE = {"USERPROFILE": r"C:\Users\Me"}


@pytest.mark.parametrize("folder", [r"C:\Users\Me\AppData\Local\sis-node", r"c:\users\me\sis",
                                    "C:/Users/Me/AppData/Local/sis-node"])
def test_a_folder_in_the_profile_is_not_warned(folder):
    assert identity.profile_warning(folder, PROFILE, "win32") is None


@pytest.mark.parametrize("folder", [r"D:\sis-node", r"C:\sis-node", r"C:\Users\Public\sis-node", r"C:\Users\Me2\x"])
def test_a_folder_outside_the_profile_is_warned(folder):
    why = identity.profile_warning(folder, PROFILE, "win32")
    assert why is not None and "outside your profile" in why and "icacls" in why


def test_nothing_to_say_elsewhere():
    assert identity.profile_warning("/srv/sis-node", PROFILE, "linux") is None
    assert identity.profile_warning(r"D:\sis-node", {}, "win32") is None


def test_run_warns_at_start(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("SIS_NODE_HOME", str(tmp_path))
    monkeypatch.setenv("USERPROFILE", r"C:\Users\Me")
    monkeypatch.setattr(identity, "sys", SimpleNamespace(platform="win32"))
    no_gpu = lambda: gpu.detect({"version": "2.5.0+cpu", "cuda": None, "devices": []},  # noqa: E731
                                {"absent": "x"}, {"absent": "y"}, {})
    args = cli.build_parser().parse_args(["run", "--coordinator", "http://127.0.0.1:9"])
    caplog.set_level(logging.WARNING, "sis.node")
    try:
        assert cli.cmd_run(args, engine_factory=lambda d: None, detect=no_gpu) == cli.EXIT_NO_GPU
    finally:
        for h in logging.getLogger("sis.node").handlers:
            h.close()
    assert "is outside your profile" in caplog.text
