"""The ``sis`` command: serve the coordinator, migrate its database, inspect settings."""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
import time
from pathlib import Path

from . import __version__
from coordinator.core.db.urls import StartupError, connection_problem, normalise
from coordinator.core.settings import SettingsError, SettingsMoved, load, settings_table
from coordinator.sources.registry import SourceSettingsError, check_settings


def _flags(args: argparse.Namespace) -> dict:
    """The settings given as flags (None: not given)."""
    return {"host": getattr(args, "host", None), "port": getattr(args, "port", None),
            "database_url": getattr(args, "database", None),
            "demo": True if getattr(args, "demo", False) else None}


_warned: set[str] = set()       # each warning once per process, though the settings are read more than once


def _settings(args: argparse.Namespace):
    """The settings of every subcommand: flags over environment over file over defaults,
    with the database URL as users type it (``sqlite:///``, ``postgresql://``) turned
    into the driver the service uses; a value it cannot use is a ``StartupError`` naming
    it where it was written (the flag, the variable, the file and key)."""
    from pydantic import ValidationError

    from coordinator.core import settings_check
    from coordinator.sources.registry import load_adapters

    flags = _flags(args)
    try:
        settings = load(**flags)
    except ValidationError as exc:
        raise StartupError(settings_check.explain(exc, flags)) from None
    except (FileNotFoundError, SettingsMoved, SettingsError) as exc:    # SIS_CONFIG: no file, no TOML; an old name
        raise StartupError(str(exc)) from None
    settings.database_url = normalise(settings.database_url)
    adapters = load_adapters()
    problem = settings_check.source_problem(settings, adapters)
    if problem:
        raise SourceSettingsError(problem)
    check_settings(settings, adapters)
    for line in settings_check.unknown_environment():
        if line not in _warned:
            _warned.add(line)
            print(f"sis {args.command}: warning: {line}", file=sys.stderr)
    return settings


def _listen(host: str, port: int) -> list:
    """The listening sockets, bound before anything else is done, so that a port in use
    is said at once and not after migrations ran and the database was opened."""
    import errno
    import socket

    from tornado.netutil import bind_sockets

    try:
        return bind_sockets(port, host)
    except socket.gaierror:
        raise StartupError(f"cannot listen on {host}: the address is not known") from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(f"port {port} on {host} is already in use: stop what listens there, "
                               "or choose another port with --port or SIS_PORT") from None
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


GC_YOUNG_THRESHOLD = 10_000


