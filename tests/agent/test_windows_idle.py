"""The user's idle time on Windows (GetLastInputInfo, GetTickCount), simulated on Linux: ctypes.windll is
replaced by functions that answer as Windows does, through the restype the agent sets (audit h13)."""
from __future__ import annotations

import ctypes
import sys
import types

import pytest

from node_agent import policy
from node_agent.config import Config


def _fake_windll(tick_now_ms: int, last_input_ms: int):
    """GetTickCount answers a DWORD, read through whatever restype the caller set (ctypes' default is a
    C int); GetLastInputInfo writes dwTime, a DWORD, into the structure."""
    def get_last_input_info(ref):
        ref._obj.dwTime = last_input_ms & 0xFFFFFFFF
        return 1

    def get_tick_count():
        restype = getattr(get_tick_count, "restype", ctypes.c_int)
        return restype(tick_now_ms & 0xFFFFFFFF).value
    return types.SimpleNamespace(user32=types.SimpleNamespace(GetLastInputInfo=get_last_input_info),
                                 kernel32=types.SimpleNamespace(GetTickCount=get_tick_count))


@pytest.mark.parametrize("uptime_ms", [
    10 * 86400_000,            # 10 days up
    2**31 + 5_000,             # 24.9 days: the tick count past 2**31, the last input before it
    2**31 + 700_000,           # both past 2**31
    2**32 + 60_000,            # 49.7 days: the tick count wrapped since the last input
    2**32 - 1,                 # just before the wrap
])
def test_idle_seconds_past_24_9_days_of_uptime(monkeypatch, uptime_ms):
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(ctypes, "windll", _fake_windll(uptime_ms, uptime_ms - 600_000), raising=False)
    assert policy.user_idle_seconds() == pytest.approx(600.0)


def test_an_idle_machine_up_for_25_days_is_not_paused(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(ctypes, "windll", _fake_windll(2**31 + 3_600_000, 2**31 + 600_000), raising=False)
    v = policy.Policy(Config(), tmp_path / "paused.json", battery=lambda: None, other_cpu=lambda: 0.0).check()
    assert not v.paused, v.reasons
