"""The job loop: lease -> heartbeats while working -> fetch photos -> engine -> spool -> submit.

Working ahead (``work_ahead``, on by default): while the engine runs one job,
the agent submits the previous job's result, takes the next job with it (or,
when none came that way, leases one) and fetches that job's photos, so on a
GPU, where a job's engine time is seconds, the engine does not also wait for
the photo provider between jobs. At most one job is held ahead of the one
running; its lease is kept alive by its own heartbeats.

Never lose work:
- a result is spooled durably before its first submission and resent until
  the coordinator acknowledges it (or refuses it for good, when it is kept aside);
- the leased job is journalled (``current-job.json``); an agent restarted
  while its lease still holds resumes the job, else the coordinator re-leases it;
- so is a job held ahead (``ahead-job.json``) until it starts or is given
  back; an agent restarted with one journalled gives it back first, so a crash
  costs that job no failure;
- while the coordinator cannot be reached the agent retries with exponential
  backoff and jitter, logging each delay.

Be polite: nothing is leased while a pause condition holds; the engine runs in
its own thread so heartbeats keep the lease while it works.

Stopping: the first SIGINT/SIGTERM finishes the current job (its result is
spooled and, if the coordinator answers, submitted) and leases nothing more;
a second one stops at once, leaving the lease to lapse so the coordinator
re-leases the job (or this node resumes it on its next start, if in time).
A job held ahead and not yet started is given back (``release``): the
coordinator queues it again at once, counting no failure. So is one held when
a pause begins: nothing new starts while paused.

Where it is: this module is the agent itself, its state, its turn (``_once``), enrolment,
stopping and backing off. What it does to a job is in parts named for it, each a mixin of
``Agent`` sharing its state: ``node_agent.running`` (one job, from its photos to its
result in the spool), ``node_agent.leasing`` (the job held ahead, heartbeats, leases given
back, journalled jobs taken up after a restart) and ``node_agent.submitting`` (the spool
sent, and the coordinator's answers). They were one module of 900 lines.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from typing import Any, Callable

from . import identity as ident_mod
from . import refusals
from .aio import in_thread, raise_if_cancelled  # noqa: F401  (in_thread: the name this module always had)
from .backoff import Backoff
from .config import Config, Paths
from .contribution import Contribution
from .engine_failures import EngineFailures
from .files import why_not_written
from .journal import Journals
from .leasing import RELEASE_NOW_S, Ahead, Leasing  # noqa: F401  (RELEASE_NOW_S: the name this module always had)
from .lock import DataLock
from .policy import Policy
from .progress import Progress, StatusFile
from .protocol import Client, NoWork, Refused, Unreachable, build_refusal, revocation
from .refusals import Fatal
from .running import Device, EngineLike, Running
from .spool import Spool, last_enrolled, legacy_owner
from .submitting import Submitting

log = logging.getLogger("sis.node.loop")
UPDATE_CHECK_S = 24 * 3600.0
EXIT_UNSENT = 5         # --max-jobs: a result of the run is not acknowledged (left in the spool, or refused)


class Agent(Leasing, Running, Submitting):
    """The node agent: enrols, then leases, runs and submits jobs until stopped (``run``)."""

    def __init__(self, config: Config, paths: Paths, engine: EngineLike, device: Device, *,
                 policy: Policy | None = None, progress: Progress | None = None,
                 rng: random.Random | None = None, enrol_secret: str | None = None,
                 update_check: Callable[[Client], Any] | None = None, max_jobs: int = 0,
                 data_lock: DataLock | None = None, on_enrolled: Callable[[], None] | None = None):
        self.config, self.paths, self.engine, self.device = config, paths, engine, device
        self.data_lock = data_lock or DataLock(paths.lock_file)   # ``run`` holds it (node_agent.lock)
        self.policy = policy or Policy(config, paths.pause_file)
        self.progress = progress or Progress()
        self.spool = Spool(paths.spool_dir, config.coordinator)   # its results only (``_keep_others``)
        self.journals = Journals(paths, config.coordinator)      # its jobs' journals only (the same)
        self.contribution = Contribution(paths.stats_file)
        self.status = StatusFile(paths.status_file, on_update=self._changed)
        self._tick: asyncio.Event | None = None
        self.backoff = Backoff(config.backoff_base_s, config.backoff_max_s, rng)
        # While the data folder refuses writes (a journal, a result): reset by one that succeeds,
        # not by the coordinator answering, which ``backoff`` is, so a full disk backs off too.
        self.disk_backoff = Backoff(config.backoff_base_s, config.backoff_max_s, rng)
        self.enrol_secret = enrol_secret
        self.update_check = update_check
        self.on_enrolled = on_enrolled    # once enrolled (``sis-node run`` keeps the URL then, not before)
        self.max_jobs = max_jobs          # stop once this many jobs are finished; 0: no limit
        self.client = Client(config.coordinator, timeout_s=config.request_timeout_s, engine_build=engine.build)
        self.identity: ident_mod.Identity | None = None
        self.stop_event: asyncio.Event | None = None
        self.now_event: asyncio.Event | None = None
        # Set once the coordinator refuses this node's engine build (``_build_withdrawn``): the
        # running job is given back (``Running._finish``) and the agent stops.
        self.build_refused: asyncio.Event | None = None
        self.leases_taken = 0
        self._idle_said = False         # "no job waits" logged at info once a quiet spell, then at debug
        self.paused_turns = 0
        self.heartbeat_failures = 0
        self.leases_lost = 0
        self._next_update_check = 0.0
        self.jobs_finished = 0
        self.results_rejected = 0         # results the coordinator refused for good in this run
        self._recovered = False
        self.engine_failures = EngineFailures(config.engine_failure_limit, paths.pause_file)
        self._last_unreachable = Unreachable("the coordinator cannot be reached")
        self._next: NoWork | None = None   # the answer "no job waiting", given with the last result
        self._ahead: Ahead | None = None   # the next job, its photos fetched while the engine runs

    # ---- observing (status, tests) ----------------------------------------------------

    def _changed(self) -> None:
        if self._tick is not None:
            self._tick.set()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float) -> None:
        """Wait until ``predicate()`` holds, checked at each change of the agent's state."""
        if self._tick is None:
            self._tick = asyncio.Event()

        async def waiting() -> None:
            while not predicate():
                self._tick.clear()
                await self._tick.wait()
        await asyncio.wait_for(waiting(), timeout)

    # ---- stopping ---------------------------------------------------------------------

    def request_stop(self) -> None:
        """First call: finish the current job, then stop. Second call: stop now."""
        if self.stop_event is None:
            return
        if self.stop_event.is_set():
            log.warning("stopping now: the current job is left to its lease (it is re-leased or resumed)")
            self.now_event.set()
        else:
            log.info("stopping: the current job (if any) finishes first; a second signal stops at once")
            self.stop_event.set()

    @property
    def stopping(self) -> bool:
        return self.stop_event is not None and self.stop_event.is_set()

    async def _sleep(self, seconds: float) -> bool:
        """Wait ``seconds`` or until a stop is asked; True when stopping."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.stop_event.wait(), timeout=max(0.0, seconds))
        raise_if_cancelled()
        return self.stopping

    async def _unless_now(self, task: asyncio.Future, grace_s: float = 0.0) -> bool:
        """Wait for ``task``, unless the agent is told to stop at once: then it has ``grace_s`` more
        and is cut off (a result it was sending is resent at the next start; a lease it was taking
        lapses after its TTL). True when it ended by itself; its exception, if any, is raised here."""
        stop_now = asyncio.ensure_future(self.now_event.wait())
        try:
            await asyncio.wait({task, stop_now}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                await asyncio.wait({task}, timeout=grace_s)
        finally:
            stop_now.cancel()
            if not task.done():
                task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if task.cancelled():
            return False
        if task.exception() is not None:
            raise task.exception()
        return True

    async def _unreachable(self, what: str, exc: Unreachable) -> bool:
        delay = self.backoff.next()
        if exc.retry_after is not None:
            delay = max(delay, min(exc.retry_after, self.config.backoff_max_s))
        log.warning("%s: %s; retrying in %.1f s (attempt %d)", what, exc.message, delay, self.backoff.failures)
        self.status.update(state="backing off", lastError=exc.message, retryAt=time.time() + delay)
        return await self._sleep(delay)

    # ---- the loop ---------------------------------------------------------------------

    async def run(self) -> int:
        """Work until stopped; the exit status. The data folder's lock is held throughout (taken
        here unless the caller, ``sis-node run``, holds it already): ``AlreadyRunning`` is raised
        before anything in the folder is touched when another agent holds it, since two agents
        on one folder took each other's journalled jobs."""
        owned = not self.data_lock.held
        if owned:
            self.data_lock.acquire()
        try:
            return await self._run()
        finally:
            if owned:
                self.data_lock.release()

    async def _run(self) -> int:
        self.stop_event, self.now_event, self.build_refused = asyncio.Event(), asyncio.Event(), asyncio.Event()
        elsewhere, jobs_elsewhere = self._keep_others()
        self.status.doc = {}
        self.status.update(state="starting", coordinator=self.config.coordinator, device=self.device.label,
                           onGpu=self.device.on_gpu, engineVersion=self.engine.version,
                           engineBuild=self.engine.build, startedAt=time.time(), job=None,
                           spooled=len(self.spool), spooledElsewhere=elsewhere, jobsElsewhere=jobs_elsewhere,
                           lastError=None)
        try:
            if not await self._enrol():
                return self._stopped(0)
            while not self.stopping:
                raise_if_cancelled()
                try:
                    await self._check_updates()
                    await self._once()
                except (Fatal, asyncio.CancelledError):
                    raise
                except OSError as exc:
                    if exc.filename is None:
                        raise
                    # A file of the data folder that cannot be written (a full disk): one line, not
                    # a traceback a turn; what was spooled stays spooled, and the loop goes on.
                    log.error("cannot write %s (%s); going on after a pause", exc.filename, why_not_written(exc))
                    self.status.update(lastError=f"cannot write {exc.filename}: {why_not_written(exc)}")
                    await self._sleep(self.backoff.next())
                except Exception:  # a fault of this agent must not end the volunteer's contribution
                    log.exception("unexpected fault in the job loop; going on after a pause")
                    self.status.update(lastError="unexpected fault in the job loop (see the log)")
                    await self._sleep(self.backoff.next())
            await self._give_back_ahead("the node agent is stopping")
            # The last job's result, if the coordinator answers before a second stop signal.
            await self._unless_now(asyncio.ensure_future(self._flush_spool()))
        except Fatal as exc:
            if isinstance(exc, refusals.BuildRefused):
                await self._after_build_refused()
            log.error("%s", exc)
            self.status.update(state="stopped", lastError=str(exc), stoppedBecause=str(exc))
            return 2
        finally:
            self._let_go_ahead()     # ended by a fault or a cancel: its heartbeats must end with it
            await self.client.close()
        return self._stopped(self._max_jobs_outcome())

    def _keep_others(self) -> tuple[dict[str, int], list[dict[str, str]]]:
        """Results in the spool for other coordinators than this one, by coordinator, and the
        journals of their jobs: kept, never sent or asked about here (their leases are theirs),
        and said once. Read before enrolment rewrites the coordinator used last, which is whose
        an earlier agent's results and journals are (``legacy_owner``)."""
        self.spool.owner = legacy_owner(self.paths.identity_file, self.config.coordinator)
        try:
            self.spool.adopt()
        except OSError as exc:      # each is still taken as its node's, in memory
            log.warning("the spool's results of an earlier sis-node could not be rewritten (%s)", why_not_written(exc))
        elsewhere = self.spool.elsewhere()
        for url, n in sorted(elsewhere.items()):
            log.warning("%d result(s) in the spool wait for %s, which this node no longer points at: they are kept, "
                        "and sent when it points there again (sis-node run --coordinator %s)", n, url, url)
        try:
            last = ident_mod.load(self.paths.identity_file)
        except ident_mod.IdentityUnreadable:
            last = None             # enrolment stops the agent with the reason
        try:
            kept = self.journals.sort_out(last_enrolled(last) or self.config.coordinator)
        except OSError as exc:
            log.warning("the job journals could not be sorted by coordinator (%s)", why_not_written(exc))
            kept = self.journals.elsewhere()
        for k in kept:
            log.warning("%s", k.describe())
        return elsewhere, [k.to_dict() for k in kept]

    def _max_jobs_outcome(self) -> int:
        """0, or ``EXIT_UNSENT`` when a ``--max-jobs`` run ends with a result the coordinator has
        not acknowledged: ``--max-jobs 1`` is the documented end-to-end check of a new machine,
        and it said 0 with its result left in the spool (the coordinator down) or refused for good."""
        if not self.max_jobs:
            return 0
        unsent = len(self.spool)
        if unsent:
            log.error("--max-jobs %d: %d result(s) not sent, the coordinator could not be reached: they wait in "
                      "the spool (%s) and are sent at the next start", self.max_jobs, unsent, self.spool.folder)
        if self.results_rejected:
            log.error("--max-jobs %d: %d result(s) refused for good by the coordinator (kept in %s, with the "
                      "reason above)", self.max_jobs, self.results_rejected, self.spool.rejected_dir)
        return EXIT_UNSENT if unsent or self.results_rejected else 0

    async def _check_updates(self) -> None:
        """Once at start and then daily: is a newer node app published? Tells; never downloads."""
        if self.update_check is None or not self.config.check_updates or time.monotonic() < self._next_update_check:
            return
        self._next_update_check = time.monotonic() + UPDATE_CHECK_S
        try:
            notice = await self.update_check(self.client)
        except Exception as exc:  # an update notice is a courtesy; it never stops the work
            log.debug("update check failed: %s", exc)
            return
        self.status.update(update=notice)

    def _stopped(self, code: int) -> int:
        self.status.update(state="stopped", job=None, spooled=len(self.spool))
        self.contribution.flush()
        if self.contribution.unwritten:
            log.warning("%d acknowledged job(s) of this run are not counted in %s, which cannot be written: "
                        "their results reached the coordinator", self.contribution.unwritten, self.contribution.path)
        others = sum(self.spool.elsewhere().values())
        log.info("stopped; %d results wait in the spool%s", len(self.spool),
                 f" (and {others} for other coordinators)" if others else "")
        return code

    async def _once(self) -> None:
        """One turn: unless a job is held ahead, resend spooled results (the last asking for the
        next job) and recover a journalled job; then, if not paused, work the job held ahead,
        or lease one. A job held ahead is given back when the agent stops or pauses."""
        if self._ahead is not None and (self.stopping or self.policy.check().paused):
            await self._give_back_ahead("the node agent is stopping" if self.stopping else "the node is paused")
        if self._ahead is None:
            # No job is asked for before a journalled one is resumed: it would take the journal's place.
            ask = self._recovered and self._may_take_more(0, self.policy.check())
            if not await self._flush_spool(ask_next=ask):
                await self._unreachable("submitting spooled results", self._last_unreachable)
                return
            if not self._recovered:
                await self._recover()     # the next turn submits what it spooled, and goes on
                return
        if self._ahead is not None and self._ahead.lost.is_set():
            ahead = self._let_go_ahead()
            self._forget_ahead()
            log.warning("job %s, held ahead, dropped: the coordinator ended its lease", ahead.job.job_id)
        verdict = self.policy.check()
        if self._ahead is not None and not self.stopping and not verdict.paused:
            ahead, self._ahead = self._ahead, None
            self.leases_taken += 1
            await self._work(ahead.lease, ahead=ahead)
            return
        if verdict.paused:
            await self._give_back_ahead("the node is paused")
            self.paused_turns += 1
            self.status.update(state="paused", pauseReasons=verdict.reasons, watching=verdict.watching)
            await self._sleep(self.config.pause_poll_s)
            return
        self.status.update(state="idle", pauseReasons=[], watching=verdict.watching)
        if self.stopping:
            return
        got, self._next = self._next, None
        if got is None:
            try:
                got = await self.client.lease()
            except Unreachable as exc:
                await self._unreachable("asking for a job", exc)
                return
            except Refused as exc:
                await self._refused("asking for a job", exc)
                return
            self.backoff.reset()
            self.status.update(lastError=None)
        if isinstance(got, NoWork):
            wait = got.retry_after if got.retry_after is not None else self.config.idle_poll_s
            # Said once a quiet spell, so that a volunteer (or a second demo node sharing the first's
            # identity, which is offered none of the jobs it already returned) sees why nothing happens.
            (log.debug if self._idle_said else log.info)(
                "no job waits for this node (none queued, or each one waiting already has this node's result); "
                "asking again in %.0f s", wait)
            self._idle_said = True
            await self._sleep(wait)
            return
        self._idle_said = False
        self.leases_taken += 1
        await self._work(got)

    def _may_take_more(self, running: int, verdict) -> bool:
        """Whether another job may be leased now, with ``running`` jobs not yet finished and the
        pause conditions as ``verdict`` (``Policy.check``) found them."""
        return (not self.stopping and not verdict.paused
                and not (self.max_jobs and self.jobs_finished + running >= self.max_jobs))

    # ---- refusals ---------------------------------------------------------------------

    async def _refused(self, what: str, exc: Refused) -> None:
        self._raise_if_build_refused(exc)
        if exc.status == 401:
            log.warning("%s: the coordinator no longer knows this node's token; enrolling again", what)
            try:
                ident_mod.forget_token(self.paths.identity_file, self.identity)
            except OSError as exc:      # forgotten in memory; the enrolment's own write says if it fails too
                log.warning("%s", self._identity_unwritten(exc))
            self.client.token = None
            await self._enrol()
            return
        if exc.status == 403:
            self._raise_if_revoked(exc)
            raise Fatal(f"{what}: {exc.message}. This node cannot go on with this coordinator")
        delay = self.backoff.next()
        log.error("%s: %s; trying again in %.0f s", what, exc.message, delay)
        self.status.update(lastError=exc.message)
        await self._sleep(delay)

    def _raise_if_build_refused(self, exc: Refused, build: str | None = None) -> None:
        """``BuildRefused`` when ``exc`` says this coordinator no longer accepts this node's engine
        build (``build``: the one the refused request carried, the engine's by default)."""
        refused = build_refusal(exc, build or self.engine.build)
        if refused is not None and refused == self.engine.build:
            raise self._build_withdrawn(refused)

    def _build_withdrawn(self, build: str) -> refusals.BuildRefused:
        """The stop for an engine build this coordinator no longer accepts: noted at once, so that
        the job the engine runs is given back (its result would be refused too), and returned
        for the caller to raise, once what it does is done."""
        if self.build_refused is not None:
            self.build_refused.set()
        return refusals.BuildRefused(refusals.build_withdrawn(self.config.coordinator, build))

    async def _after_build_refused(self) -> None:
        """Before stopping for a refused engine build: the job held ahead is given back (queued
        again at once, no failure counted), and what waits in the spool is sent, each result
        refused and kept in ``spool/rejected/`` with its reason as any refused result is (the
        coordinator may judge one of an earlier build otherwise). Bounded by a second stop signal."""
        await self._give_back_ahead("the coordinator no longer accepts this node's engine build")
        try:
            with contextlib.suppress(refusals.BuildRefused):    # each refused result is kept, as any is
                await self._unless_now(asyncio.ensure_future(self._flush_spool()))
        except Exception as exc:   # the stop and its reason come first
            log.debug("sending the spool before stopping: %s", exc)

    def _raise_if_revoked(self, exc: Refused) -> None:
        """``Fatal`` with the operator's reason when ``exc`` says this node was revoked."""
        reason = revocation(exc)
        if reason is not None:
            raise Fatal(refusals.revoked(self.config.coordinator, self.identity.node_id if self.identity else None,
                                         reason))

    # ---- enrolment --------------------------------------------------------------------

    async def _enrol(self) -> bool:
        p = self.paths
        try:
            self.identity = ident_mod.for_coordinator(p.identity_file, self.config.coordinator, self.config.name)
        except ident_mod.IdentityUnreadable as exc:
            raise Fatal(str(exc)) from None
        except OSError as exc:      # it had to change (a first run, a new name, a new form): one line, status 2
            raise Fatal(self._identity_unwritten(exc)) from None
        while not self.identity.enrolled:
            self.status.update(state="enrolling")
            facts = {"name": self.identity.name[:120], "platform": ident_mod.platform_text()[:200],
                     "gpu": self.device.gpu_text[:200], "engineVersion": self.engine.version,
                     "engineBuild": self.engine.build}
            try:
                node_id, token = await self.client.enrol(facts, self.enrol_secret)
            except Unreachable as exc:
                if await self._unreachable("enrolling", exc):
                    return False
                continue
            except Refused as exc:
                raise Fatal(refusals.enrolment_refused(self.config.coordinator, exc, bool(self.enrol_secret))) from None
            try:
                self.identity = ident_mod.enrolled(p.identity_file, self.identity, node_id, token)
            except OSError as exc:  # the token unkept: the next start would enrol again, as a new node
                raise Fatal(self._identity_unwritten(exc)) from None
            self.backoff.reset()
            log.info("enrolled with %s as node %s", self.config.coordinator, node_id)
        self.client.token = self.identity.token
        if self.on_enrolled is not None:
            self.on_enrolled()
        self.status.update(nodeId=self.identity.node_id)
        return True

    def _identity_unwritten(self, exc: OSError) -> str:
        return f"cannot write {self.paths.identity_file}: {why_not_written(exc)}"
