"""Running one job: its photos, the engine in its own thread, the result checked, stamped and
spooled; a job that does not fit the schema refused.

Part of the agent (``node_agent.loop``): these are ``Agent``'s methods, gathered in the
mixin class ``Running`` because they are what happens to one job between its lease and its
result in the spool; what is leased, heartbeaten and given back beside it is in
``node_agent.leasing``, what is submitted in ``node_agent.submitting``. They share the
agent's state (``self``), set up in ``Agent.__init__``. The engine's interface and the
device are here, the things a job runs on. The log is the agent loop's (``sis.node.loop``),
as it was when the agent was one module, so a volunteer's log reads the same.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

from sweep_engine.schema import Job, Result, SchemaError, validate

from .aio import in_thread, retrieve
from .engine_failures import in_words
from .files import remove, why_not_written
from .photos import Fetched, fetch_photos
from .protocol import Lease, ProtocolError

if TYPE_CHECKING:
    from .leasing import Ahead

log = logging.getLogger("sis.node.loop")


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


class Running:
    """One job, from its photos to its spooled result (a mixin of ``Agent``)."""

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
        outcome, disk_pause = "abandoned", None
        try:
            self.status.update(state="working", job={"jobId": job.job_id, "leaseId": lease.lease_id,
                                                     "photos": len(job.photos)}, ahead=None)
            if not resumed:
                try:
                    self.journals.write(self.paths.current_job_file, {"leaseId": lease.lease_id, "jobId": job.job_id,
                                                                      "job": lease.job, "heartbeatS": lease.heartbeat_s})
                except OSError as exc:
                    # The disk that refuses the journal refuses the result's spool file too: worked
                    # anyway, the job's result was computed and dropped, and the next job leased.
                    outcome, disk_pause = await self._give_back_unjournalled(job, lease, exc)
                else:
                    self.disk_backoff.reset()
            if ahead is not None:
                self._forget_ahead()    # journalled as the current job now, or given back
            if disk_pause is None:
                outcome = await self._compute(job, lease, lost, ahead.photos if ahead else None)
        finally:
            if ahead is not None:
                ahead.photos.cancel()    # done by now, unless the job ended before them
            beats.cancel()
            # Whatever the heartbeat task ended with (cancelled, or a fault of its own) must not
            # replace how the job ended; a cancel of this task still propagates from here.
            await asyncio.gather(beats, return_exceptions=True)
            if disk_pause is None:      # else said by ``_give_back_unjournalled``; no progress began
                self.progress.finish(outcome)
            self.status.update(job=None, progress=None, spooled=len(self.spool))
        if disk_pause is not None:      # its heartbeats ended: the lease given back is not "cancelled"
            await self._sleep(disk_pause)
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
        meanwhile.add_done_callback(retrieve)   # retrieved, whatever ends first
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
        """The engine's run of the job, to its result in the spool. Cut short by a second stop
        signal (the job left to its lease), or by the coordinator refusing this node's engine
        build meanwhile (the job given back: its result would be refused)."""
        engine_t0 = time.monotonic()
        stop_now = asyncio.ensure_future(self.now_event.wait())
        refused = asyncio.ensure_future(self.build_refused.wait())
        try:
            await asyncio.wait({run, stop_now, refused}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_now.cancel()
            refused.cancel()
        if not run.done():
            run.add_done_callback(retrieve)  # retrieved, so never "never retrieved"
            if self.build_refused.is_set() and not self.now_event.is_set():
                return await self._give_back_running(job, lease)
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
            # from the spool). The job's journal stays (the engine runs no job unjournalled,
            # ``_work``): the next turn resumes the job on its lease, which its heartbeats keep
            # meanwhile, once the backoff has given the volunteer time to free space. The result
            # is not held in memory to be sent from there: lost with the process, it would be
            # lost silently, where the journal is on disk and the job computed again from it.
            why = f"cannot save the result of {job.job_id} in {self.spool.folder}: {why_not_written(exc)}"
            log.error("%s", why)
            self.status.update(lastError=why)
            self._recovered = False
            # A job held ahead would be worked next and take the journal's place: it goes back.
            await self._give_back_ahead("the node cannot save results (its disk refused a write)")
            await self._sleep(self.disk_backoff.next())
            return "not spooled (the disk refused it)"
        self.disk_backoff.reset()
        remove(self.paths.current_job_file)
        return "spooled"

    async def _give_back_unjournalled(self, job: Job, lease: Lease, exc: OSError) -> tuple[str, float]:
        """A job whose journal the disk refused (full, or the file refused), given back before the
        engine runs it; (the outcome, how long the agent then waits, so the volunteer can free
        space: ``disk_backoff``, which a lease taken does not reset). The refusal
        that refuses a journal refuses the result's spool file too: run anyway, the job's
        result was dropped, and the next job leased, one after another. Released, the job is
        queued again at once with no failure counted; not released, its lease lapses."""
        why = f"job {job.job_id} cannot be journalled in {self.paths.current_job_file}: {why_not_written(exc)}"
        self.status.update(lastError=why)
        try:
            await self.client.release(lease.lease_id, "the node cannot write to its disk (its journal was refused)")
            then = "given back"
        except ProtocolError as err:
            then = f"not given back ({err.message}): its lease lapses"
        delay = self.disk_backoff.next()
        log.error("%s; the job is %s, and no job is taken for %.0f s", why, then, delay)
        return ("given back (its journal could not be written)" if then == "given back" else "not journalled"), delay

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

    async def _give_back_running(self, job: Job, lease: Lease) -> str:
        """The job the engine runs, given back unfinished once the coordinator has refused this
        node's engine build: its result would be refused for good (and, from a trusted node,
        count a failure on the job), and released its job is queued again at once with no
        failure counted. The engine's thread is left to end by itself; its answer is dropped.
        Not given back (the coordinator not answering), the lease lapses after its TTL."""
        why = "the coordinator no longer accepts this node's engine build"
        try:
            await self.client.release(lease.lease_id, why)
            log.warning("job %s (lease %s) given back unfinished: %s", job.job_id, lease.lease_id, why)
        except ProtocolError as exc:
            log.warning("job %s (lease %s) dropped unfinished (%s), and could not be given back (%s): its lease "
                        "lapses after its TTL", job.job_id, lease.lease_id, why, exc.message)
        remove(self.paths.current_job_file)     # never resumed by this build, whose result is refused
        return "given back (engine build refused)"

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