def settle_gc() -> None:
    """Once the app is built: move every object made at start-up (modules, the app, the
    ORM's tables and caches, ...) out of the cyclic collector's reach, and collect the
    youngest generation every 10,000 allocations rather than 700.

    With the defaults, a full collection walked every start-up object again some 60-70 ms
    each (``bench/seen.py``: about one in fifteen 1500 m answers, which build some 8,000
    containers each, paid one: a p99 several times the p50). Frozen objects are never
    freed nor walked (they live as long as the process anyway), so full collections walk
    only what requests made; the higher young threshold means fewer collections catch an
    answer half-built and promote it to the older generations."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


# Every line names its process: the supervisor and the workers of ``--workers`` share one log.
LOG_FORMAT = "%(asctime)s [%(process)d] %(levelname)s %(name)s: %(message)s"
# The loggers SIS_LOG_LEVEL sets: the coordinator's own and Tornado's (its access log among them).
OWN_LOGGERS = ("sis", "coordinator", "tornado")
# Others' loggers, held at WARNING whatever SIS_LOG_LEVEL says (as every logger not named here
# is): at DEBUG aiosqlite logged every statement, its parameters with them (API key digests).
QUIET_LOGGERS = ("aiosqlite", "sqlalchemy", "asyncio", "asyncpg", "urllib3", "httpx", "httpcore", "alembic",
                 "redis")


def setup_logging(level: str) -> None:
    """The log of ``sis serve``: one handler on stderr, ``LOG_FORMAT``; ``level``
    (SIS_LOG_LEVEL) on ``OWN_LOGGERS``, and WARNING or above on everything else."""
    own = logging.getLevelName(level.upper())
    if not isinstance(own, int):
        own = logging.INFO
    others = max(own, logging.WARNING)
    logging.basicConfig(level=others, format=LOG_FORMAT)
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(own)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(others)


def cmd_serve(args: argparse.Namespace) -> int:
    """One coordinator process, or with ``--workers N`` a supervisor and N worker
    processes sharing the listening socket (the kernel hands each connection to one)."""
    from coordinator.faces.app import make_app  # noqa: F401  imported before logging is set up:
    from . import services  # noqa: F401         what they log while importing (alembic's plugins) is noise

    settings = _settings(args)
    setup_logging(settings.log_level)
    workers = args.workers
    if workers < 1:
        raise StartupError("--workers must be at least 1")
    if workers > 1 and settings.demo:
        raise StartupError("--demo runs in one process: its fake upstreams and photo provider live in it (each "
                           "worker would start its own, and load the demo town again); leave out --workers")
    if workers > 1 and settings.is_sqlite:
        raise StartupError("--workers above 1 needs PostgreSQL: SQLite admits one coordinator process "
                           "(set SIS_DATABASE_URL or --database to postgresql://...)")
    _serve_sqlite_alone(settings)
    sockets = _listen(settings.host, settings.port)
    if workers == 1:
        return asyncio.run(_serve(settings, sockets))
    return _serve_workers(settings, sockets, workers)


_SERVING_LOCK = None     # held open for the process's life: the lock is the file's, released when it exits


def _serve_sqlite_alone(settings) -> None:  # noqa: ANN001
    """One ``sis serve`` per SQLite file: a second (another port, a second ``make demo``) ran
    its own poller, lease sweeper and demo photo provider over the same file, unsaid. An
    exclusive lock on a file beside the database, taken before anything starts, refuses it in
    one line naming the process that serves it. The commands an operator runs beside a
    server (``sis keys``, ``sis reviewers``) do not take it. A database file that is empty,
    or missing beside what an earlier one left (``migrate.lost_database``), is said in a
    warning: a new, empty database is made there, and a lost one should be put back first."""
    global _SERVING_LOCK
    if not settings.is_sqlite:
        return
    try:
        import fcntl
    except ImportError:        # not on POSIX: unguarded, as before
        return
    from sqlalchemy.engine import make_url

    path = make_url(settings.database_url).database
    if not path or path == ":memory:":
        return
    lock = Path(path).with_name(Path(path).name + ".serving")
    from coordinator.core.db.migrate import lost_database
    lost = lost_database(Path(path))
    if lost:
        print(f"sis serve: warning: {lost}", file=sys.stderr)
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        f = open(lock, "a+")  # noqa: SIM115 - kept open for the process's life
    except OSError:            # a folder that cannot be written: opening the database says so in its line
        return
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        pid = f.read().strip() or "?"
        f.close()
        raise StartupError(f"{path} is already served by another sis serve (pid {pid}): SQLite admits one "
                           "serving process; stop that one, or name another database (--database)") from None
    # Written past the file object's buffer: on a full disk the pid is not written, and it only names
    # this process in a second one's refusal, so that is no reason to stop (nor a traceback at exit).
    with contextlib.suppress(OSError):
        os.ftruncate(f.fileno(), 0)
        os.pwrite(f.fileno(), f"{os.getpid()}\n".encode(), 0)
    _SERVING_LOCK = f


async def _serve(settings, sockets: list, worker: tuple[int, int] | None = None) -> int:  # noqa: ANN001
    """Serve on ``sockets`` until SIGINT, SIGTERM or SIGHUP (``_stop``). ``worker`` (index, count) is set in a
    worker of ``--workers``: the schema step was taken once by the supervisor."""
    from coordinator.faces.app import make_app
    from coordinator.faces.server import make_server
    from coordinator.core.db.migrate import SchemaOutOfDate
    from .services import create_services

    try:
        services = await create_services(settings, prepare=worker is None)
    except BaseException as exc:
        for sock in sockets:
            sock.close()
        if isinstance(exc, SchemaOutOfDate):
            print(f"sis serve: {exc}", file=sys.stderr)
            return 2
        raise
    app = make_app(services)
    server = make_server(app, settings)
    server.add_sockets(sockets)
    port = sockets[0].getsockname()[1]  # the real port when 0 was asked
    settle_gc()
    db_label = "embedded SQLite" if settings.is_sqlite else "PostgreSQL"
    if worker is None:
        say(f"sis {__version__}: serving on http://{settings.host}:{port} ({db_label}"
            f"{', demo data' if settings.demo else ''}); Ctrl-C stops")
    else:
        say(f"sis {__version__}: worker {worker[0] + 1} of {worker[1]} (pid {os.getpid()}) serving on "
            f"http://{settings.host}:{port}")
    said: list[str] = []                   # the first stop signal's name; a second one hurries the stop

    def stop(name: str) -> None:
        if not said:
            said.append(name)
            stopped.set()
        elif not hurry.is_set():
            logging.getLogger("sis").warning("%s again: the requests in flight are cut off now", name)
            hurry.set()

    stopped, hurry = asyncio.Event(), asyncio.Event()
    _on_stop_signals(asyncio.get_running_loop(), stop)
    await stopped.wait()
    await _stop(server, services, said[0], hurry)
    return 0


DRAIN_S = 15            # how long a stop waits for the requests in flight; below STOP_GRACE_S, with room
# The coordinator runs on POSIX systems only (faces/server.py reads its descriptor limit through
# ``resource``), where the event loop takes signal handlers and SIGHUP exists.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _on_stop_signals(loop: asyncio.AbstractEventLoop, stop) -> None:  # noqa: ANN001
    """``stop(name)`` on each of ``STOP_SIGNALS``. SIGHUP (the terminal or the ssh session
    closed) stops as SIGTERM does: by default it killed the process on the spot, its requests
    with it. Where SIGHUP was ignored when ``sis serve`` started (``nohup sis serve``) it stays
    ignored: that was asked for."""
    for sig in STOP_SIGNALS:
        if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
            continue
        loop.add_signal_handler(sig, stop, sig.name)


async def _stop(server, services, signame: str, hurry: asyncio.Event | None = None) -> None:  # noqa: ANN001
    """A stop that lets the requests in flight finish: listening stops, the connections with
    none in flight close, and the requests in flight get up to ``DRAIN_S`` seconds (their
    connections closing as they are answered); those still running then are cut off (their
    handlers cancelled, answered where their connection is still open). Then the services
    close. Said in a line at the start and one at the end: a stop used to turn every request
    in flight into a 500, said nowhere."""
    log = logging.getLogger("sis")
    n = server.in_flight()
    log.info("stopping (%s): %d request%s in flight, waiting up to %d s (a second signal cuts them off)", signame,
             n, "" if n == 1 else "s", DRAIN_S)
    server.begin_stop()
    left = await server.drain(DRAIN_S, hurry)
    if left:
        running = server.running()
        shown = ", ".join(running[:5]) + (f" and {len(running) - 5} more" if len(running) > 5 else "")
        when = "at a second signal" if hurry is not None and hurry.is_set() else f"after {DRAIN_S} s"
        log.warning("stopping: cutting off %d request%s still running %s: %s", left, "" if left == 1 else "s",
                    when, shown)
    await server.cut_off()                 # and every connection closed, those closing still too
    await services.close()
    log.info("stopped")


def say(line: str) -> None:
    """One line to stdout in one write. ``print`` writes the text and its newline apart,
    and with unbuffered output (PYTHONUNBUFFERED, as containers often run) that is two
    writes: the workers of ``--workers`` share one stdout, so their lines could interleave
    mid-line for whatever reads the log line by line."""
    if sys.stdout is None:      # no stdout at all (its descriptor closed): print() says nothing there either
        return
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


WORKER_RESTARTS = 3     # a worker's restarts within RESTART_WINDOW_S before the supervisor gives up
RESTART_WINDOW_S = 600.0
STOP_GRACE_S = 20       # how long a worker may take to stop after SIGTERM before it is killed
WAIT_POLL_S = 0.1       # how often the supervisor looks for a worker that ended (and at its stop deadline)
PR_SET_PDEATHSIG = 1    # prctl(2): the signal a process gets when the thread that forked it ends


class Restarts:
    """Whether a worker that ended is started again: unless it already was ``limit`` times in
    the last ``window_s``. A worker failing as it starts (a setting, a database refusing it)
    is then given up on in seconds, and the supervisor stops with status 1 for whatever
    supervises it; one killed now and then (the OOM killer once a week) is started again
    every time. Counted over the supervisor's whole life, the fourth such kill in a month
    stopped every worker, the healthy ones too."""

    def __init__(self, n: int, limit: int = WORKER_RESTARTS, window_s: float = RESTART_WINDOW_S,
                 clock=time.monotonic) -> None:  # noqa: ANN001
        self.limit, self.window_s, self.clock = limit, window_s, clock
        self.at: list[list[float]] = [[] for _ in range(n)]

    def take(self, i: int) -> int | None:
        """The worker's restart count in the window with this one, or None: give up."""
        now = self.clock()
        recent = [t for t in self.at[i] if now - t < self.window_s]
        if len(recent) >= self.limit:
            return None
        self.at[i] = [*recent, now]
        return len(self.at[i])


