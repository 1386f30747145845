"""When the agent must leave the machine alone: the pause conditions.

- the volunteer said so (``sis-node pause``; a pause file, so it holds across restarts
  and reaches a running agent without a socket);
- the user is at the machine (no keyboard or mouse idle time above the threshold),
  where the platform lets us see it;
- the machine runs on battery;
- other programs keep the CPU busy.

Each probe is a plain callable so tests inject their own. A probe that cannot
see (no battery sensor, no idle-time source) answers None and never pauses;
``status`` says which conditions are watched.

While any condition holds, no job is leased. A job already running finishes
(jobs are bounded: a few dozen photos) and its result is submitted; nothing
new starts until every condition clears.
"""
from __future__ import annotations

import ctypes
import logging
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil

from .config import Config
from .files import read_json, remove, write_json

log = logging.getLogger("sis.node.policy")

Probe = Callable[[], "float | bool | None"]


# ---- the manual pause -------------------------------------------------------------------

def set_paused(pause_file: Path, reason: str = "paused by the volunteer") -> None:
    write_json(pause_file, {"reason": reason, "since": time.time()})


def clear_paused(pause_file: Path) -> bool:
    existed = pause_file.exists()
    remove(pause_file)
    return existed


def manual_pause(pause_file: Path) -> str | None:
    if not pause_file.exists():
        return None
    doc = read_json(pause_file) or {}
    return str(doc.get("reason") or "paused by the volunteer")


# ---- platform probes --------------------------------------------------------------------

def user_idle_seconds() -> float | None:
    """Seconds since the last keyboard or mouse input, or None where it cannot be known."""
    try:
        if sys.platform.startswith("win"):
            class LASTINPUTINFO(ctypes.Structure):
                _fields_ = [("cbSize", ctypes.c_uint), ("dwTime", ctypes.c_uint)]
            info = LASTINPUTINFO()
            info.cbSize = ctypes.sizeof(info)
            if not ctypes.windll.user32.GetLastInputInfo(ctypes.byref(info)):  # type: ignore[attr-defined]
                return None
            return (ctypes.windll.kernel32.GetTickCount() - info.dwTime) / 1000.0  # type: ignore[attr-defined]
        if sys.platform == "darwin":
            out = subprocess.run(["ioreg", "-c", "IOHIDSystem"], capture_output=True, text=True, timeout=5).stdout
            for line in out.splitlines():
                if "HIDIdleTime" in line:
                    return int(line.rsplit("=", 1)[1].strip()) / 1e9
            return None
        if shutil.which("xprintidle"):  # X11 sessions with xprintidle installed
            out = subprocess.run(["xprintidle"], capture_output=True, text=True, timeout=5)
            if out.returncode == 0 and out.stdout.strip().isdigit():
                return int(out.stdout.strip()) / 1000.0
    except (OSError, ValueError, subprocess.SubprocessError, AttributeError):
        return None
    return None


def on_battery() -> bool | None:
    try:
        battery = psutil.sensors_battery()
    except (AttributeError, NotImplementedError, OSError):
        return None
    if battery is None or battery.power_plugged is None:
        return None
    return not battery.power_plugged


def _system_busy_s() -> float:
    t = psutil.cpu_times()
    return t.user + t.system + getattr(t, "nice", 0.0) + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


class OtherCpu:
    """CPU use of every process but this one, as percent of all cores, since the last call."""

    def __init__(self, system_busy_s: Callable[[], float] = _system_busy_s,
                 own_busy_s: Callable[[], float] | None = None, clock: Callable[[], float] = time.monotonic,
                 cores: int | None = None):
        me = psutil.Process()
        self.system_busy_s = system_busy_s
        self.own_busy_s = own_busy_s or (lambda: sum(me.cpu_times()[:2]))
        self.clock = clock
        self.cores = cores or psutil.cpu_count() or 1
        self.last: tuple[float, float] | None = None

    def __call__(self) -> float | None:
        now = (self.system_busy_s() - self.own_busy_s(), self.clock())
        before, self.last = self.last, now
        if before is None or now[1] - before[1] < 0.5:
            return None
        return min(100.0, max(0.0, 100.0 * (now[0] - before[0]) / ((now[1] - before[1]) * self.cores)))


# ---- the policy -------------------------------------------------------------------------

@dataclass
class Verdict:
    paused: bool
    reasons: list[str] = field(default_factory=list)
    watching: list[str] = field(default_factory=list)


class Policy:
    def __init__(self, config: Config, pause_file: Path, *, idle: Probe | None = None,
                 battery: Probe | None = None, other_cpu: Probe | None = None):
        self.config = config
        self.pause_file = pause_file
        self.idle = idle or user_idle_seconds
        self.battery = battery or on_battery
        self.other_cpu = other_cpu or OtherCpu()
        self._last: Verdict | None = None

    def check(self) -> Verdict:
        c = self.config
        v = Verdict(False, watching=["pause flag (sis-node pause)"])
        manual = manual_pause(self.pause_file)
        if manual:
            v.reasons.append(manual)
        if c.pause_when_user_active:
            idle = self.idle()
            if idle is not None:
                v.watching.append("user activity")
                if idle < c.user_idle_minutes * 60:
                    v.reasons.append(f"the user is active (input {idle:.0f} s ago)")
        if c.pause_on_battery:
            batt = self.battery()
            if batt is not None:
                v.watching.append("battery")
                if batt:
                    v.reasons.append("the machine runs on battery")
        if c.cpu_busy_percent > 0:
            cpu = self.other_cpu()
            v.watching.append("CPU load of other programs")
            if cpu is not None and cpu > c.cpu_busy_percent:
                v.reasons.append(f"other programs use {cpu:.0f}% of the CPU (limit {c.cpu_busy_percent:.0f}%)")
        v.paused = bool(v.reasons)
        if self._last is None or _gist(self._last.reasons) != _gist(v.reasons):
            if v.paused:
                log.info("paused: %s", "; ".join(v.reasons))
            elif self._last is not None and self._last.paused:
                log.info("resumed: no pause condition holds")
        self._last = v
        return v


def _gist(reasons: list[str]) -> list[str]:
    """Reasons without their changing figures, so the log says when the set changes, not every poll."""
    return [r.split(" (")[0].split(" use ")[0] for r in reasons]
