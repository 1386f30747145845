"""Submitting the spool: each result waiting for this coordinator sent, the last one asking
for the next job; acknowledged, it is counted and deleted; refused for good, kept aside.

Part of the agent (``node_agent.loop``): these are ``Agent``'s methods, gathered in the
mixin class ``Submitting`` because they are the one way a result leaves the node, and
what the coordinator's answer to it means; the spool itself (``node_agent.spool``) only
keeps files. They share the agent's state (``self``), set up in ``Agent.__init__``. The log
is the agent loop's (``sis.node.loop``), as it was when the agent was one module, so a
volunteer's log reads the same.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from .protocol import Lease, Refused, Unreachable
from .refusals import BuildRefused
from .spool import Spooled

log = logging.getLogger("sis.node.loop")


class Submitting:
    """The spool submitted, and the coordinator's answers (a mixin of ``Agent``)."""

    async def _flush_spool(self, ask_next: bool = False) -> bool:
        """Submit every spooled result; False when the coordinator could not be reached.
        ``ask_next``: the last one also asks for the next job: a job given is held ahead (its
        photos fetched from now on), "none waiting" kept in ``self._next`` for the next turn.
        A result refused because the coordinator no longer accepts this node's engine build is
        kept aside as any refused result; the rest are sent as well (each gets its own answer),
        asking for no next job, and then the agent stops (``BuildRefused``)."""
        items = self.spool.pending()
        withdrawn: BuildRefused | None = None
        # The backoff is reset only by an answer: an empty spool sends nothing, and reset each turn it
        # kept a coordinator that went away at attempt 1 (a retry every 1-2 s, forever).
        answered = False
        for i, item in enumerate(items):
            self.spool.attempted(item)
            try:
                if ask_next and i == len(items) - 1 and withdrawn is None:
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
                if withdrawn is not None:
                    raise withdrawn from None
                return False
            except Refused as exc:
                if exc.status == 401:
                    self._last_unreachable = Unreachable("the node token was refused; enrolling again")
                    await self._refused("submitting a result", exc)
                    return False
                answered = True
                self._rejected(item, exc)       # a revoked node's too, with the operator's reason
                if withdrawn is None:
                    try:
                        self._raise_if_build_refused(exc, item.result.get("engineBuild")
                                                     if isinstance(item.result, dict) else None)
                    except BuildRefused as stop:
                        withdrawn = stop
                continue
            answered = True
            self._acknowledged(item, answer)
        if answered:
            self.backoff.reset()
        self.status.update(spooled=len(self.spool))
        if withdrawn is not None:
            raise withdrawn
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
        # Counted before the spooled file is deleted. A count that cannot be written (a full
        # disk, the file refused) is kept in memory, said once, and written with the next count
        # or at the stop (``Contribution``): it raised here, and on a full disk the agent stopped
        # with the result still spooled, taking space the deleted file frees. On Windows, the
        # file held by another process past the retries raises still, with the result spooled,
        # sent again and counted then (the coordinator answers a resend as acknowledged).
        # A lease's result is counted once, however often it is acknowledged (``Contribution``).
        s = item.stats
        total = self.contribution.acknowledged(item.lease_id, int(s.get("photos", 0)), int(s.get("facts", 0)),
                                               float(s.get("seconds", 0.0)), bool(s.get("onGpu")))
        self.spool.acknowledged(item)
        jobs = total["jobs"]
        log.info("result of %s acknowledged%s: the coordinator holds it as %s, and the job as %s; contribution: "
                 "%d job%s", item.job_id, " (a resend)" if answer.get("duplicate") else "",
                 answer.get("resultState"), answer.get("jobState"), jobs, "" if jobs == 1 else "s")

    def _rejected(self, item: Spooled, exc: Refused) -> None:
        reasons = exc.details.get("reasons") or []
        why = exc.message + (": " + "; ".join(map(str, reasons[:10])) if reasons else "") + self._not_ours(item, exc)
        log.error("result of %s refused for good (kept in %s): %s", item.job_id, self.spool.rejected_dir, why)
        self.spool.rejected(item, why)
        self.results_rejected += 1
        self.contribution.rejected(item.lease_id)
        self.status.update(lastRejected={"jobId": item.job_id, "reason": why, "at": time.time()})