def _stop_with_supervisor(supervisor: int) -> None:
    """In a worker just forked: SIGTERM when the supervisor ends, however it ends.

    A supervisor killed with SIGKILL (or by the OOM killer) cannot stop its workers, and
    they would go on serving as orphans holding the port, so that the next ``sis serve``
    finds it in use. On Linux the kernel sends the signal (``PR_SET_PDEATHSIG``); the
    supervisor may have gone between the fork and that call, so ``getppid`` is read after
    it (an orphan has been handed to another parent). Elsewhere a daemon thread reads
    ``getppid`` every second. SIGTERM, not SIGKILL: the worker stops as the supervisor
    would have stopped it, its server closed and its connections given back."""
    armed = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != supervisor:          # gone already: no signal will come
        os.kill(os.getpid(), signal.SIGTERM)
        return
    if armed:
        return
    import threading

    def watch() -> None:
        while os.getppid() == supervisor:
            time.sleep(1)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="sis-supervisor-watch", daemon=True).start()


def _serve_workers(settings, sockets: list, n: int) -> int:  # noqa: ANN001
    """The supervisor of ``sis serve --workers N``: take the schema step once, fork N
    workers, restart one that dies, and on SIGINT, SIGTERM or SIGHUP stop them all and wait
    (each lets its requests in flight finish, up to ``DRAIN_S``, as a lone ``sis serve`` does).

    Nothing that holds a connection or a thread is made before the fork: the schema step
    runs in an event loop of its own whose database pool is closed before any worker is
    forked, and each worker builds its services (database pools, Redis clients, its event
    loop) after the fork. Only the listening sockets are inherited.

    The supervisor never blocks in ``wait``: a signal handler cannot end a blocking wait
    (Python retries it), so a stop waiting for a worker that ignores SIGTERM (stopped,
    or hung on its database) would wait for ever and the STOP_GRACE_S deadline would
    never be looked at. It polls with ``WNOHANG`` every WAIT_POLL_S instead. A worker
    stops by itself when the supervisor is gone (``_stop_with_supervisor``)."""
    from coordinator.core.db.migrate import SchemaOutOfDate, prepare_database
    from coordinator.core.db import Database

    async def prepare() -> None:
        async with Database(settings.database_url) as db:
            await prepare_database(settings, db)

    try:
        asyncio.run(prepare())
    except SchemaOutOfDate as exc:
        for sock in sockets:
            sock.close()
        print(f"sis serve: {exc}", file=sys.stderr)
        return 2
    log = logging.getLogger("sis")
    if not settings.requester_hash_key:
        # One key for all workers: each one's own random key (requests.requester_hash) gave an address a
        # hash, and so a count of queued requests, per worker: N times SIS_SWEEP_MAX_QUEUED_PER_REQUESTER.
        settings = settings.model_copy(update={"requester_hash_key": os.urandom(32).hex()})
    if not settings.redis_url:
        log.warning("--workers %d without SIS_REDIS_URL: each worker keeps its own per-minute windows and "
                    "answer cache, so a client may get %d times its per-minute ceiling", n, n)
    children: dict[int, int] = {}          # pid -> worker index
    restarts = Restarts(n, WORKER_RESTARTS, RESTART_WINDOW_S)
    stopping = False
    stop_deadline = float("inf")            # when the workers still there after SIGTERM are killed
    supervisor = os.getpid()

    own_signals = [sig for sig in STOP_SIGNALS                # nohup: SIGHUP left ignored
                   if not (sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN)]
    stop_signal: list[str] = []             # the first stop's cause, said by the loop below (not in the handler)

    def spawn(i: int) -> None:
        _flush_quietly()
        pid = os.fork()
        if pid == 0:                        # the worker: never returns into the supervisor's code
            code = 1
            try:
                signal.signal(signal.SIGINT, signal.default_int_handler)
                for sig in own_signals:         # SIGTERM, SIGHUP: the worker's own stop (_serve) takes them
                    if sig != signal.SIGINT:
                        signal.signal(sig, signal.SIG_DFL)
                _stop_with_supervisor(supervisor)
                code = asyncio.run(_serve(settings, sockets, worker=(i, n)))
            except KeyboardInterrupt:
                code = 0
            except BaseException:
                log.exception("worker %d failed", i + 1)
            finally:
                _flush_quietly()            # a closed terminal (EIO) must not send the worker on into the loop below
                os._exit(code)
        children[pid] = i

    def stop_all(signum=None, frame=None) -> None:  # noqa: ANN001
        nonlocal stopping, stop_deadline
        if not stopping:                    # the grace counts from the first signal, not a second Ctrl-C
            stop_deadline = time.monotonic() + STOP_GRACE_S
            if signum is not None:
                stop_signal.append(signal.Signals(signum).name)
        stopping = True
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError):     # that worker has already gone
                os.kill(pid, signal.SIGTERM)

    for sig in own_signals:                 # before the forks: no worker outlives a supervisor stopped early
        signal.signal(sig, stop_all)
    for i in range(n):
        spawn(i)
    port = sockets[0].getsockname()[1]
    say(f"sis {__version__}: {n} workers serving on http://{settings.host}:{port} (PostgreSQL); Ctrl-C stops")
    failed = False
    while children:
        if stop_signal and stop_signal[0]:
            log.info("stopping (%s): %d workers, each waiting up to %d s for its requests in flight",
                     stop_signal[0], len(children), DRAIN_S)
            stop_signal[0] = ""             # said once
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:                        # none ended: a worker still there STOP_GRACE_S after SIGTERM is killed
            if time.monotonic() > stop_deadline:
                for pid in list(children):
                    log.error("worker pid %d did not stop %d s after SIGTERM: killed", pid, STOP_GRACE_S)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                stop_deadline = float("inf")
            time.sleep(WAIT_POLL_S)
            continue
        i = children.pop(pid, None)
        if i is None or stopping:
            continue
        code = os.waitstatus_to_exitcode(status)
        nth = restarts.take(i)
        if nth is not None:
            log.warning("worker %d (pid %d) exited with %s; starting it again (restart %d of the %d a worker may "
                        "have in %.0f s)", i + 1, pid, code, nth, WORKER_RESTARTS, RESTART_WINDOW_S)
            spawn(i)
        else:
            log.error("worker %d exited with %s, restarted %d times in the last %.0f s already: it fails as it "
                      "starts, so every worker is stopped", i + 1, code, WORKER_RESTARTS, RESTART_WINDOW_S)
            failed = True
            stop_all()
    for sock in sockets:
        sock.close()
    if stopping:
        log.info("stopped")
    return 1 if failed else 0


