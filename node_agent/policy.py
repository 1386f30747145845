"""When the agent must leave the machine alone: the pause conditions.

- the volunteer said so (``sis-node pause``; a pause file, so it holds across restarts
  and reaches a running agent without a socket);
- the user is at the machine (no keyboard or mouse idle time above the threshold),
  where the platform lets us see it;
- the machine runs on battery;
- other programs keep the CPU busy.

Each probe is a plain callable so tests inject their own. A probe that cannot
see (no battery sensor, no idle-time source) answers None and never pauses;
``status`` says which conditions are watched. A probe that has seen and cannot
for a moment keeps its last answer (``Policy._read``), and the CPU probe answers
its last measured share between measurements (``OtherCpu``): the conditions are
checked several times in one turn, and a verdict must not flap between them.

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
from .files import Unreadable, read_object, remove, write_json

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
    """The reason of ``sis-node pause``, or None when not paused. The file's presence is the
    pause: one whose content cannot be read (``"y"``, ``[1]``: AttributeError in ``status``)
    still pauses, with the default reason and a warning."""
    try:
        doc = read_object(pause_file)
    except Unreadable as exc:
        log.warning("%s; paused all the same (`sis-node resume` lifts it)", exc)
        doc = {}
    if doc is None:
        return None
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
            # GetTickCount's DWORD is unsigned: without restype ctypes reads it as a C int, negative
            # after 24.9 days of uptime (an idle time below any threshold: paused for good). Both
            # counts wrap at 2**32 (49.7 days); the difference modulo 2**32 is right across a wrap.
            tick = ctypes.windll.kernel32.GetTickCount  # type: ignore[attr-defined]
            tick.restype = ctypes.c_uint32
            return ((tick() - info.dwTime) & 0xFFFFFFFF) / 1000.0
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


def _own_busy_s(me: psutil.Process) -> float:
    """CPU seconds of the agent: its own, its children's that ended, and those of its live
    child processes (the engine's geometry workers), which are the agent's load, not another
    program's: counted as other, they paused the agent on its own work."""
    t = me.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    try:
        children = me.children(recursive=True)
    except psutil.Error:
        children = []
    for child in children:
        try:
            ct = child.cpu_times()
        except psutil.Error:      # it ended between the listing and the reading
            continue
        total += ct.user + ct.system
    return total


class OtherCpu:
    """CPU use of every process but the agent's own (``_own_busy_s``: it and its children), as
    percent of all cores, over the last interval.

    A share is a rate, so it needs two samples at least ``interval_s`` apart (CPU time is
    counted in clock ticks, and a shorter span is mostly noise). The agent checks its pause
    conditions several times in one turn, milliseconds apart: a reading asked for inside the
    interval answers the share last measured, and keeps the interval's first sample, so the
    next measurement still spans the interval. Answering "no reading" there instead read as
    "not busy", and a CPU pause flapped off between two checks of one turn (the job held
    ahead given back, then the next one leased at once).

    The first sample is taken when the probe is made; the first reading, if asked for before
    the interval has passed, waits out the rest of it (at most ``interval_s``, once), so the
    agent's first lease too is decided on a measured share, never on "not busy" by default.
    """

    def __init__(self, system_busy_s: Callable[[], float] = _system_busy_s,
                 own_busy_s: Callable[[], float] | None = None, clock: Callable[[], float] = time.monotonic,
                 cores: int | None = None, interval_s: float = 0.5,
                 sleep: Callable[[float], None] = time.sleep):
        me = psutil.Process()
        self.system_busy_s = system_busy_s
        self.own_busy_s = own_busy_s or (lambda: _own_busy_s(me))
        self.clock = clock
        self.sleep = sleep
        self.cores = cores or psutil.cpu_count() or 1
        self.interval_s = interval_s
        self.since = self._sample()             # where the interval being measured began
        self.share: float | None = None         # the last share measured; None until one is

    def _sample(self) -> tuple[float, float]:
        return self.system_busy_s() - self.own_busy_s(), self.clock()

    def __call__(self) -> float | None:
        now = self._sample()
        if now[1] - self.since[1] < self.interval_s:
            if self.share is not None:
                return self.share
            self.sleep(self.interval_s - (now[1] - self.since[1]))
            now = self._sample()
            if now[1] - self.since[1] < self.interval_s:   # a clock that did not move (a test's)
                return None
        before, self.since = self.since, now
        self.share = min(100.0, max(0.0, 100.0 * (now[0] - before[0]) / ((now[1] - before[1]) * self.cores)))
        return self.share


# ---- the policy -------------------------------------------------------------------------

@dataclass
class Verdict:
    paused: bool
    reasons: list[str] = field(default_factory=list)
    watching: list[str] = field(default_factory=list)


BLIND_HOLD_S = 60.0   # how long a probe that saw, then cannot see, keeps its last answer


class Policy:
    def __init__(self, config: Config, pause_file: Path, *, idle: Probe | None = None,
                 battery: Probe | None = None, other_cpu: Probe | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.config = config
        self.pause_file = pause_file
        self.idle = idle or user_idle_seconds
        self.battery = battery or on_battery
        self.other_cpu = other_cpu or OtherCpu()
        self.clock = clock
        self._last: Verdict | None = None
        self._seen: dict[str, tuple[float | bool, float]] = {}   # probe -> (its last answer, when)

    def _read(self, name: str, probe: Probe) -> "float | bool | None":
        """``probe``'s answer. A probe that has answered and now cannot (``xprintidle`` or
        ``ioreg`` failing or timing out once, a battery reporting an unknown state while it
        switches) keeps its last answer for ``BLIND_HOLD_S``: a moment's blindness read as
        "all clear" lifted a pause between two checks of one turn, as "no CPU reading" did.
        A probe blind for longer (the session ended, the sensor is gone) is not watched."""
        value, now = probe(), self.clock()
        if value is not None:
            self._seen[name] = (value, now)
            return value
        seen = self._seen.get(name)
        if seen is not None and now - seen[1] <= BLIND_HOLD_S:
            return seen[0]
        self._seen.pop(name, None)
        return None

    def check(self) -> Verdict:
        c = self.config
        v = Verdict(False, watching=["pause flag (sis-node pause)"])
        manual = manual_pause(self.pause_file)
        if manual:
            v.reasons.append(manual)
        if c.pause_when_user_active:
            idle = self._read("idle", self.idle)
            if idle is not None:
                v.watching.append("user activity")
                if idle < c.user_idle_minutes * 60:
                    v.reasons.append(f"the user is active (input {idle:.0f} s ago)")
        if c.pause_on_battery:
            batt = self._read("battery", self.battery)
            if batt is not None:
                v.watching.append("battery")
                if batt:
                    v.reasons.append("the machine runs on battery")
        if c.cpu_busy_percent > 0:
            cpu = self._read("other_cpu", self.other_cpu)
            v.watching.append("CPU load of other programs")
            if cpu is not None and cpu > c.cpu_busy_percent:
                v.reasons.append(f"other programs use {cpu:.0f}% of the CPU (limit {c.cpu_busy_percent:.0f}%, "
                                 "cpu_busy_percent: SIS_NODE_CPU_BUSY_PERCENT=0 turns this check off)")
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
