"""The local spool: every result is written here durably before it is submitted, and
stays until the coordinator it was leased from acknowledges it.

One file per lease (``<lease>.json``): the lease, the job id, the result document,
and the coordinator the lease came from (its URL as ``identity.normalise`` keys
it). A lease means something only to its coordinator: a result submitted to
another one is refused for good ("no such lease"), so a result is submitted only
to its own, and one whose coordinator the node no longer points at waits, kept,
until the node points there again. Submissions are idempotent on the
coordinator's side, so resending a result whose acknowledgement was lost is
safe. A result the coordinator refuses for good (a 4xx other than "try later")
is moved to ``rejected/`` with the reason, so it is never resent and never lost
either.

A file spooled by an agent before results were kept per coordinator names none.
It is taken as its node's: the coordinator whose node id the result carries
(``legacy_owner``: each enrolment has its own node id), else the coordinator the
node last ran against, which is the one it was spooled for; the agent writes
that into the file at its first start (``adopt``).
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from . import identity as ident_mod
from .files import busy_retried, remove, why_not_written, windows_busy, write_json

log = logging.getLogger("sis.node.spool")

Owner = Callable[[dict[str, Any]], str]    # the coordinator of a file that names none


@dataclass
class Spooled:
    lease_id: str
    job_id: str
    result: dict[str, Any]
    spooled_at: float
    attempts: int
    path: Path
    stats: dict[str, Any]
    coordinator: str = ""
    named: bool = True          # False: spooled by an earlier agent, its coordinator worked out


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:120]


def last_enrolled(last: "ident_mod.Identity | None") -> str:
    """The coordinator the node last ran against, where it is enrolled there; else "". Agents
    before 991ac2f recorded a failed enrolment's URL (a typo) as the one used last: an earlier
    agent's journals and results taken as that URL's were put aside for a coordinator that never
    leased them, and their leases lapsed."""
    return last.coordinator if last is not None and last.coordinator and last.enrolled else ""


def legacy_owner(identity_file: Path, fallback: str = "") -> Owner:
    """Whose a result is when its file names no coordinator: the coordinator whose node id it
    carries, else the one the node last ran against where it is enrolled there (else
    ``fallback``). Read once, now: the agent's start rewrites the coordinator used last."""
    try:
        by_node = {node: url for url, node in ident_mod.enrolments(identity_file).items()}
        last = ident_mod.load(identity_file)
    except ident_mod.IdentityUnreadable:
        by_node, last = {}, None
    default = last_enrolled(last) or ident_mod.normalise(fallback)

    def owner(doc: dict[str, Any]) -> str:
        result = doc.get("result")
        node = result.get("nodeId") if isinstance(result, dict) else None
        return by_node.get(node, default) if isinstance(node, str) else default
    return owner