def _flush_quietly() -> None:
    """Flushes stdout and stderr, whatever they are now (a terminal that closed answers EIO)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()


def cmd_migrate(args: argparse.Namespace) -> int:
    from coordinator.core.db import migrate

    settings = _settings(args)
    if settings.is_sqlite:
        from pathlib import Path
        from sqlalchemy.engine import make_url
        db_path = make_url(settings.database_url).database
        if db_path and db_path != ":memory:":
            Path(db_path).parent.mkdir(parents=True, exist_ok=True)
            lost = migrate.lost_database(Path(db_path))       # as sis serve says it: it migrates the same file
            if lost:
                print(f"sis migrate: warning: {lost}", file=sys.stderr)
    from alembic.util import CommandError
    # What the migrations themselves report (jobs they drew again, rows they changed) goes to the
    # operator: on PostgreSQL this command is the only way an upgrade runs, and those lines were lost.
    said = logging.getLogger("sis.migrations")
    said.setLevel(logging.INFO)
    said.addHandler(logging.StreamHandler(sys.stdout))
    said.propagate = False
    try:
        at, steps = migrate.upgrade_saying(settings.database_url, args.revision)
    except (CommandError, migrate.SchemaTooNew) as exc:    # an unknown revision, here or in the database
        print(f"sis migrate: {exc}", file=sys.stderr)
        return 2
    where = settings.database_url.split('@')[-1]
    if args.revision not in ("head", "heads") and "@" not in args.revision and at != args.revision and not steps:
        print(f"database at {at}, past {args.revision}: sis migrate only upgrades ({where})")
    elif not steps:
        print(f"database at {at}, nothing to apply: {where}")
    else:
        print(f"database at {at}, {len(steps)} migration{'s' if len(steps) > 1 else ''} applied: {where}")
        for rev, doc in steps:
            print(f"  {rev}  {doc}")
    return 0


def cmd_settings(args: argparse.Namespace) -> int:
    from .sources.registry import source_settings_rows

    rows = settings_table(source_settings_rows())
    if getattr(args, "markdown", False):
        from coordinator.core.settings import markdown_rows
        print("| variable | default | meaning |\n|---|---|---|")
        for line in markdown_rows(rows):
            print(line)
        return 0
    for env, default, help_ in rows:
        print(f"{env:28} {default:50} {help_}")
    return 0


async def _poll(args: argparse.Namespace) -> int:
    from .services import create_services

    services = await create_services(_settings(args), start_background=False, upgrade=False)
    try:
        from .hazards.history import poll_once, usable_line
        out = await poll_once(services.db, services.sources, keep=services.settings.polls_kept)
        h = out.feed.health
        print(f"poll {out.poll_id}: {len(out.feed.events)} events, {len(out.changes)} changes, {usable_line(h)}")
        if h.queried and not h.usable:
            # Recorded (the history shows the gap), but it says nothing of current events: a cron
            # job or a script reading only the exit status must not take it for a quiet day.
            print("sis poll: no source answered", file=sys.stderr)
            return 1
    finally:
        await services.close()
    return 0


async def _with_db(args: argparse.Namespace, work, create: bool = False) -> int:  # noqa: ANN001
    from coordinator.core.db.migrate import with_database

    return await with_database(_settings(args), work, create=create)


def _fail(exc: Exception, command: str) -> int:
    """One line on stderr, named by its command as every other command's refusals are (``sis
    nodes: ...``), and status 1."""
    print(f"{command}: {getattr(exc, 'message', exc)}", file=sys.stderr)
    return 1


KEYS_LIST_HEADER = "\t".join(("id", "prefix", "plan", "state", "name", "scopes"))


async def _keys(args: argparse.Namespace) -> int:
    from coordinator.core.access import credentials as creds
    from coordinator.core.errors import ServiceError

    async def work(db) -> int:  # noqa: ANN001
        try:
            if args.keys_command == "create":
                # "--scopes ''" (or only commas) is an empty list, which create_key refuses naming the
                # valid scopes; only leaving --scopes out means the default set.
                scopes = [s.strip() for s in args.scopes.split(",") if s.strip()] if args.scopes is not None else None
                secret, rec = await creds.create_key(db, args.name, args.plan, scopes)
                print(f"{rec.id}\t{rec.plan}\t{secret}")
                print("The key is shown once; only its sha256 is stored.", file=sys.stderr)
            elif args.keys_command == "list":
                print(KEYS_LIST_HEADER)
                for rec in await creds.list_keys(db):
                    state = f"{creds.REVOKED} {rec.revoked_at.isoformat()}" if rec.revoked_at else creds.LIVE
                    print(f"{rec.id}\t{rec.prefix}...\t{rec.plan}\t{state}\t{rec.name}\t{','.join(rec.scopes)}")
            else:
                rec = await creds.revoke_key(db, args.key_id)
                print(f"{rec.id} revoked at {rec.revoked_at.isoformat()} (and every embed token minted from it)")
        except ServiceError as exc:
            return _fail(exc, "sis keys")
        return 0

    return await _with_db(args, work, create=args.keys_command == "create")


async def _embed(args: argparse.Namespace) -> int:
    from coordinator.core.access import credentials as creds
    from coordinator.core.errors import ServiceError

    settings = _settings(args)

    async def work(db) -> int:  # noqa: ANN001
        try:
            if args.embed_command == "mint":
                key = await creds.find_key_by_id(db, args.key_id)
                if key is None or key.revoked_at is not None:
                    return _fail(ValueError(f"no live key with id {args.key_id}"), "sis embed")
                secret, rec = await creds.mint_embed(
                    db, key, args.origin, settings.embed_budget if args.budget is None else args.budget,
                    settings.embed_ttl_s if args.ttl is None else args.ttl)
                print(f"{rec.id}\t{rec.chain_id}\t{rec.expires_at.isoformat()}\t{secret}")
            elif args.embed_command == "list":
                at = creds.now()
                for rec in await creds.list_embeds(db, args.key_id):
                    # An expired token read "live": it authorises nothing, and the prune deletes it in time.
                    state = "revoked" if rec.revoked_at else "expired" if rec.expires_at <= at else "live"
                    print(f"{rec.id}\t{rec.chain_id}\t{rec.key_id}\t{rec.origin}\t{rec.budget}\t"
                          f"{rec.expires_at.isoformat()}\t{state}")
            else:
                n = await creds.revoke_embed_chain(db, args.chain_id)
                print(f"chain {args.chain_id}: {n} live token(s) revoked")
        except ServiceError as exc:
            return _fail(exc, "sis embed")
        return 0

    return await _with_db(args, work)


async def _prune(args: argparse.Namespace) -> int:
    """One pass of the access prune now, with the retention settings in force: what the leader
    runs every SIS_ACCESS_PRUNE_INTERVAL_S, for an operator who shortened a retention, set the
    interval to 0, or wants the first long pass done before the service is busy. Safe beside
    running coordinators (a pass deletes by primary key only what is past its bound)."""
    from coordinator.core.access.prune import Retention, prune_once

    retention = Retention.of(_settings(args))

    async def work(db) -> int:  # noqa: ANN001
        print(f"sis prune: keeping {retention.days_kept} days and {retention.months_kept} months of counters, "
              f"embed tokens {retention.tokens_kept_days} days past expiry, an ended chain's visitor counters "
              f"{retention.grace_s:g} s; a large table takes about 9 s per 100,000 rows", file=sys.stderr)
        out = await prune_once(db, retention)
        print(f"deleted {out.visitor_rows} visitor counters of {out.chains} ended embed chains, {out.day_rows} day "
              f"and {out.month_rows} month counters past their retention, {out.tokens} expired embed tokens "
              f"({out.batches} transactions)")
        return 0

    return await _with_db(args, work)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sis", description="Spatial Intelligence Service coordinator.")
    p.add_argument("--version", action="version", version=f"sis {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def db_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--database", metavar="URL",
                        help="sqlite+aiosqlite:///path/to/sis.db or postgresql+asyncpg://user@host:5432/database "
                             "(the driver may be left out) "
                             "(default: SIS_DATABASE_URL, else sqlite+aiosqlite:///var/sis.db)")

    s = sub.add_parser("serve", help="serve the coordinator (applies migrations itself on SQLite)")
    s.add_argument("--host", help="listen address (default 127.0.0.1)")
    s.add_argument("--port", type=int, help="listen port (default 8080)")
    db_arg(s)
    s.add_argument("--demo", action="store_true",
                   help="answer sources from bundled recorded samples (offline), and load the demo town; "
                        "without --database or SIS_DATABASE_URL on a database of its own, "
                        "sqlite:///var/demo.db, so a later plain sis serve shows none of it")
    s.add_argument("--workers", type=int, default=1, metavar="N",
                   help="N coordinator processes sharing the port (PostgreSQL only; default 1)")
    s.set_defaults(run=cmd_serve)

    m = sub.add_parser("migrate", help="apply pending database migrations")
    db_arg(m)
    m.add_argument("--revision", default="head", help="target revision (default head)")
    m.set_defaults(run=cmd_migrate)

    st = sub.add_parser("settings", help="list every setting with its default and help")
    st.add_argument("--markdown", action="store_true",
                    help="as the rows of a Markdown table (docs/settings.md's table of sources is made so)")
    st.set_defaults(run=cmd_settings)

    po = sub.add_parser("poll", help="poll the hazard-event sources once and record the changes")
    db_arg(po)
    po.add_argument("--demo", action="store_true",
                    help="poll the bundled recorded samples (into sqlite:///var/demo.db without --database "
                         "or SIS_DATABASE_URL, as sis serve --demo)")
    po.set_defaults(run=lambda a: asyncio.run(_poll(a)))

    k = sub.add_parser("keys", help="create, list and revoke API keys (stored hashed)")
    ksub = k.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    kc = ksub.add_parser("create", help="create a key and print it once: ID PLAN KEY")
    kc.add_argument("--name", default="", help="a label for the key")
    kc.add_argument("--plan", default="Free", choices=["Free", "Basic", "Pro", "Enterprise"], help="plan (default Free)")
    kc.add_argument("--scopes", help="comma-separated scopes, at least one (default: every public scope, site-intel and embed included; the review scope only when named: see sis reviewers)")
    kl = ksub.add_parser("list", help="list keys (id, prefix, plan, state, name, scopes)")
    kr = ksub.add_parser("revoke", help="revoke a key and its embed tokens; effective on the next request")
    kr.add_argument("key_id")
    for sp in (kc, kl, kr):
        db_arg(sp)
    k.set_defaults(run=lambda a: asyncio.run(_keys(a)))

    e = sub.add_parser("embed", help="mint, list and revoke embed tokens")
    esub = e.add_subparsers(dest="embed_command", required=True, metavar="ACTION")
    em = esub.add_parser("mint", help="mint an embed token from a key: ID CHAIN EXPIRES TOKEN")
    em.add_argument("key_id")
    em.add_argument("--origin", required=True, help="framing origin of the page, scheme://host[:port] (checked once)")
    em.add_argument("--budget", type=int, help="requests per visitor over the token's renewals (default SIS_EMBED_BUDGET)")
    em.add_argument("--ttl", type=int, help="lifetime of each token in seconds (default SIS_EMBED_TTL_S)")
    el = esub.add_parser("list", help="list embed tokens (of one key with --key)")
    el.add_argument("--key", dest="key_id", help="only this key's tokens")
    er = esub.add_parser("revoke", help="revoke every token of an embed chain")
    er.add_argument("chain_id")
    for sp in (em, el, er):
        db_arg(sp)
    e.set_defaults(run=lambda a: asyncio.run(_embed(a)))
    pr = sub.add_parser("prune", help="delete now the access rows past their retention (the leader's periodic "
                                      "pass: ended embed chains' visitor counters, old day and month counters, "
                                      "long-expired embed tokens)")
    db_arg(pr)
    pr.set_defaults(run=lambda a: asyncio.run(_prune(a)))
    from coordinator.sweeps.nodes_cli import add_parser as add_nodes_parser
    add_nodes_parser(sub, db_arg, _settings)
    from .review.cli import add_parser as add_reviewers_parser
    add_reviewers_parser(sub, db_arg, _settings)
    from .sweeps.cli import add_parser as add_jobs_parser
    add_jobs_parser(sub, db_arg, _settings)
    from .datasets.cli import add_parser as add_datasets_parser
    add_datasets_parser(sub, db_arg, _settings)
    from .widgets.cli import add_parser as add_widgets_parser
    add_widgets_parser(sub, _settings)
    return p


def _startup_problem(args: argparse.Namespace, exc: BaseException) -> str | None:
    """One line for a start-up mistake (a bad URL or setting, a port in use, a database
    that cannot be reached or does not exist), or None for anything else."""
    if isinstance(exc, (StartupError, SourceSettingsError)):
        return str(exc)
    from coordinator.core.db.migrate import SchemaOutOfDate
    if isinstance(exc, SchemaOutOfDate):        # a PostgreSQL schema behind the code: `sis migrate` first
        return str(exc)
    try:
        url = _settings(args).database_url
    except (StartupError, SourceSettingsError):
        return None
    return connection_problem(exc, url)


def _stdout_gone() -> bool:
    """Whether what reads our stdout has gone (``sis settings | head``): poll says POLLERR
    on the write end of a pipe whose reader closed it. Where it cannot be asked, yes."""
    import select

    try:
        p = select.poll()
        p.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in p.poll(0))
    except (AttributeError, ValueError, OSError):
        return True


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of what is still
    buffered for the closed pipe does not print a BrokenPipeError of its own."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


PIPE_CLOSED = 141       # 128 + SIGPIPE: what a shell reports of a command whose reader went away


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code = int(args.run(args) or 0)
        if sys.stdout is not None:
            sys.stdout.flush()      # here, where a closed pipe is caught, not at the interpreter's exit
        return code
    except KeyboardInterrupt:
        print(f"sis {args.command}: interrupted", file=sys.stderr)     # exit 130 said, not silent
        return 130
    except BrokenPipeError:
        # The reader of our output went away (`sis settings | head`, `sis jobs list | less` quit):
        # stop quietly, as a command killed by SIGPIPE does. SIGPIPE itself is left ignored, as
        # Python leaves it: `sis serve` writes to sockets, whose reset peers must not kill it.
        if not _stdout_gone():
            raise
        _quiet_stdout()
        return PIPE_CLOSED
    except Exception as exc:
        problem = _startup_problem(args, exc)
        if problem is None:
            raise
        print(f"sis {args.command}: {problem}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
