"""The local spool: every result is written here durably before it is submitted, and
stays until the coordinator acknowledges it.

One file per lease (``<lease>.json``): the lease, the job id and the result
document. Submissions are idempotent on the coordinator's side, so resending a
result whose acknowledgement was lost is safe. A result the coordinator refuses
for good (a 4xx other than "try later") is moved to ``rejected/`` with the
reason, so it is never resent and never lost either.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .files import remove, write_json

log = logging.getLogger("sis.node.spool")


@dataclass
class Spooled:
    lease_id: str
    job_id: str
    result: dict[str, Any]
    spooled_at: float
    attempts: int
    path: Path
    stats: dict[str, Any]


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:120]


class Spool:
    def __init__(self, folder: Path):
        self.folder = folder
        self.rejected_dir = folder / "rejected"
        self.corrupt_dir = folder / "corrupt"
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)

    def _path(self, lease_id: str) -> Path:
        return self.folder / f"{_safe(lease_id)}.json"

    def put(self, lease_id: str, job_id: str, result: dict[str, Any], stats: dict[str, Any] | None = None) -> Spooled:
        """Durably keep a result before its first submission (fsync, atomic rename)."""
        now = time.time()
        path = self._path(lease_id)
        write_json(path, {"leaseId": lease_id, "jobId": job_id, "result": result, "spooledAt": now,
                          "attempts": 0, "stats": stats or {}})
        log.info("result of %s spooled at %s", job_id, path)
        return Spooled(lease_id, job_id, result, now, 0, path, stats or {})

    def get(self, lease_id: str) -> Spooled | None:
        return self._load(self._path(lease_id))

    def _load(self, path: Path) -> Spooled | None:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            return Spooled(doc["leaseId"], doc["jobId"], doc["result"], doc["spooledAt"], doc["attempts"], path,
                           doc.get("stats") or {})
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # Cannot happen through put() (atomic); a disk fault or a hand edit. Keep it aside, say so.
            self.corrupt_dir.mkdir(exist_ok=True)
            path.replace(self.corrupt_dir / path.name)
            log.error("spooled file %s cannot be read (%s); moved to %s", path.name, exc, self.corrupt_dir)
            return None

    def pending(self) -> list[Spooled]:
        """Unacknowledged results, oldest first."""
        items = [s for p in sorted(self.folder.glob("*.json")) if (s := self._load(p)) is not None]
        return sorted(items, key=lambda s: s.spooled_at)

    def attempted(self, item: Spooled) -> None:
        item.attempts += 1
        write_json(item.path, {"leaseId": item.lease_id, "jobId": item.job_id, "result": item.result,
                               "spooledAt": item.spooled_at, "attempts": item.attempts, "stats": item.stats})

    def acknowledged(self, item: Spooled) -> None:
        remove(item.path)

    def rejected(self, item: Spooled, reason: str) -> None:
        """The coordinator refused the result for good: keep it, with why, and never resend it."""
        self.rejected_dir.mkdir(exist_ok=True)
        write_json(self.rejected_dir / item.path.name,
                   {"leaseId": item.lease_id, "jobId": item.job_id, "result": item.result, "reason": reason,
                    "rejectedAt": time.time()})
        remove(item.path)

    def __len__(self) -> int:
        return len(list(self.folder.glob("*.json")))
