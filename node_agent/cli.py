"""The ``sis-node`` command: run the agent, see what it has done, pause it, check a manifest."""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import logging
import logging.handlers
import os
import signal
import stat
import sys
import time
from pathlib import Path
from typing import Any, Callable

from . import __version__
from . import config as config_mod
from . import gpu as gpu_mod
from . import identity as ident_mod
from .contribution import Contribution, summary
from .files import why_not_written
from .lock import AlreadyRunning, DataLock
from .policy import Policy, clear_paused, manual_pause, set_paused
from .progress import StatusFile, bar

EXIT_NO_GPU = 3
EXIT_CONFIG = 2
EXIT_RUNNING = 4    # another agent runs with this data folder (node_agent.lock)
EXIT_UNSENT = 5     # run --max-jobs N ended with a result not acknowledged (node_agent.loop.EXIT_UNSENT)

log = logging.getLogger("sis.node")


# The agent's own loggers, and the engine's it runs (a photo whose measurement failed, its geometry workers).
LOGGERS = ("sis.node", "sweep_engine")


class RotatingLog(logging.handlers.RotatingFileHandler):
    """A rotating log file whose rollover may fail without losing a record.

    On Windows the log file, or a backup, cannot be renamed or deleted while another process
    holds it open (a `type`, an editor, a tail tool, Python's own open()): PermissionError.
    The standard handler then lost that record and every later one, each with a
    "--- Logging error ---" on stderr. Here a failed rollover is said once in the file, the
    records go on into the current file (past ``maxBytes``), and the rollover is tried again
    ``retry_s`` later.

    A record that cannot be written (a full disk, the file refused) printed a 14-line
    "--- Logging error ---" on the console, each record again. Here the first is said in one
    line on the console, the records are dropped from the file (they are on the console)
    until a write succeeds, and that is said on the console and in the file."""

    retry_s = 60.0

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._retry_at = 0.0
        self._unwritable = False    # a write failed, said once; records dropped from the file since
        self._erred = False         # the record being emitted failed

    def emit(self, record: logging.LogRecord) -> None:
        self._erred = False
        super().emit(record)
        if self._unwritable and not self._erred:
            self._unwritable = False
            _console(f"sis-node: the log file {self.baseFilename} is written again")
            self._note(logging.INFO, "the log file could not be written for a while: the records of that time "
                                     "were on the console only")

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            super().handleError(record)
            return
        self._erred = True
        if self.stream is not None:
            # What the stream holds unwritten would be written later, part of a record perhaps:
            # dropped with it. The next record opens the file again.
            with contextlib.suppress(OSError, ValueError):
                self.stream.close()
            self.stream = None      # type: ignore[assignment]
        if not self._unwritable:
            self._unwritable = True
            _console(f"sis-node: the log file {self.baseFilename} cannot be written ({why_not_written(exc)}); "
                     f"logging to the console only until it can")

    def _note(self, level: int, msg: str, *args: Any) -> None:
        logging.FileHandler.emit(self, logging.LogRecord("sis.node", level, __file__, 0, msg, args, None))

    def shouldRollover(self, record: logging.LogRecord) -> bool:
        if time.monotonic() < self._retry_at:
            return False
        return bool(super().shouldRollover(record))

    def doRollover(self) -> None:
        try:
            super().doRollover()
        except OSError as exc:
            self._retry_at = time.monotonic() + self.retry_s
            if self.stream is None:
                self.stream = self._open()      # appends to the file that could not be renamed
            self._note(logging.WARNING, "the log file could not be rotated (%s); writing on in %s, trying again "
                                        "in %.0f s", exc, self.baseFilename, self.retry_s)


def _console(line: str) -> None:
    """A line about the log file itself, on the console (not a record: it would go to the file)."""
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


