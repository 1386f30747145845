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
"""
from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from sweep_engine.schema import Job, Result, SchemaError, validate

from . import identity as ident_mod
from . import refusals
from .config import Config, Paths
from .contribution import Contribution
from .engine_failures import EngineFailures, in_words
from .files import read_json, remove, why_not_written
from .journal import Journals
from .lock import DataLock
from .photos import Fetched, fetch_photos
from .policy import Policy
from .progress import Progress, StatusFile
from .protocol import Client, Lease, NoWork, Refused, Unreachable, revocation
from .spool import Spool, Spooled, legacy_owner

log = logging.getLogger("sis.node.loop")
UPDATE_CHECK_S = 24 * 3600.0
RELEASE_NOW_S = 2.0     # how long a second stop signal waits to give back the job held ahead
EXIT_UNSENT = 5         # --max-jobs: a result of the run is not acknowledged (left in the spool, or refused)


class EngineLike(Protocol):
    """What the loop needs of an engine: its identity, and a job's result from its photos."""

    version: str
    build: str

    def run_job(self, job: Job, images: dict[str, bytes]) -> Result: ...


@dataclass
class Device:
    label: str      # e.g. "cuda:0 NVIDIA H100 80GB HBM3", or "cpu (development run, --allow-cpu)"
    on_gpu: bool
    gpu_text: str   # what enrolment tells the coordinator about this node's GPUs


@dataclass
class Ahead:
    """A job leased before the running one ends: its photos are fetched and its lease kept
    alive meanwhile, so it starts as soon as the engine is free."""

    lease: Lease
    job: Job
    photos: asyncio.Task            # -> Fetched
    beats: asyncio.Task
    lost: asyncio.Event             # set when the coordinator ends its lease

    def drop(self) -> None:
        self.photos.cancel()
        self.beats.cancel()


class Backoff:
    """Exponential backoff with equal jitter: delay in [cap/2, cap], cap = base * 2^n up to max."""

    def __init__(self, base: float, maximum: float, rng: random.Random | None = None):
        self.base, self.maximum = base, maximum
        self.rng = rng or random.Random()
        self.failures = 0

    def next(self) -> float:
        cap = min(self.maximum, self.base * (2 ** self.failures))
        self.failures += 1
        return cap / 2 + self.rng.uniform(0, cap / 2)

    def reset(self) -> None:
        self.failures = 0


class Fatal(Exception):
    """The agent cannot go on (revoked, engine build refused); the message says why."""


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn`` in a daemon thread (not the default executor: a second Ctrl-C must not
    wait for a long engine run to end before the process can exit)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future = loop.create_future()

    def settle(value: Any, exc: BaseException | None) -> None:
        if not fut.done():
            fut.set_exception(exc) if exc is not None else fut.set_result(value)

    def target() -> None:
        try:
            value, exc = fn(*args), None
        except BaseException as e:  # handed to the awaiting task, not lost in the thread
            value, exc = None, e
        try:
            loop.call_soon_threadsafe(settle, value, exc)
        except RuntimeError:  # the loop closed: the agent stopped at once
            pass

    threading.Thread(target=target, daemon=True, name="sis-engine").start()
    return await fut


def _retrieve(fut: asyncio.Future) -> None:
    """Done callback for a task the agent may let go unawaited: its exception counts as seen,
    so asyncio never logs "exception was never retrieved". A cancelled one has none to see, and
    ``exception()`` raises CancelledError there, which asyncio logs as "Exception in callback"
    with a traceback: a second Ctrl-C during a job leaves the engine's task to be cancelled as
    the event loop shuts down."""
    if not fut.cancelled():
        fut.exception()


