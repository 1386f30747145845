"""Where the agent keeps its files, and its settings: one table, each with a default and a help line.

Files live in the platform's own places (XDG on Linux, Application Support on
macOS, %APPDATA% on Windows). ``SIS_NODE_HOME`` puts everything under one
folder instead, which tests and portable installs use.

Settings are read, lowest first: defaults, the config file (``node.toml`` in
the config folder), ``SIS_NODE_<NAME>`` environment variables, command-line
flags. The config file is plain TOML so a volunteer can edit it by hand.
"""
from __future__ import annotations

import difflib
import errno
import logging
import os
import sys
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .files import why_not_written

APP = "sis-node"
ENV_PREFIX = "SIS_NODE_"
# SIS_NODE_ variables read that are not settings: the agent's own (the folder, the enrolment
# secret, ``cli``), and the coordinator's settings named node_* (SIS_ + NODE_ENROL_SECRET, ...),
# set on a machine that runs both (the demo): an unknown SIS_NODE_ variable is warned of, as an
# unknown key of node.toml stops the run, and these are not unknown.
ENV_OTHERS = frozenset({"SIS_NODE_HOME", "SIS_NODE_ENROL_SECRET", "SIS_NODE_ENROL_PER_MINUTE",
                        "SIS_NODE_IP_PER_MINUTE", "SIS_NODE_PER_MINUTE"})
log = logging.getLogger("sis.node.config")
_warned_env: set[str] = set()      # each unknown variable warned of once a process
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclass(frozen=True)
class Paths:
    config_dir: Path
    data_dir: Path

    @property
    def config_file(self) -> Path:
        return self.config_dir / "node.toml"

    @property
    def identity_file(self) -> Path:
        return self.data_dir / "identity.json"

    @property
    def spool_dir(self) -> Path:
        return self.data_dir / "spool"

    @property
    def current_job_file(self) -> Path:
        return self.data_dir / "current-job.json"

    @property
    def ahead_job_file(self) -> Path:
        return self.data_dir / "ahead-job.json"

    @property
    def stats_file(self) -> Path:
        return self.data_dir / "contribution.json"

    @property
    def status_file(self) -> Path:
        return self.data_dir / "status.json"

    @property
    def pause_file(self) -> Path:
        return self.data_dir / "paused.json"

    @property
    def lock_file(self) -> Path:
        """Locked by the running agent (node_agent.lock): one agent per data folder."""
        return self.data_dir / "agent.lock"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    def ensure(self) -> "Paths":
        """Make the folders; ``ConfigError`` naming the one that cannot be made (a path under a
        regular file, /proc, no permission), which the commands print as one line, not a traceback."""
        for d in (self.config_dir, self.data_dir, self.spool_dir, self.log_dir):
            try:
                d.mkdir(parents=True, exist_ok=True, mode=0o700)
            except OSError as exc:
                raise ConfigError(f"the folder {d} cannot be made ({why_not_written(exc)})"
                                  + ("" if out_of_space(exc) else "; give SIS_NODE_HOME a folder this user can write")
                                  ) from None
        return self


def out_of_space(exc: OSError) -> bool:
    """Whether a write failed for want of space (a full disk, a quota): another folder is no answer."""
    return exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))


def paths(env: dict[str, str] | None = None, platform: str | None = None) -> Paths:
    """The platform's config and data folders for the agent (or ``SIS_NODE_HOME`` for both)."""
    env = os.environ if env is None else env
    platform = platform or sys.platform
    if env.get("SIS_NODE_HOME"):
        home = Path(env["SIS_NODE_HOME"]).expanduser()
        return Paths(home, home)
    user = Path(env.get("HOME") or env.get("USERPROFILE") or Path.home())
    if platform.startswith("win"):
        roaming = Path(env.get("APPDATA") or user / "AppData" / "Roaming")
        local = Path(env.get("LOCALAPPDATA") or user / "AppData" / "Local")
        return Paths(roaming / APP, local / APP)
    if platform == "darwin":
        base = user / "Library" / "Application Support" / APP
        return Paths(base, base)
    config = Path(env.get("XDG_CONFIG_HOME") or user / ".config") / APP
    data = Path(env.get("XDG_DATA_HOME") or user / ".local" / "share") / APP
    return Paths(config, data)