def setup_logging(paths: config_mod.Paths, cfg: config_mod.Config, console: bool = True) -> None:
    """Log to a rotating file in the data folder and to the console. A log file that cannot be
    opened (another user's, a folder that refuses it) is said once, and the agent logs to the
    console only: it stopped with a 28-line PermissionError traceback."""
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    log_file = paths.log_dir / "sis-node.log"
    handlers: list[logging.Handler] = []
    unopened: OSError | None = None
    try:
        paths.log_dir.mkdir(parents=True, exist_ok=True)
        fh = RotatingLog(log_file, maxBytes=cfg.log_max_bytes, backupCount=cfg.log_backups, encoding="utf-8")
    except OSError as exc:
        unopened = exc
    else:
        fh.setFormatter(fmt)
        handlers.append(fh)
    if console:
        ch = logging.StreamHandler(sys.stderr)
        ch.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
        handlers.append(ch)
    for name in LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(cfg.log_level.upper())
        for h in list(logger.handlers):
            logger.removeHandler(h)
            h.close()
        for h in handlers:
            logger.addHandler(h)
    if unopened is not None:
        log.warning("the log file %s cannot be opened (%s); logging to the console only", log_file,
                    why_not_written(unopened))


def _ensured() -> config_mod.Paths | None:
    """The agent's folders, made; None, once the reason is printed, when they cannot be."""
    try:
        return config_mod.paths().ensure()
    except config_mod.ConfigError as exc:
        print(f"sis-node: {exc}", file=sys.stderr)
        return None


def _unwritable(paths: config_mod.Paths, exc: OSError) -> int:
    """A data folder that exists and cannot be written (read-only, another user's, a full disk):
    one line, status 2. Another folder (SIS_NODE_HOME) is the advice for a folder refused, not for
    a full disk, where it said to move the agent when space is what it needs."""
    why = why_not_written(exc)
    print(f"sis-node: the data folder {paths.data_dir} cannot be written ({why})"
          + ("" if config_mod.out_of_space(exc) else ": give SIS_NODE_HOME a folder this user can write"),
          file=sys.stderr)
    return EXIT_CONFIG


def _config(args: argparse.Namespace, paths: config_mod.Paths, **overrides: Any) -> config_mod.Config:
    return config_mod.load(paths, coordinator=getattr(args, "coordinator", None), gpus=getattr(args, "gpus", None),
                           name=getattr(args, "name", None), **overrides)


# ---- run --------------------------------------------------------------------------------

def choose_device(cfg: config_mod.Config, allow_cpu: bool,
                  detect: Callable[[], gpu_mod.Detection] = gpu_mod.detect):
    """(device, the GPU or None, why no GPU or None). Device is None when nothing may run."""
    from .loop import Device

    det = detect()
    chosen, problems = gpu_mod.choose(det, cfg.gpu_indices())
    if chosen and not problems:
        g = chosen[0]
        if len(chosen) > 1:
            log.warning("%d GPUs chosen; one agent runs on one GPU (%s): run one agent per GPU, each with "
                        "its own SIS_NODE_HOME and --gpus, to use the others", len(chosen), g.describe())
        return Device(f"cuda:{g.index} {g.name}", True, g.describe()[:200]), g, None
    why = "; ".join(problems) if problems else det.why_not()
    if allow_cpu:
        return Device("cpu (development run, --allow-cpu: not a GPU result)", False,
                      f"none: CPU development run ({why})"[:200]), None, None
    return None, None, why


def cmd_run(args: argparse.Namespace, engine_factory: Callable | None = None,
            detect: Callable[[], gpu_mod.Detection] | None = None) -> int:
    """``sis-node run``. The data folder's lock comes first, before any file in it or the config
    file is written (a second agent rewrote the first's status and took its journalled job):
    with another agent running on this data folder it exits at once with ``EXIT_RUNNING``."""
    paths = _ensured()
    if paths is None:
        return EXIT_CONFIG
    data_lock = DataLock(paths.lock_file)
    try:
        data_lock.acquire()
    except AlreadyRunning as exc:
        print(f"sis-node: {exc}.\nData folder: {paths.data_dir}. Stop that agent first, or give this one a "
              f"data folder of its own (SIS_NODE_HOME).", file=sys.stderr)
        return EXIT_RUNNING
    except OSError as exc:      # agent.lock cannot be made: a read-only folder, another user's
        if exc.errno in (errno.EACCES, errno.EPERM) and paths.lock_file.exists():
            # The lock file itself refuses (another user's, made read-only), not the folder.
            print(f"sis-node: the lock file {paths.lock_file} cannot be opened ({exc.strerror or exc}): it belongs "
                  f"to another user or is read-only; run sis-node as the user it belongs to, or delete it if no "
                  f"agent of theirs runs with this data folder", file=sys.stderr)
            return EXIT_CONFIG
        return _unwritable(paths, exc)
    try:
        return _run_locked(args, paths, data_lock, engine_factory, detect)
    finally:
        data_lock.release()     # also released by the system when the process ends (os._exit below)


