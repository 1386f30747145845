"""The job journals, kept per coordinator: the job leased and running (``current-job.json``)
and the one held ahead (``ahead-job.json``), each kept until its job ends or is given back,
so that a restarted agent resumes the one on its lease and gives the other back.

A journal is its coordinator's, as a spooled result is (``node_agent.spool``): its lease
means something only there. Each names the coordinator it was leased from. Pointed at
another coordinator, the agent asked that one about the lease, was refused ("no such lease
for this node"), and dropped the journal: the job's lease lapsed at its own coordinator and
counted a failure on the job there, though the node might have come back in time. So at
start (``sort_out``), before anything is asked of the coordinator, a journal for another
coordinator is put aside, in ``journals/<coordinator>/``, neither resumed nor dropped, and
said in the log and in ``sis-node status``; one put aside for the coordinator the node points
at now is put back, and is then resumed or given back as after any restart (a lease that has
lapsed meanwhile is dropped then, as it would have been). Keeping the journal's place in the
data folder for the coordinator the node works for lets it journal its own jobs meanwhile.

This is deliberately no more than that: the job held ahead for another coordinator is not
given back there at once (it would need a client and an enrolment of that coordinator, which
may be the one that cannot be reached), so its lease lapses unless the node points back
within the lease's time. A journal written before journals named their coordinator is taken
as the coordinator the node last ran against (the identity's coordinator used last, which
only an enrolment that succeeded sets), as an earlier agent's spooled result is.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import identity as ident_mod
from .config import Paths
from .files import read_json, remove, why_not_written, write_json

log = logging.getLogger("sis.node.journal")

CURRENT, AHEAD = "current-job.json", "ahead-job.json"
KEPT_DIR = "journals"
CORRUPT_DIR = "corrupt"     # in KEPT_DIR: journals that could not be read, kept aside as the spool's are


@dataclass
class Kept:
    """A journal put aside for another coordinator."""

    coordinator: str
    name: str           # CURRENT or AHEAD
    job_id: str
    lease_id: str

    def to_dict(self) -> dict[str, Any]:
        return {"coordinator": self.coordinator, "jobId": self.job_id, "leaseId": self.lease_id,
                "heldAhead": self.name == AHEAD}

    def describe(self) -> str:
        what = (f"job {self.job_id} (lease {self.lease_id})" if self.name == CURRENT
                else f"job {self.job_id}, held ahead (lease {self.lease_id}),")
        then = "resumed if its lease still holds" if self.name == CURRENT else "given back"
        return (f"{what} leased from {self.coordinator}, which this node no longer points at, is kept: {then} "
                f"when it points there again (sis-node run --coordinator {self.coordinator})")


def _safe(url: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in url)[:120] or "_"


def _doc(path: Path) -> dict[str, Any] | None:
    doc = read_json(path)
    return doc if isinstance(doc, dict) else None


class Journals:
    """The journals of the agent working for ``coordinator``."""

    def __init__(self, paths: Paths, coordinator: str):
        self.paths = paths
        self.coordinator = ident_mod.normalise(coordinator)
        self.kept_dir = paths.data_dir / KEPT_DIR

    @property
    def current(self) -> Path:
        return self.paths.current_job_file

    @property
    def ahead(self) -> Path:
        return self.paths.ahead_job_file

    def read(self, path: Path) -> dict[str, Any] | None:
        """The journal in ``path``, or None when there is none. One that cannot be read (cut short,
        not an object, naming no lease, refused) is said and moved aside to ``journals/corrupt/``,
        and answered None: it was dropped without a word, and the volunteer never learnt why the
        job was not resumed."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:     # refused, a folder, bytes that are not UTF-8
            why = f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}"
        else:
            try:
                doc = json.loads(text)
            except ValueError:
                why = "it is empty" if not text.strip() else "it is not JSON, or cut short"
            else:
                if isinstance(doc, dict) and str(doc.get("leaseId") or ""):
                    return doc
                why = "it names no lease" if isinstance(doc, dict) else "it does not hold a JSON object"
        self._set_aside(path, why)
        return None

    def _set_aside(self, path: Path, why: str) -> None:
        what = "of the job held ahead" if path.name == AHEAD else "of the job leased"
        aside = self.kept_dir / CORRUPT_DIR / f"{path.stem}.{int(time.time() * 1000)}.json"
        try:
            aside.parent.mkdir(parents=True, exist_ok=True)
            path.replace(aside)
            where = f"moved to {aside.parent}"
        except OSError as exc:
            try:
                remove(path)
                where = f"deleted, as it could not be moved aside ({why_not_written(exc)})"
            except OSError as exc2:
                where = f"left where it is ({why_not_written(exc2)})"
        log.error("journal %s (%s before the restart) cannot be read (%s): its job's lease lapses, and the "
                  "coordinator re-leases the job; %s", path, what, why, where)

    def write(self, path: Path, doc: dict[str, Any]) -> None:
        """Journal a job of this coordinator (``OSError`` when the disk refuses it)."""
        write_json(path, {**doc, "coordinator": self.coordinator, "leasedAt": time.time()})

    def _kept(self, url: str, name: str) -> Path:
        return self.kept_dir / _safe(url) / name

    def sort_out(self, unnamed: str) -> list[Kept]:
        """At start: put aside each journal for another coordinator, put back each one put aside
        for this one (where its place is free), and answer what stays aside. ``unnamed``: whose a
        journal naming no coordinator is (the coordinator the node last ran against)."""
        unnamed = ident_mod.normalise(unnamed) or self.coordinator
        for path in (self.current, self.ahead):
            doc = _doc(path)
            if doc is None:
                continue            # none, or not a journal (the loop drops it, as ever)
            owner = ident_mod.normalise(str(doc.get("coordinator") or "")) or unnamed
            if owner == self.coordinator:
                continue
            target = self._kept(owner, path.name)
            write_json(target, {**doc, "coordinator": owner})
            remove(path)
            log.info("the journal of job %s (lease %s), leased from %s, is put aside in %s: this node points at %s",
                     doc.get("jobId"), doc.get("leaseId"), owner, target.parent, self.coordinator)
        for path in (self.current, self.ahead):
            kept = self._kept(self.coordinator, path.name)
            doc = _doc(kept)
            if doc is None or path.exists():
                continue
            write_json(path, doc)
            remove(kept)
            log.info("the journal of job %s (lease %s), put aside while this node pointed at another coordinator, "
                     "is taken up again", doc.get("jobId"), doc.get("leaseId"))
        return self.elsewhere()

    def elsewhere(self) -> list[Kept]:
        """The journals put aside for other coordinators; read only (``sis-node status`` runs beside
        the agent)."""
        return kept(self.paths, but=self.coordinator)


def kept(paths: Paths, but: str = "") -> list[Kept]:
    """Every journal put aside, but those for ``but``."""
    folder = paths.data_dir / KEPT_DIR
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*/*.json")):
        doc = _doc(path)
        if doc is None or path.name not in (CURRENT, AHEAD):
            continue
        url = ident_mod.normalise(str(doc.get("coordinator") or ""))
        if url and url != ident_mod.normalise(but):
            found.append(Kept(url, path.name, str(doc.get("jobId") or "?"), str(doc.get("leaseId") or "?")))
    return found
