"""Leases beside the running job: the next job leased and held ahead while the engine runs,
heartbeats keeping each lease alive, jobs given back, and the journalled jobs taken up after
a restart.

Part of the agent (``node_agent.loop``): these are ``Agent``'s methods, gathered in the
mixin class ``Leasing`` because they are what the agent holds of the coordinator's besides
the job the engine runs (``node_agent.running``): a lease's life, from taking it ahead to
giving it back or resuming it. They share the agent's state (``self``), set up in
``Agent.__init__``. The log is the agent loop's (``sis.node.loop``), as it was when the agent
was one module, so a volunteer's log reads the same.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from sweep_engine.schema import Job

from .aio import retrieve
from .files import remove, why_not_written
from .protocol import Lease, Refused, Unreachable
from .refusals import Fatal

log = logging.getLogger("sis.node.loop")
RELEASE_NOW_S = 2.0     # how long a second stop signal waits to give back the job held ahead


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


class Leasing:
    """The job held ahead, heartbeats, giving back and recovering leases (a mixin of ``Agent``)."""

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
            except Refused as exc:
                self._raise_if_build_refused(exc)    # at once: the job the engine runs is given back
                log.debug("leasing a job ahead: %s", exc)    # the next turn asks again, and handles it
                return
            except Unreachable as exc:
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

    def _hold_ahead(self, lease: Lease) -> None:
        """Hold a job leased before the running one ends: fetch its photos and keep its lease
        alive from now on. A job that does not fit the schema is refused at once."""
        job = self._job_of(lease)
        if job is None:
            return
        try:
            self.journals.write(self.paths.ahead_job_file, {"leaseId": lease.lease_id, "jobId": job.job_id})
        except OSError as exc:   # the journal only spares the job a failure after a crash; hold it anyway
            log.warning("job %s, held ahead, could not be journalled in %s (%s); after a crash its lease lapses",
                        job.job_id, self.paths.ahead_job_file, why_not_written(exc))
        photos = asyncio.ensure_future(self._fetch(job))
        photos.add_done_callback(retrieve)  # awaited later, or dropped
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
        doc = self.journals.read(self.paths.ahead_job_file)
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

    async def _recover(self) -> bool:
        """Give back the job held ahead before a restart, then resume the journalled job if its
        lease still holds; False when the coordinator is unreachable."""
        if not await self._give_back_journalled_ahead():
            return False
        doc = self.journals.read(self.paths.current_job_file)   # one that cannot be read is said, and set aside
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

    def _keep_alive(self, lease: Lease) -> tuple[asyncio.Event, asyncio.Task]:
        """Heartbeats for ``lease`` from now on, and the event they set if the coordinator ends it."""
        lost = asyncio.Event()
        return lost, asyncio.ensure_future(self._heartbeats(lease, lost))

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