def _run_locked(args: argparse.Namespace, paths: config_mod.Paths, data_lock: DataLock,
                engine_factory: Callable | None, detect: Callable[[], gpu_mod.Detection] | None) -> int:
    try:
        cfg = _config(args, paths)
    except config_mod.ConfigError as exc:
        print(f"sis-node: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if not cfg.coordinator:
        print(f"sis-node: no coordinator: give --coordinator URL (it is kept in {paths.config_file} once the "
              f"node is enrolled there)", file=sys.stderr)
        return EXIT_CONFIG
    try:
        secret = _enrol_secret(args.enrol_secret_file)
    except config_mod.ConfigError as exc:
        print(f"sis-node: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    setup_logging(paths, cfg)
    if (unprotected := ident_mod.profile_warning(paths.data_dir)) is not None:
        log.warning("%s", unprotected)
    device, chosen, why = choose_device(cfg, args.allow_cpu, detect or gpu_mod.detect)
    if device is None:
        print(f"sis-node needs an NVIDIA GPU and cannot use one here: {why}.\n"
              f"Run `sis-node gpus` for the details. (`--allow-cpu` exists for development and tests only.)",
              file=sys.stderr)
        return EXIT_NO_GPU
    if not device.on_gpu:
        log.warning("running on the CPU (--allow-cpu): for development and tests only; results say so")
    else:
        gpu_mod.apply_limits([chosen], cfg.gpu_memory_fraction, cfg.cpu_threads)
        log.info("running on %s (memory cap %.0f%%)", device.label, 100 * cfg.gpu_memory_fraction)
    from .engine import EngineMissing, load_engine
    try:
        engine = engine_factory(device) if engine_factory else load_engine(device, cfg.engine_weights,
                                                                           cfg.cpu_threads)
    except EngineMissing as exc:
        print(f"sis-node: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    keep = (lambda: _keep_coordinator(paths, args.coordinator)) if args.coordinator else None
    code, at_once = asyncio.run(_run_agent(cfg, paths, engine, device, secret, args.max_jobs, data_lock, keep))
    if not at_once and hasattr(engine, "close"):
        engine.close()
    if at_once:
        # Stop now: everything worth keeping is already on disk (journal, spool, fsynced), and an
        # engine batch still running in a worker thread would otherwise hold the exit until it ends.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _enrol_secret(file: str | None) -> str | None:
    """The enrolment secret of ``--enrol-secret-file`` (or ``SIS_NODE_ENROL_SECRET``), or None.
    ``ConfigError`` for a file that cannot be read, is not UTF-8 (Notepad's UTF-16), or holds
    more than the secret on one line: a second line went into the request's header, which
    aiohttp refused with a ValueError traceback ("header injection")."""
    if file:
        try:
            secret = Path(file).read_bytes().decode("utf-8-sig").strip()
        except OSError as exc:
            raise config_mod.ConfigError(f"the enrolment secret file {file} cannot be read "
                                         f"({exc.strerror or exc})") from None
        except UnicodeDecodeError:
            raise config_mod.ConfigError(f"the enrolment secret file {file} is not UTF-8 text: save it as "
                                         "UTF-8") from None
        where = f"the enrolment secret file {file}"
    else:
        secret = os.environ.get("SIS_NODE_ENROL_SECRET") or None
        where = "SIS_NODE_ENROL_SECRET"
    if secret and any(ord(c) < 32 or ord(c) == 127 for c in secret):
        raise config_mod.ConfigError(f"{where} holds more than the secret on one line (a line break or another "
                                     "control character): it should hold the secret alone")
    return secret


def _keep_coordinator(paths: config_mod.Paths, url: str) -> None:
    """Keep ``--coordinator URL`` in the config file, once the node is enrolled there: kept
    before, a typo (a wrong port, a path, another host) stayed, and every later ``sis-node run``
    went on asking it. A file that cannot be written is a warning: the agent works on."""
    try:
        stored = config_mod.load(paths, env={}).coordinator if paths.config_file.exists() else ""
        if stored != url:
            config_mod.save_setting(paths, "coordinator", url)
            log.info("coordinator %s kept in %s", url, paths.config_file)
    except (OSError, config_mod.ConfigError) as exc:
        log.warning("the coordinator URL could not be kept in %s (%s); give --coordinator again next time",
                    paths.config_file, getattr(exc, "strerror", None) or exc)


async def _run_agent(cfg, paths, engine, device, secret, max_jobs: int = 0,
                     data_lock: DataLock | None = None,
                     on_enrolled: Callable[[], None] | None = None) -> tuple[int, bool]:
    from .loop import Agent
    from .manifest import update_notice

    agent = Agent(cfg, paths, engine, device, enrol_secret=secret, update_check=update_notice, max_jobs=max_jobs,
                  data_lock=data_lock, on_enrolled=on_enrolled)
    loop = asyncio.get_running_loop()
    # Ctrl-C, a SIGTERM and, on Windows, Ctrl-Break (SIGBREAK, which would end the process at
    # once) each ask the agent to stop: the first finishes the job, a second stops at once.
    stops = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGBREAK] if hasattr(signal, "SIGBREAK") else [])
    before = {sig: signal.getsignal(sig) for sig in stops}
    on_loop: list[signal.Signals] = []
    try:
        for sig in stops:
            try:
                loop.add_signal_handler(sig, agent.request_stop)
                on_loop.append(sig)
            except (NotImplementedError, RuntimeError):
                # Windows' ProactorEventLoop has no add_signal_handler: a plain handler (run in the
                # main thread, which the loop wakes for it) hands the stop to the loop.
                signal.signal(sig, lambda *_: loop.call_soon_threadsafe(agent.request_stop))
        log.info("sis-node %s: coordinator %s; data in %s; Ctrl-C finishes the current job and stops",
                 __version__, cfg.coordinator, paths.data_dir)
        code = await agent.run()
    finally:
        # The handlers are the loop's; after it closed, a Ctrl-C (while the engine shuts down)
        # raised RuntimeError('Event loop is closed') from the plain one instead of stopping.
        for sig in stops:
            if sig in on_loop:
                loop.remove_signal_handler(sig)
            if before[sig] is not None:
                signal.signal(sig, before[sig])
    return code, agent.now_event is not None and agent.now_event.is_set()


# ---- status, pause, resume --------------------------------------------------------------

def _running(doc: dict[str, Any] | None) -> bool:
    import psutil

    return bool(doc) and doc.get("state") != "stopped" and psutil.pid_exists(int(doc.get("pid") or -1))


def _spooled(paths: config_mod.Paths, ident: ident_mod.Identity | None,
             status: dict[str, Any]) -> tuple[str, int, dict[str, int]]:
    """(the coordinator the node points at, the results waiting for it, those waiting for each
    other coordinator). Results are sent only to the coordinator they were leased from. A running
    agent's own coordinator first: it may not be node.toml's (SIS_NODE_COORDINATOR, or --coordinator
    before its enrolment succeeded), and its results then read as waiting for another."""
    from .spool import Spool, legacy_owner

    here = status.get("coordinator", "") if _running(status) else ""
    if not here:
        try:
            here = config_mod.load(paths).coordinator
        except config_mod.ConfigError:
            here = ""
    here = ident_mod.normalise(here or (ident.coordinator if ident else ""))
    if not paths.spool_dir.exists():
        return here, 0, {}
    waiting = Spool(paths.spool_dir, owner=legacy_owner(paths.identity_file, here)).waiting()
    return here, waiting.pop(here, 0), waiting


def cmd_status(args: argparse.Namespace) -> int:
    paths = config_mod.paths()
    status = StatusFile(paths.status_file).read() or {}
    contrib = Contribution(paths.stats_file).read()
    try:
        ident, ident_problem = ident_mod.load(paths.identity_file), None
    except ident_mod.IdentityUnreadable as exc:
        ident, ident_problem = None, str(exc)
        log.warning("%s", exc)
    paused = manual_pause(paths.pause_file)
    here, spooled, elsewhere = _spooled(paths, ident, status)
    from .journal import kept
    jobs_elsewhere = kept(paths, but=here)
    running = _running(status)
    if args.json:
        print(json.dumps({"running": running, "paused": paused, "status": status, "contribution": contrib,
                          "nodeId": ident.node_id if ident else None, "spooled": spooled,
                          "spooledElsewhere": elsewhere, "jobsElsewhere": [k.to_dict() for k in jobs_elsewhere]},
                         indent=1))
        return 0
    lines = [f"sis-node {__version__}"]
    if ident_problem:
        lines.append(f"node:         its identity file {paths.identity_file} cannot be read (see the warning)")
    else:
        # No coordinator used last: none has enrolled this node yet (a failed enrolment is not kept as one).
        lines.append(f"node:         {ident.node_id or 'not enrolled'} at {ident.coordinator}"
                     if ident and ident.coordinator else "node:         not enrolled yet (run `sis-node run --coordinator URL`)")
    state = status.get("state", "never run") if running else "not running"
    lines.append(f"agent:        {state}" + (f" on {status.get('device')}" if running else ""))
    if paused:
        lines.append(f"paused:       yes ({paused}); `sis-node resume` lifts it")
    elif running and status.get("pauseReasons"):
        lines.append("paused:       " + "; ".join(status["pauseReasons"]))
    if running and status.get("watching"):
        lines.append("watching:     " + ", ".join(status["watching"]))
    if running and status.get("progress"):
        p = status["progress"]
        lines.append(f"current job:  {p['jobId']} {bar(p['done'], p['total'])} {p['phase']}")
    if running and status.get("ahead"):
        a = status["ahead"]
        lines.append(f"next job:     {a['jobId']} ({a['photos']} photos), its photos fetched while the current one runs")
    lines.append(f"contribution: {summary(contrib)}")
    lines.append(f"spooled:      {spooled} results waiting to be acknowledged" + (f" by {here}" if elsewhere else ""))
    for url, n in sorted(elsewhere.items()):
        lines.append(f"elsewhere:    {n} result(s) wait for {url}, which this node no longer points at: kept, and "
                     f"sent when it points there again (sis-node run --coordinator {url})")
    for k in jobs_elsewhere:
        lines.append(f"elsewhere:    {k.describe()}")
    # Shown when stopped too: why the agent stopped (revoked, enrolment refused) is the line most wanted then.
    if not running and status.get("stoppedBecause"):
        lines.append(f"stopped:      {status['stoppedBecause']}")
    elif status.get("lastError"):
        lines.append(f"last problem: {status['lastError']}")
    if status.get("update"):
        lines.append(f"update:       sis-node {status['update']['version']} is published (this is {__version__}); "
                     "download it from the project's page")
    print("\n".join(lines))
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    paths = _ensured()
    if paths is None:
        return EXIT_CONFIG
    try:
        set_paused(paths.pause_file, args.reason or "paused by the volunteer")
    except OSError as exc:      # a traceback, and status 0 as if paused
        return _unwritable(paths, exc)
    running = _running(StatusFile(paths.status_file).read())
    print("paused: no new job will be leased" + (" (a job already running finishes first)" if running else "")
          + "; `sis-node resume` lifts it")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    """Lift the pause, then say what else holds the agent; a setting that cannot be read is
    said in one line (exit 2) after the pause is lifted, as ``run`` would refuse it."""
    paths = _ensured()
    if paths is None:
        return EXIT_CONFIG
    try:
        cleared = clear_paused(paths.pause_file)
    except OSError as exc:
        return _unwritable(paths, exc)
    print("resumed" if cleared else "was not paused by `sis-node pause`")
    try:
        cfg = config_mod.load(paths)
    except config_mod.ConfigError as exc:
        print(f"sis-node: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    verdict = Policy(cfg, paths.pause_file).check()
    if verdict.paused:
        print("still held by: " + "; ".join(verdict.reasons))
    return 0


# ---- gpus, settings, verify-manifest ----------------------------------------------------

def cmd_gpus(args: argparse.Namespace) -> int:
    det = gpu_mod.detect()
    if args.json:
        print(json.dumps(det.to_dict(), indent=1))
        return 0 if det.usable else EXIT_NO_GPU
    print(f"torch {det.torch_version or 'absent'} (CUDA {det.torch_cuda or 'none'}); "
          f"NVIDIA driver {det.driver or 'not found'}")
    for g in det.usable:
        print("  usable  " + g.describe())
    for g in det.seen_by_driver:
        if all(u.index != g.index for u in det.usable):
            print("  driver only  " + g.describe())
    if not det.usable:
        print("no usable NVIDIA GPU: " + det.why_not())
        return EXIT_NO_GPU
    return 0


def cmd_settings(args: argparse.Namespace) -> int:
    paths = config_mod.paths()
    try:
        cfg = config_mod.load(paths)
    except config_mod.ConfigError as exc:
        print(f"sis-node: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print(f"config file: {paths.config_file}\ndata folder: {paths.data_dir}\n")
    for name, default, help_ in config_mod.Config.help_table():
        print(f"{name} = {getattr(cfg, name)!r}  (default {default!r}; env SIS_NODE_{name.upper()})\n    {help_}")
    return 0


def cmd_verify_manifest(args: argparse.Namespace) -> int:
    from .manifest import KEYS_DIR, ManifestError, newer_version, pinned_keys, verify

    try:
        envelope = json.loads(Path(args.file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"not verified: {args.file} cannot be read as JSON ({exc})", file=sys.stderr)
        return 1
    # The folder named by --keys is checked here: without a key it was told apart from the
    # built-in folder by nothing, and the answer was "no public key is pinned in this build".
    folder = Path(args.keys) if args.keys else KEYS_DIR
    if args.keys and not folder.is_dir():
        print(f"not verified: the key folder {folder} " + ("is not a folder" if folder.exists() else "does not exist"),
              file=sys.stderr)
        return 1
    keys = pinned_keys(folder)
    if args.keys and not keys.keys:
        print(f"not verified: the key folder {folder} holds no readable *.pub key", file=sys.stderr)
        return 1
    try:
        v = verify(envelope, keys)
    except ManifestError as exc:
        print(f"not verified: {exc}", file=sys.stderr)
        return 1
    newer = newer_version(v.signed)
    signer = sorted(v.signers)[0]
    print(f"verified: signed by pinned key {signer[:16]}…; manifest version {v.signed.get('version')}, "
          f"agent {v.signed.get('agentVersion')}, expires {v.signed.get('expires')}"
          + (f"; newer than this agent ({__version__})" if newer else ""))
    return 0


# ---- the parser -------------------------------------------------------------------------

class VersionAction(argparse.Action):
    """``--version``: the agent's version, then its engine build, compute backends and
    weights (node_agent.build_info), so one download can be told from another."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show the version, engine build, compute backends and weights, and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from .build_info import current, describe

        print(describe(current()))
        parser.exit()


def _non_negative(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {n}")
    return n


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sis-node", description=(
        "The Spatial Intelligence Service node agent: lends this machine's NVIDIA GPU to street sweeps. "
        "It fetches jobs (data only), runs the sweep engine, and submits results; it never downloads or "
        "executes code."))
    p.add_argument("--version", action=VersionAction)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="enrol (first run), then lease, compute and submit jobs until stopped")
    r.add_argument("--coordinator", metavar="URL", help="coordinator base URL (kept in the config file)")
    r.add_argument("--gpus", metavar="LIST", help="which GPUs: 'all' or indices such as 0,2")
    r.add_argument("--name", help="a name for this node")
    r.add_argument("--allow-cpu", action="store_true",
                   help="run on the CPU when no GPU is usable: for development and tests only; results say so")
    r.add_argument("--max-jobs", type=_non_negative, default=0, metavar="N",
                   help="stop after N jobs are finished and their results sent (default 0: run until stopped); "
                        "a quick way to check that a machine works: exit 5 when a result was not acknowledged")
    r.add_argument("--enrol-secret-file", metavar="FILE",
                   help="file holding the coordinator's enrolment secret, where it asks for one")
    s = sub.add_parser("status", help="what the agent is doing and what it has contributed")
    s.add_argument("--json", action="store_true", help="machine-readable")
    pa = sub.add_parser("pause", help="lease no new job until `sis-node resume` (holds across restarts)")
    pa.add_argument("--reason", help="shown in status and logs")
    sub.add_parser("resume", help="lift `sis-node pause`")
    g = sub.add_parser("gpus", help="the NVIDIA GPUs found, or exactly why none is usable")
    g.add_argument("--json", action="store_true", help="machine-readable")
    sub.add_parser("settings", help="every setting: value, default, environment name and meaning")
    v = sub.add_parser("verify-manifest", help="verify a signed node-app manifest against the pinned keys")
    v.add_argument("file", metavar="FILE")
    v.add_argument("--keys", metavar="DIR", help="folder of *.pub keys to pin instead of the built-in ones")
    return p


COMMANDS = {"run": cmd_run, "status": cmd_status, "pause": cmd_pause, "resume": cmd_resume, "gpus": cmd_gpus,
            "settings": cmd_settings, "verify-manifest": cmd_verify_manifest}


EXIT_PIPE_CLOSED = 141   # what a shell shows for a Unix tool ended by SIGPIPE (128 + 13)


def _pipe_closed(exc: OSError) -> bool:
    """Whether ``exc`` is standard output's reader gone (``sis-node status | head -1``): EPIPE,
    or on Windows EINVAL, which is how its C runtime reports a write to a closed pipe, taken
    so only while standard output is a pipe."""
    if isinstance(exc, BrokenPipeError):
        return True
    if os.name != "nt" or exc.errno != errno.EINVAL:
        return False
    try:
        return stat.S_ISFIFO(os.fstat(sys.stdout.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):
        return False


def _printable_output() -> None:
    """Standard output redirected to a file or a pipe on Windows encodes in the ANSI code page
    (cp1252), strictly: text from the coordinator outside it (an operator's reason, a node's
    name) ended the command with UnicodeEncodeError. Such a character is written escaped
    (``\\u2713``) instead; output that can encode everything is unchanged."""
    with contextlib.suppress(AttributeError, ValueError, OSError):    # not a text stream (replaced, detached, closed)
        sys.stdout.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]


def main(argv: list[str] | None = None) -> int:
    _printable_output()
    exiting: SystemExit | None = None
    try:
        try:
            args = build_parser().parse_args(argv)
            code = COMMANDS[args.command](args)
        except SystemExit as exc:       # --help, --version, a usage error: argparse exits
            exiting, code = exc, 0
        sys.stdout.flush()      # here, not at exit, where a closed pipe is "Exception ignored" and status 120
    except OSError as exc:
        if not _pipe_closed(exc):
            raise
        # The reader of our output has gone: stop quietly, as a Unix tool ended by SIGPIPE does.
        # Standard output goes to the null device first, or Python's own flush at exit would
        # print "Exception ignored ... BrokenPipeError" on the way out.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_PIPE_CLOSED
    if exiting is not None:
        raise exiting
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