class Spool:
    """``coordinator``: the one this agent works for; ``put`` names it, and ``pending`` and
    ``len`` count only its results. None (``sis-node status``, tests): every result."""

    def __init__(self, folder: Path, coordinator: str | None = None, owner: Owner | None = None):
        self.folder = folder
        self.rejected_dir = folder / "rejected"
        self.corrupt_dir = folder / "corrupt"
        self.coordinator = ident_mod.normalise(coordinator) if coordinator is not None else None
        self.owner = owner
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)

    def _path(self, lease_id: str) -> Path:
        return self.folder / f"{_safe(lease_id)}.json"

    @staticmethod
    def _doc(item: Spooled) -> dict[str, Any]:
        return {"leaseId": item.lease_id, "jobId": item.job_id, "result": item.result, "spooledAt": item.spooled_at,
                "attempts": item.attempts, "stats": item.stats, "coordinator": item.coordinator}

    def put(self, lease_id: str, job_id: str, result: dict[str, Any], stats: dict[str, Any] | None = None) -> Spooled:
        """Durably keep a result before its first submission (fsync, atomic rename), with the
        coordinator it is for."""
        item = Spooled(lease_id, job_id, result, time.time(), 0, self._path(lease_id), stats or {},
                       self.coordinator or "")
        write_json(item.path, self._doc(item))
        log.info("result of %s spooled at %s", job_id, item.path)
        return item

    def get(self, lease_id: str) -> Spooled | None:
        return self._load(self._path(lease_id))

    def _load(self, path: Path, quarantine: bool = True) -> Spooled | None:
        try:
            doc = json.loads(busy_retried(path.read_text, encoding="utf-8"))
            named = bool(doc.get("coordinator"))
            coordinator = doc["coordinator"] if named else (self.owner(doc) if self.owner else "")
            return Spooled(doc["leaseId"], doc["jobId"], doc["result"], doc["spooledAt"], doc["attempts"], path,
                           doc.get("stats") or {}, ident_mod.normalise(coordinator) if coordinator else "", named)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            if windows_busy(exc):
                # Windows: held by another process past the retries, or deleted and still open
                # there. Nothing is wrong with it: read it again next time.
                log.warning("spooled file %s is held by another process (%s); read next time", path.name, exc)
                return None
            # Cannot happen through put() (atomic); a disk fault or a hand edit. Keep it aside, say so.
            if quarantine:
                self.corrupt_dir.mkdir(exist_ok=True)
                path.replace(self.corrupt_dir / path.name)
                log.error("spooled file %s cannot be read (%s); moved to %s", path.name, exc, self.corrupt_dir)
            return None

    def _all(self, quarantine: bool = True) -> list[Spooled]:
        items = [s for p in sorted(self.folder.glob("*.json")) if (s := self._load(p, quarantine)) is not None]
        return sorted(items, key=lambda s: s.spooled_at)

    def pending(self) -> list[Spooled]:
        """Unacknowledged results for this spool's coordinator (every one when it has none), oldest first."""
        return [s for s in self._all() if self.coordinator is None or s.coordinator == self.coordinator]

    def waiting(self) -> dict[str, int]:
        """How many results wait for each coordinator ("" for none known). Reads only: a file
        that cannot be read is left where it is (``sis-node status`` runs beside the agent)."""
        return dict(Counter(s.coordinator for s in self._all(quarantine=False)))

    def elsewhere(self) -> dict[str, int]:
        """Results waiting for a coordinator other than this spool's."""
        return {url: n for url, n in self.waiting().items() if url != self.coordinator}

    def adopt(self) -> int:
        """Write into each file spooled by an earlier agent the coordinator it is taken to be for
        (``legacy_owner``), so the answer no longer depends on the identity file; how many."""
        done = 0
        for item in self._all():
            if not item.named and item.coordinator:
                write_json(item.path, self._doc(item))
                log.info("result of %s, spooled by an earlier sis-node, is kept for %s", item.job_id, item.coordinator)
                done += 1
        return done

    def attempted(self, item: Spooled) -> None:
        """One more submission of ``item``, counted in its file where it can be: the count only
        informs, and a file that cannot be rewritten (a full disk) stopped the result from being
        sent, which on a full disk is what frees space (it is deleted once acknowledged)."""
        item.attempts += 1
        try:
            write_json(item.path, self._doc(item))
        except OSError as exc:
            log.debug("the attempts of %s cannot be counted in %s (%s)", item.job_id, item.path, exc)

    def acknowledged(self, item: Spooled) -> None:
        remove(item.path)

    def rejected(self, item: Spooled, reason: str) -> None:
        """The coordinator refused the result for good: keep it, with why, and never resend it.
        A copy with its reason that cannot be written (a full disk) is the spooled file itself
        moved there, which takes no room, its reason in the log alone: left in the spool, it
        was sent again and refused again at every turn, and the results spooled after it
        were never sent."""
        target = self.rejected_dir / item.path.name
        self.rejected_dir.mkdir(exist_ok=True)
        try:
            write_json(target, {"leaseId": item.lease_id, "jobId": item.job_id, "result": item.result,
                                "reason": reason, "coordinator": item.coordinator, "rejectedAt": time.time()})
        except OSError as exc:
            if windows_busy(exc):
                raise
            busy_retried(os.replace, item.path, target)
            log.warning("the refused result of %s is kept in %s as it was spooled, without its reason (%s): "
                        "it could not be written (%s)", item.job_id, target, reason, why_not_written(exc))
            return
        remove(item.path)

    def __len__(self) -> int:
        if self.coordinator is None:
            return len(list(self.folder.glob("*.json")))
        return self.waiting().get(self.coordinator, 0)