def _meta(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass
class Config:
    """Every setting of the agent. Names are the TOML keys; the env form is ``SIS_NODE_<NAME>``."""

    coordinator: str = _meta("", "Coordinator base URL, e.g. https://sis.example.org (the node protocol is under /node/v1).")
    name: str = _meta("", "A name for this node, shown to the coordinator's operators; empty means the host name.")
    gpus: str = _meta("all", "Which NVIDIA GPUs to use: 'all' or comma-separated CUDA indices such as '0,2'.")
    gpu_memory_fraction: float = _meta(0.8, "Largest share of each chosen GPU's memory the engine may take (0.05-1.0).")
    cpu_threads: int = _meta(1, "CPU threads the engine may use beside the GPU (GPU-only operation keeps "
                                   "this small); beyond the job's own, each measures photos' geometry in a process "
                                   "of its own, which on a GPU is most of a photo's time.")
    work_ahead: bool = _meta(True, "While the engine runs a job, lease the next one and fetch its photos, so the engine "
                                   "does not wait for the photo provider between jobs (one more job held at a time).")
    pause_when_user_active: bool = _meta(True, "Pause while the user is at the machine (keyboard or mouse used recently), where that can be detected.")
    user_idle_minutes: float = _meta(3.0, "Minutes without keyboard or mouse input after which the user counts as away.")
    pause_on_battery: bool = _meta(True, "Pause while the machine runs on battery.")
    cpu_busy_percent: float = _meta(70.0, "Pause while other programs keep the CPU busier than this (percent of all cores); 0 turns the check off.")
    heartbeat_interval_s: float = _meta(30.0, "Seconds between heartbeats while a job runs (they keep its lease alive).")
    backoff_base_s: float = _meta(2.0, "First retry delay when the coordinator cannot be reached; it doubles on each failure, with jitter.")
    backoff_max_s: float = _meta(300.0, "Longest retry delay when the coordinator cannot be reached.")
    idle_poll_s: float = _meta(30.0, "Seconds to wait before asking again when no job is waiting (the coordinator's Retry-After wins when given).")
    pause_poll_s: float = _meta(5.0, "Seconds between checks of the pause conditions while paused.")
    request_timeout_s: float = _meta(30.0, "Timeout of one request to the coordinator.")
    photo_timeout_s: float = _meta(30.0, "Timeout of one photo download from the street-photo provider.")
    photo_concurrency: int = _meta(4, "Photos of a job fetched at once from the street-photo provider (1-16): more "
                                      "keeps a fast GPU fed over a slow link; the provider serves every volunteer.")
    photo_max_bytes: int = _meta(25_000_000, "Largest photo the agent downloads; larger ones are skipped with their reason.")
    engine_failure_limit: int = _meta(3, "Jobs in a row the engine may fail (a broken GPU driver, missing weights, out of "
                                         "memory) before the agent pauses itself, saying why, until `sis-node resume`; "
                                         "0 never pauses.")
    engine_weights: str = _meta("", "Path of the sweep engine's weights manifest (JSON naming each weight file with its sha256); empty means the weights shipped inside the engine.")
    check_updates: bool = _meta(True, "Read the coordinator's signed node-app manifest and tell the volunteer when a newer version exists (never downloads it).")
    log_level: str = _meta("INFO", "Log level of the console and the log file (DEBUG, INFO, WARNING, ERROR).")
    log_max_bytes: int = _meta(5_000_000, "Size at which the log file is rotated.")
    log_backups: int = _meta(3, "Rotated log files kept.")

    @classmethod
    def help_table(cls) -> list[tuple[str, Any, str]]:
        return [(f.name, f.default, f.metadata["help"]) for f in fields(cls)]

    def gpu_indices(self) -> list[int] | None:
        """The chosen CUDA indices, or None for all."""
        text = self.gpus.strip().lower()
        if text in ("", "all"):
            return None
        try:
            return sorted({int(part) for part in text.split(",") if part.strip()})
        except ValueError:
            raise ConfigError(f"gpus: {self.gpus!r} is neither 'all' nor a list of GPU indices") from None

    def check(self) -> "Config":
        problems = []
        if not 0.05 <= self.gpu_memory_fraction <= 1.0:
            problems.append(f"gpu_memory_fraction: {self.gpu_memory_fraction} is outside 0.05-1.0")
        if self.engine_failure_limit < 0:
            problems.append("engine_failure_limit: must be 0 (never pause) or more")
        if self.cpu_threads < 1:
            problems.append("cpu_threads: must be at least 1")
        if not 1 <= self.photo_concurrency <= 16:
            problems.append(f"photo_concurrency: {self.photo_concurrency} is outside 1-16")
        for name in ("heartbeat_interval_s", "backoff_base_s", "backoff_max_s", "request_timeout_s",
                     "photo_timeout_s", "pause_poll_s"):
            if getattr(self, name) <= 0:
                problems.append(f"{name}: must be positive")
        if self.coordinator and not self.coordinator.lower().startswith(("http://", "https://")):  # schemes ignore case
            problems.append(f"coordinator: {self.coordinator!r} is not an http(s) URL")
        if self.log_level.upper() not in LOG_LEVELS:    # else logging raised "Unknown level" at start
            problems.append(f"log_level: {self.log_level!r} is not one of {', '.join(LOG_LEVELS)}")
        self.gpu_indices()
        if problems:
            raise ConfigError("; ".join(problems))
        return self


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it."""


def _coerce(name: str, kind: Any, value: Any) -> Any:
    kind = {"str": str, "int": int, "float": float, "bool": bool}.get(kind, kind) if isinstance(kind, str) else kind
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name}: {value!r} is not true or false")
    try:
        if kind is int and isinstance(value, float):
            raise ValueError
        return kind(value)
    except (TypeError, ValueError):
        what = {int: "a whole number", float: "a number"}.get(kind, f"a {kind.__name__}")
        raise ConfigError(f"{name}: {value!r} is not {what}") from None


def _read_file(path: Path) -> dict[str, Any]:
    """The settings in ``path``; ``ConfigError`` saying what is wrong with it, in words a
    volunteer on Windows can act on: Notepad saves UTF-16 or ANSI (a UnicodeDecodeError
    traceback) or UTF-8 with a BOM ("Invalid statement" at line 1, column 1), and a Windows
    path in double quotes is read as escapes ("Invalid hex value" for ``"C:\\Users"``)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8-sig")      # a BOM, which Windows editors write, is no setting
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text: save it as UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        why = str(exc)
        if "escape" in why.lower() or "hex value" in why.lower() or "unescaped" in why.lower():
            why += " (a Windows path in double quotes needs \\\\ or 'single quotes')"
        elif why.startswith("Invalid value"):     # coordinator = https://host, name = my node
            why += ' (text needs quotes: coordinator = "https://sis.example.org")'
        raise ConfigError(f"{path}: {why}") from None


def load(p: Paths, env: dict[str, str] | None = None, **overrides: Any) -> Config:
    """Defaults < config file < environment < overrides (flags; None means not given)."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    known = {f.name: f.type for f in fields(Config)}
    if p.config_file.exists():
        doc = _read_file(p.config_file)
        for key, value in doc.items():
            if key not in known:
                raise ConfigError(f"{p.config_file}: unknown setting {key!r}{_did_you_mean(key, known)}")
            values[key] = value
    _warn_unknown_env(env, known)
    for key in known:
        if ENV_PREFIX + key.upper() in env:
            values[key] = env[ENV_PREFIX + key.upper()]
    values.update({k: v for k, v in overrides.items() if v is not None})
    return Config(**{k: _coerce(k, known[k], v) for k, v in values.items()}).check()


def _did_you_mean(key: str, known: Any) -> str:
    found = difflib.get_close_matches(str(key).lower(), list(known), n=1)
    return f"; did you mean {found[0]!r}?" if found else ""


def _warn_unknown_env(env: Any, known: Any) -> None:
    """Warn, once, of a SIS_NODE_ variable that is no setting: the same typo in node.toml stops
    the run, and in the environment it was ignored without a word."""
    read = [ENV_PREFIX + k.upper() for k in known] + sorted(ENV_OTHERS)
    for name in sorted(k for k in env if isinstance(k, str) and k.startswith(ENV_PREFIX)):
        if name in read or name in _warned_env:
            continue
        _warned_env.add(name)
        # Matched without the prefix every name shares, which made any name look close to one.
        found = difflib.get_close_matches(name[len(ENV_PREFIX):], [r[len(ENV_PREFIX):] for r in read], n=1)
        found = [ENV_PREFIX + f for f in found]
        log.warning("the environment variable %s is not a sis-node setting and is ignored%s", name,
                    f"; did you mean {found[0]}?" if found else " (`sis-node settings` lists them)")


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def save_setting(p: Paths, key: str, value: Any) -> None:
    """Set one key in the config file, keeping the others (the file is rewritten whole)."""
    from .files import write_atomic

    doc: dict[str, Any] = {}
    if p.config_file.exists():
        doc = _read_file(p.config_file)
    doc[key] = value
    lines = ["# sis-node settings; see `sis-node settings` for every key, its default and meaning."]
    lines += [f"{k} = {_toml_value(v)}" for k, v in doc.items()]
    write_atomic(p.config_file, ("\n".join(lines) + "\n").encode())