def _raise_if_cancelled() -> None:
    """Honour a cancellation that ``asyncio.wait_for`` swallowed: on Python 3.11 a cancel that
    lands as the awaited event completes is lost, and the loop would turn for ever."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class Agent:
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
        self.enrol_secret = enrol_secret
        self.update_check = update_check
        self.on_enrolled = on_enrolled    # once enrolled (``sis-node run`` keeps the URL then, not before)
        self.max_jobs = max_jobs          # stop once this many jobs are finished; 0: no limit
        self.client = Client(config.coordinator, timeout_s=config.request_timeout_s)
        self.identity: ident_mod.Identity | None = None
        self.stop_event: asyncio.Event | None = None
        self.now_event: asyncio.Event | None = None
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
        try:
            await asyncio.wait_for(self.stop_event.wait(), timeout=max(0.0, seconds))
        except asyncio.TimeoutError:
            pass
        _raise_if_cancelled()
        return self.stopping

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
        self.stop_event, self.now_event = asyncio.Event(), asyncio.Event()
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
                _raise_if_cancelled()
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
            kept = self.journals.sort_out(last.coordinator if last is not None else "")
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

    def _hold_ahead(self, lease: Lease) -> None:
        """Hold a job leased before the running one ends: fetch its photos and keep its lease
        alive from now on. A job that does not fit the schema is refused at once."""
        job = self._job_of(lease)
        if job is None:
            return
        try:
            self.journals.write(self.paths.ahead_job_file, {"leaseId": lease.lease_id, "jobId": job.job_id})
        except OSError as exc:   # the journal only spares the job a failure after a crash; hold it anyway
            log.warning("job %s, held ahead, could not be journalled (%s); after a crash its lease lapses",
                        job.job_id, exc)
        photos = asyncio.ensure_future(self._fetch(job))
        photos.add_done_callback(_retrieve)  # awaited later, or dropped
        lost, beats = self._keep_alive(lease)
        self._ahead = Ahead(lease, job, photos, beats, lost)
        self.status.update(ahead={"jobId": job.job_id, "photos": len(job.photos)})
        log.debug("job %s held ahead (lease %s); fetching its photos", job.job_id, lease.lease_id)

    def _let_go_ahead(self) -> Ahead | None:
        """The job held ahead, if any, no longer held: its photos' fetch and heartbeats stopped.
        Its journal stays until the lease is known to be ended or given back (``_forget_ahead``)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.drop()
            self.status.update(ahead=None)
        return ahead

    async def _give_back_ahead(self, why: str) -> None:
        """Hand back the job held ahead, not started, so it goes back to the queue now and no
        failure is counted on it. If the coordinator cannot be told (or not within
        ``RELEASE_NOW_S`` of a second stop signal), the lease lapses after its TTL instead."""
        ahead = self._let_go_ahead()
        if ahead is None:
            return
        lease, problem = ahead.lease, "no answer in time to a second stop signal"
        try:
            if await self._unless_now(asyncio.ensure_future(self.client.release(lease.lease_id, why)),
                                      RELEASE_NOW_S):
                log.info("%s: job %s, held ahead (lease %s), is given back", why, ahead.job.job_id, lease.lease_id)
                self._forget_ahead()
                return
        except (Unreachable, Refused) as exc:
            problem = str(exc)
        log.warning("%s: job %s, held ahead (lease %s), could not be given back (%s); the next start gives it "
                    "back, or it lapses after its TTL", why, ahead.job.job_id, lease.lease_id, problem)

    def _forget_ahead(self) -> None:
        remove(self.paths.ahead_job_file)

    async def _give_back_journalled_ahead(self) -> bool:
        """After a restart: give back the job the last run held ahead and never started, if it
        journalled one, so the coordinator queues it again now with no failure counted; a lease
        already ended stays as it was. False when the coordinator is unreachable."""
        doc = read_json(self.paths.ahead_job_file)
        lease_id = str(doc.get("leaseId") or "") if isinstance(doc, dict) else ""
        if lease_id:
            try:
                answer = await self.client.release(lease_id, "held ahead when the node agent stopped; given back "
                                                             "at its restart")
                log.info("job %s, held ahead before a restart (lease %s), is given back (the lease is %s)",
                         doc.get("jobId"), lease_id, answer.get("state") or "ended")
            except Unreachable as exc:
                await self._unreachable("giving back the job held ahead before a restart", exc)
                return False
            except Refused as exc:
                log.info("job %s, held ahead before a restart (lease %s), is no longer ours (%s)",
                         doc.get("jobId"), lease_id, exc.message)
        self._forget_ahead()
        return True

    async def _refused(self, what: str, exc: Refused) -> None:
        if exc.status == 401:
            log.warning("%s: the coordinator no longer knows this node's token; enrolling again", what)
            ident_mod.forget_token(self.paths.identity_file, self.identity)
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
            self.identity = ident_mod.enrolled(p.identity_file, self.identity, node_id, token)
            self.backoff.reset()
            log.info("enrolled with %s as node %s", self.config.coordinator, node_id)
        self.client.token = self.identity.token
        if self.on_enrolled is not None:
            self.on_enrolled()
        self.status.update(nodeId=self.identity.node_id)
        return True

    # ---- recovery after a restart -----------------------------------------------------

    async def _recover(self) -> bool:
        """Give back the job held ahead before a restart, then resume the journalled job if its
        lease still holds; False when the coordinator is unreachable."""
        if not await self._give_back_journalled_ahead():
            return False
        doc = read_json(self.paths.current_job_file)
        if not doc:
            self._recovered = True
            return True
        # A journal that is not an object ("y") raised here at every turn, and no job ever ran.
        lease_id = str(doc.get("leaseId") or "") if isinstance(doc, dict) else ""
        if not lease_id or self.spool.get(lease_id) is not None:
            remove(self.paths.current_job_file)
            self._recovered = True
            return True
        try:
            beat = await self.client.heartbeat(lease_id)
        except Unreachable as exc:
            await self._unreachable("checking the job leased before a restart", exc)
            return False
        except Refused as exc:
            beat = {"action": "cancel", "reason": exc.message}
        self._recovered = True
        if beat.get("action") != "continue":
            log.info("the job leased before a restart (%s, lease %s) is no longer ours (%s); "
                     "the coordinator re-leases it", doc.get("jobId"), lease_id, beat.get("reason") or "cancelled")
            remove(self.paths.current_job_file)
            return True
        log.info("resuming job %s, leased before a restart (lease %s still holds)", doc.get("jobId"), lease_id)
        await self._work(Lease(lease_id, doc.get("job"), beat.get("expiresAt"), doc.get("heartbeatS")),
                         resumed=True)
        return True

    # ---- one job ----------------------------------------------------------------------

    async def _work(self, lease: Lease, resumed: bool = False, ahead: Ahead | None = None) -> None:
        """One job, from its photos to its spooled result. ``ahead``: the job was held ahead,
        its photos fetched (or being fetched) and its heartbeats already running."""
        if ahead is not None:
            job, lost, beats = ahead.job, ahead.lost, ahead.beats
        else:
            job = self._job_of(lease)
            if job is None:
                return
            lost, beats = self._keep_alive(lease)
        outcome = "abandoned"
        try:
            self.status.update(state="working", job={"jobId": job.job_id, "leaseId": lease.lease_id,
                                                     "photos": len(job.photos)}, ahead=None)
            if not resumed:
                try:
                    self.journals.write(self.paths.current_job_file, {"leaseId": lease.lease_id, "jobId": job.job_id,
                                                                      "job": lease.job, "heartbeatS": lease.heartbeat_s})
                except OSError as exc:   # the journal only spares the job a restart; work it anyway
                    log.warning("job %s cannot be journalled in %s (%s); a restart would lose it", job.job_id,
                                self.paths.current_job_file, why_not_written(exc))
            if ahead is not None:
                self._forget_ahead()    # journalled as the current job now
            outcome = await self._compute(job, lease, lost, ahead.photos if ahead else None)
        finally:
            if ahead is not None:
                ahead.photos.cancel()    # done by now, unless the job ended before them
            beats.cancel()
            # Whatever the heartbeat task ended with (cancelled, or a fault of its own) must not
            # replace how the job ended; a cancel of this task still propagates from here.
            await asyncio.gather(beats, return_exceptions=True)
            self.progress.finish(outcome)
            self.status.update(job=None, progress=None, spooled=len(self.spool))
        if outcome == "spooled":
            self.jobs_finished += 1
            if self.max_jobs and self.jobs_finished >= self.max_jobs and not self.stopping:
                log.info("finished %d job(s) as --max-jobs asked; stopping", self.jobs_finished)
                self.stop_event.set()
        # The result is submitted while the next job runs (``_meanwhile``), or at the next turn,
        # asking for the job after in the same request: one request per job, not two.

    async def _compute(self, job: Job, lease: Lease, lost: asyncio.Event,
                       photos: asyncio.Task | None = None) -> str:
        """``photos``: the job's photos, fetched while the last job ran (else fetched now)."""
        t0 = time.monotonic()
        self.progress.start(job.job_id, len(job.photos))

        def photo_done(n: int, total: int) -> None:
            self.progress.step("fetching photos", n, total)
            self.status.update(progress=self.progress.snapshot())

        if photos is not None:
            fetched = await photos
            photo_done(len(job.photos), len(job.photos))
        else:
            fetched = await self._fetch(job, photo_done)
        if lost.is_set() or self.now_event.is_set():
            return self._drop(job, lost)
        self.progress.step("running the engine", len(job.photos))
        self.status.update(progress=self.progress.snapshot())
        run = asyncio.ensure_future(in_thread(self.engine.run_job, job, fetched.images))
        meanwhile = asyncio.ensure_future(self._meanwhile())
        meanwhile.add_done_callback(_retrieve)   # retrieved, whatever ends first
        try:
            outcome = await self._finish(job, lease, lost, fetched, run, t0)
            # Once the result is spooled: what runs beside it ends, unless the agent stops at once.
            await self._unless_now(meanwhile)
        except BaseException:
            meanwhile.cancel()
            raise
        return outcome

    async def _finish(self, job: Job, lease: Lease, lost: asyncio.Event, fetched: Fetched, run: asyncio.Future,
                      t0: float) -> str:
        """The engine's run of the job, to its result in the spool."""
        engine_t0 = time.monotonic()
        stop_now = asyncio.ensure_future(self.now_event.wait())
        try:
            await asyncio.wait({run, stop_now}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_now.cancel()
        if not run.done():
            run.add_done_callback(_retrieve)  # retrieved, so never "never retrieved"
            return self._drop(job, lost)
        try:
            result = run.result()
        except Exception as exc:
            log.exception("the engine failed on job %s; its lease will lapse and the job is re-leased", job.job_id)
            remove(self.paths.current_job_file)
            await self._engine_failed(job, in_words(exc))
            return "engine failed"
        engine_s = time.monotonic() - engine_t0
        if lost.is_set():
            return self._drop(job, lost)
        try:
            result = self._finish_result(result, job, fetched, engine_s, time.monotonic() - t0)
        except SchemaError as exc:
            log.error("the engine's result for %s does not fit the schema (%s); not submitted", job.job_id, exc)
            remove(self.paths.current_job_file)
            await self._engine_failed(job, f"a result that does not fit the schema ({str(exc)[:300]})")
            return "result malformed"
        self.engine_failures.succeeded()
        self.progress.step("spooling the result", len(job.photos))
        stats = {"photos": len(job.photos) - len(result.skipped), "facts": len(result.facts),
                 "seconds": engine_s, "onGpu": self.device.on_gpu}
        try:
            self.spool.put(lease.lease_id, job.job_id, result.to_dict(), stats)
        except OSError as exc:
            # A full disk: the result cannot be kept, so it is not sent either (it is sent only
            # from the spool). The job's journal stays: the next turn resumes the job on its
            # lease, if it still holds, once the backoff has given the volunteer time to free space.
            why = f"cannot save the result of {job.job_id} in {self.spool.folder}: {why_not_written(exc)}"
            log.error("%s", why)
            self.status.update(lastError=why)
            self._recovered = False
            # A job held ahead would be worked next and take the journal's place: it goes back.
            await self._give_back_ahead("the node cannot save results (its disk refused a write)")
            await self._sleep(self.backoff.next())
            return "not spooled (the disk refused it)"
        remove(self.paths.current_job_file)
        return "spooled"

    async def _engine_failed(self, job: Job, why: str) -> None:
        """One more engine failure in a row: said in the status, and the agent pauses itself once
        they reach ``engine_failure_limit`` (``EngineFailures``). With no limit, a run of failures
        still slows the agent down."""
        self.status.update(lastError=f"the engine failed on {job.job_id}: {why}")
        if self.engine_failures.failed(job.job_id, why) is None and not self.engine_failures.limit \
                and self.engine_failures.in_a_row >= 3:
            await self._sleep(self.backoff.next())

    def _fetch(self, job: Job, on_photo: Callable[[int, int], None] | None = None):
        return fetch_photos(job, timeout_s=self.config.photo_timeout_s, max_bytes=self.config.photo_max_bytes,
                            concurrency=self.config.photo_concurrency, on_photo=on_photo)

    async def _meanwhile(self) -> None:
        """While the engine runs (``work_ahead``): submit the last job's result, asking for the
        next job with it, or lease the next job when none came that way; and start fetching
        that job's photos. The coordinator not answering costs nothing here: the result stays
        in the spool for the next turn, and the next job is leased then."""
        if not self.config.work_ahead:
            return
        self._next = None
        try:
            more = self._may_take_more(1, self.policy.check())
            if self.spool.pending() and not await self._flush_spool(ask_next=more and self._ahead is None):
                return      # not reachable: the next turn tries again, with its backoff
            if self._ahead is not None or self._next is not None or not self._may_take_more(1, self.policy.check()):
                return
            try:
                got = await self.client.lease()
            except (Unreachable, Refused) as exc:     # the next turn asks again, and handles what it answers
                log.debug("leasing a job ahead: %s", exc)
                return
            if isinstance(got, Lease):
                self._hold_ahead(got)
            else:
                self._next = got
        except (Fatal, asyncio.CancelledError):
            raise
        except Exception:   # the job the engine runs must not be lost to a fault here
            log.exception("unexpected fault while working ahead; the next turn goes on without")

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

    def _drop(self, job: Job, lost: asyncio.Event) -> str:
        if lost.is_set():
            log.warning("job %s dropped: the coordinator ended its lease", job.job_id)
            remove(self.paths.current_job_file)
            return "lease lost"
        return "left to its lease (stopping now)"

    def _finish_result(self, result: Result, job: Job, fetched: Fetched, engine_s: float, total_s: float) -> Result:
        """Stamp who and where, account for photos the agent could not fetch, and check the whole."""
        result.node_id = self.identity.node_id
        result.device = self.device.label
        # Photos the agent could not fetch: the agent's reason is the one that says what happened.
        mine = {k.photo_id: k for k in fetched.skipped}
        seen = {k.photo_id for k in result.skipped} | {m.photo_id for m in result.measurements}
        skipped = [mine.get(k.photo_id, k) for k in result.skipped] + [k for k in fetched.skipped
                                                                        if k.photo_id not in seen]
        order = {p.id: i for i, p in enumerate(job.photos)}
        result.skipped = sorted(skipped, key=lambda k: order.get(k.photo_id, len(order)))
        t = result.timings
        t.fetch_s = round(fetched.seconds, 4)
        t.infer_s = round(min(t.infer_s, engine_s) if t.infer_s > 0 else engine_s, 4)
        t.total_s = round(max(total_s, t.fetch_s, t.infer_s), 4)
        if result.job_id != job.job_id:
            raise SchemaError([f"jobId: the engine answered {result.job_id!r} for job {job.job_id!r}"])
        validate(result)
        return result

    def _job_of(self, lease: Lease) -> Job | None:
        """The lease's job; None when it does not fit the schema (refused, ``_refuse_job``)."""
        try:
            return Job.from_dict(lease.job)
        except SchemaError as exc:
            self._refuse_job(lease, exc)
            return None

    def _keep_alive(self, lease: Lease) -> tuple[asyncio.Event, asyncio.Task]:
        """Heartbeats for ``lease`` from now on, and the event they set if the coordinator ends it."""
        lost = asyncio.Event()
        return lost, asyncio.ensure_future(self._heartbeats(lease, lost))

    def _refuse_job(self, lease: Lease, exc: SchemaError) -> None:
        """A job that does not fit the schema is never used. It is reported in the log and the
        status, counted, and its lease is left to lapse: the coordinator counts a failure on
        the job each time, and parks it after its failure limit."""
        job_id = lease.job.get("jobId") if isinstance(lease.job, dict) else None
        reasons = exc.reasons[:10]
        log.error("job %s (lease %s) refused: it does not fit the job schema: %s", job_id or "?", lease.lease_id,
                  "; ".join(reasons))
        self.contribution.refused_job()
        self.status.update(lastRefusedJob={"jobId": job_id, "leaseId": lease.lease_id, "reasons": reasons,
                                           "at": time.time()})

    async def _heartbeats(self, lease: Lease, lost: asyncio.Event) -> None:
        interval = self.config.heartbeat_interval_s
        if lease.heartbeat_s:
            interval = min(interval, lease.heartbeat_s)
        while True:
            await asyncio.sleep(interval)
            try:
                doc = await self.client.heartbeat(lease.lease_id)
            except Unreachable as exc:
                self.heartbeat_failures += 1
                log.warning("heartbeat for lease %s failed (%s); the job goes on", lease.lease_id, exc.message)
                self.status.update(lastError=exc.message)
                continue
            except Refused as exc:
                doc = {"action": "cancel", "reason": exc.message}
            if doc.get("action") != "continue":
                log.warning("the coordinator cancelled lease %s: %s", lease.lease_id, doc.get("reason"))
                lost.set()
                self.leases_lost += 1
                self.status.update(lastError=f"lease {lease.lease_id} cancelled: {doc.get('reason')}")
                return

    # ---- submission -------------------------------------------------------------------

    async def _flush_spool(self, ask_next: bool = False) -> bool:
        """Submit every spooled result; False when the coordinator could not be reached.
        ``ask_next``: the last one also asks for the next job: a job given is held ahead (its
        photos fetched from now on), "none waiting" kept in ``self._next`` for the next turn."""
        items = self.spool.pending()
        for i, item in enumerate(items):
            self.spool.attempted(item)
            try:
                if ask_next and i == len(items) - 1:
                    answer, nxt = await self.client.submit_and_lease(item.lease_id, item.result)
                    if isinstance(nxt, Lease):
                        self._hold_ahead(nxt)
                    else:
                        self._next = nxt
                else:
                    answer = await self.client.submit(item.lease_id, item.result)
            except Unreachable as exc:
                self._last_unreachable = exc
                self.status.update(spooled=len(self.spool))
                return False
            except Refused as exc:
                if exc.status == 401:
                    self._last_unreachable = Unreachable("the node token was refused; enrolling again")
                    await self._refused("submitting a result", exc)
                    return False
                self._rejected(item, exc)       # a revoked node's too, with the operator's reason
                continue
            self._acknowledged(item, answer)
        self.backoff.reset()
        self.status.update(spooled=len(self.spool))
        return True

    def _not_ours(self, item: Spooled, exc: Refused) -> str:
        """What a lease refused as not this node's (404) means when the result was spooled as
        another node: this node enrolled again since (its token refused, 401, or its identity
        file replaced), and a lease is its node's alone. Nothing the agent holds can send it
        (the coordinator would have to let a node take its earlier enrolment's leases over)."""
        spooled_as = item.result.get("nodeId") if isinstance(item.result, dict) else None
        now = self.identity.node_id if self.identity is not None else None
        if exc.status != 404 or not isinstance(spooled_as, str) or not now or spooled_as == now:
            return ""
        return (f"; it was spooled when this node was {spooled_as} at {self.config.coordinator}, and it is {now} "
                f"there now (it enrolled again): a lease of {spooled_as}'s can be submitted by {spooled_as} alone")

    def _acknowledged(self, item: Spooled, answer: dict[str, Any]) -> None:
        self.spool.acknowledged(item)
        s = item.stats
        total = self.contribution.acknowledged(int(s.get("photos", 0)), int(s.get("facts", 0)),
                                               float(s.get("seconds", 0.0)), bool(s.get("onGpu")))
        log.info("result of %s acknowledged (result %s, job %s%s); contribution: %d jobs",
                 item.job_id, answer.get("resultState"), answer.get("jobState"),
                 ", a resend" if answer.get("duplicate") else "", total["jobs"])

    def _rejected(self, item: Spooled, exc: Refused) -> None:
        reasons = exc.details.get("reasons") or []
        why = exc.message + (": " + "; ".join(map(str, reasons[:10])) if reasons else "") + self._not_ours(item, exc)
        log.error("result of %s refused for good (kept in %s): %s", item.job_id, self.spool.rejected_dir, why)
        self.spool.rejected(item, why)
        self.results_rejected += 1
        self.contribution.rejected()
        self.status.update(lastRejected={"jobId": item.job_id, "reason": why, "at": time.time()})
