"""What the access tables no longer need, deleted: a periodic pass in the leader process.

Every new visitor of an embed chain adds a counter row (``embed:<chain>:<visitor>``, period
``life``) and every renewal an ``embed_tokens`` row; day and month counters add a few rows a
key a day. Nothing else deletes any of them. A pass (``prune_once``) deletes:

- **an ended chain's visitor counters**: every row whose subject is ``embed:<chain>:...``
  once every token of that chain has expired or been revoked, and ``SIS_EMBED_USAGE_GRACE_S``
  has passed since the last of them ended (or once the chain has no token row left). While a
  chain has a live token nothing of it is touched, so the budget it enforces per visitor over
  the whole chain stays exact. An ended chain cannot come back: a renewal needs a live token,
  and a mint makes a new chain. The grace covers what was admitted just before the end (a
  renewal whose new token is written after the old one expired, a metering batch applied late,
  a coordinator whose clock is a little behind): an hour against requests of seconds;
- **day and month counters past their retention**: ``d:`` rows of days before the last
  ``SIS_USAGE_DAYS_KEPT`` (today included) and ``m:`` rows of months before the last
  ``SIS_USAGE_MONTHS_KEPT`` (this month included). The service reads only today's and this
  month's (``/earth/usage``, ``/public/v1/:cred/limits``, the quotas); older ones are kept
  for the operator, a while;
- **embed tokens** whose expiry is more than ``SIS_EMBED_TOKENS_KEPT_DAYS`` days past (a
  revoked token too: it ended at or before its expiry). Until then ``sis embed list`` shows
  them and a page presenting one hears ``expired`` rather than ``unknown``.

How, so that the pass never holds SQLite's write lock long nor depends on a database's
collation: ``access_usage`` is walked in primary-key order, a page of ``PAGE`` rows read at a
time outside any write transaction (``(subject, period) > last`` uses the primary key's
index, whatever the collation orders it by: a prefix range per chain, ``embed:<chain>:`` up to
``embed:<chain>;``, would hold in byte order only, which a PostgreSQL collation need not be, and
a ``LIKE`` on the subject uses no index on SQLite); each page's ended chains are read from
``embed_tokens`` by its ``chain_id`` index; what the page holds to delete is deleted by
index searches (``by_key``) in transactions of at most ``BATCH`` rows, with a pause between them so that the
metering writer is never kept waiting behind more than one. Tokens go the same way, ``BATCH``
ids at a time. A pass deletes only what is past its bound, so a second pass (or one cut off
halfway and run again) deletes nothing more than what has become due since: it is idempotent.
Each pass logs its counts.

One process at a time runs it (``core.db.leader``, role ``access-prune``): on PostgreSQL the
holder of the role's advisory lock, on SQLite the one coordinator. Two passes at once would
be safe (each deletes by primary key what is past its bound), only twice the work.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import case, delete, func, select, tuple_

from coordinator.core.db.leader import LeaderLoop
from coordinator.core.db.models import AccessUsage, EmbedToken
from coordinator.core.times import aware, utcnow

if TYPE_CHECKING:  # pragma: no cover
    from coordinator.core.db import Database
    from coordinator.core.settings import Settings

log = logging.getLogger("sis.access")

EMBED_PREFIX = "embed:"


@dataclass(frozen=True)
class Retention:
    """How long each kind of row is kept (the settings of the same names)."""

    grace_s: float = 3600.0            # SIS_EMBED_USAGE_GRACE_S
    tokens_kept_days: int = 30         # SIS_EMBED_TOKENS_KEPT_DAYS
    days_kept: int = 62                # SIS_USAGE_DAYS_KEPT
    months_kept: int = 24              # SIS_USAGE_MONTHS_KEPT

    @classmethod
    def of(cls, settings: "Settings") -> "Retention":
        return cls(settings.embed_usage_grace_s, settings.embed_tokens_kept_days, settings.usage_days_kept,
                   settings.usage_months_kept)


@dataclass
class Pruned:
    """What one pass deleted."""

    visitor_rows: int = 0     # embed:<chain>:<visitor> counters of ended chains
    chains: int = 0           # ended chains whose counters went
    day_rows: int = 0
    month_rows: int = 0
    tokens: int = 0           # embed_tokens rows
    batches: int = 0          # write transactions

    @property
    def total(self) -> int:
        return self.visitor_rows + self.day_rows + self.month_rows + self.tokens

    def as_json(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def first_day_kept(now: datetime, days_kept: int) -> str:
    """The oldest ``d:`` period kept: the last ``days_kept`` UTC days, today included."""
    return "d:" + (now - timedelta(days=days_kept - 1)).strftime("%Y-%m-%d")


def first_month_kept(now: datetime, months_kept: int) -> str:
    """The oldest ``m:`` period kept: the last ``months_kept`` UTC months, this one included."""
    index = now.year * 12 + (now.month - 1) - (months_kept - 1)
    return f"m:{index // 12:04d}-{index % 12 + 1:02d}"


def chain_of(subject: str) -> str | None:
    """The chain of an embed visitor's counter (``embed:<chain>:<visitor>``), else None."""
    if not subject.startswith(EMBED_PREFIX):
        return None
    return subject[len(EMBED_PREFIX):].rsplit(":", 1)[0]


def by_key(pairs: list[tuple[str, str]]) -> list[tuple]:
    """Conditions selecting exactly ``pairs`` of (subject, period), each an index search: one
    period with a list of subjects, or one subject with a list of periods, whichever takes
    fewer statements (a chain's visitor counters share the period ``life``; a key's old days
    share the subject). A row-value ``IN`` list of the pairs would say it in one statement, but
    SQLite plans it as a scan of the whole table and PostgreSQL as one index probe per pair."""
    by_period: dict[str, list[str]] = defaultdict(list)
    by_subject: dict[str, list[str]] = defaultdict(list)
    for subject, period in pairs:
        by_period[period].append(subject)
        by_subject[subject].append(period)
    if len(by_period) <= len(by_subject):
        return [(AccessUsage.period == p, AccessUsage.subject.in_(ss)) for p, ss in by_period.items()]
    return [(AccessUsage.subject == s, AccessUsage.period.in_(ps)) for s, ps in by_subject.items()]


# When a token stopped admitting requests: its revocation if before its expiry, else its expiry.
_TOKEN_END = case((EmbedToken.revoked_at.is_not(None) & (EmbedToken.revoked_at < EmbedToken.expires_at),
                   EmbedToken.revoked_at), else_=EmbedToken.expires_at)


class Prune:
    """One pass's work over one database. ``PAGE`` rows are read at a time, ``BATCH`` rows
    deleted per transaction, ``PAUSE_S`` between transactions."""

    PAGE = 2000
    BATCH = 500
    PAUSE_S = 0.02

    def __init__(self, db: "Database", retention: Retention, *, now: datetime | None = None,
                 batch: int | None = None, page: int | None = None, pause_s: float | None = None) -> None:
        self.db = db
        self.retention = retention
        self.now = aware(now) or utcnow()
        self.batch = batch or self.BATCH
        self.page = page or self.PAGE
        self.pause_s = self.PAUSE_S if pause_s is None else pause_s
        self.out = Pruned()
        self.ended_chains: set[str] = set()
        self.ended_before = self.now - timedelta(seconds=retention.grace_s)
        self.day_floor = first_day_kept(self.now, retention.days_kept)
        self.month_floor = first_month_kept(self.now, retention.months_kept)

    async def run(self) -> Pruned:
        await self._usage()
        await self._tokens()     # after the counters: a chain's rows go while its tokens still say it ended
        return self.out

    # ---- access_usage ----

    async def _usage(self) -> None:
        after: tuple[str, str] | None = None
        while True:
            q = select(AccessUsage.subject, AccessUsage.period)
            if after is not None:
                q = q.where(tuple_(AccessUsage.subject, AccessUsage.period) > tuple_(*after))
            q = q.order_by(AccessUsage.subject, AccessUsage.period).limit(self.page)
            async with self.db.read() as s:
                rows = [(r[0], r[1]) for r in (await s.execute(q)).all()]
            if not rows:
                return
            await self._page(rows)
            if len(rows) < self.page:
                return
            after = rows[-1]

    async def _page(self, rows: list[tuple[str, str]]) -> None:
        chains = {c for c in (chain_of(subject) for subject, _ in rows) if c is not None}
        ended = await self._ended(chains) if chains else set()
        doomed: list[tuple[str, str]] = []
        visitors, days, months, gone = 0, 0, 0, set()
        for subject, period in rows:
            chain = chain_of(subject)
            if chain is not None and chain in ended:
                doomed.append((subject, period))
                visitors += 1
                gone.add(chain)
            elif period.startswith("d:") and period < self.day_floor:
                doomed.append((subject, period))
                days += 1
            elif period.startswith("m:") and period < self.month_floor:
                doomed.append((subject, period))
                months += 1
        for i in range(0, len(doomed), self.batch):
            await self._delete_usage(doomed[i:i + self.batch])
        self.out.visitor_rows += visitors
        self.out.day_rows += days
        self.out.month_rows += months
        self.ended_chains |= gone
        self.out.chains = len(self.ended_chains)      # a chain whose rows span pages counted once

    async def _ended(self, chains: set[str]) -> set[str]:
        """Those of ``chains`` that ended more than the grace ago, or have no token row left
        (a usage row is only ever made after its chain's token was committed, so a chain
        without tokens is one whose tokens were deleted, long after it ended)."""
        async with self.db.read() as s:
            last = {r[0]: aware(r[1]) for r in (await s.execute(
                select(EmbedToken.chain_id, func.max(_TOKEN_END)).where(EmbedToken.chain_id.in_(chains))
                .group_by(EmbedToken.chain_id))).all()}
        return {c for c in chains if c not in last or last[c] < self.ended_before}

    async def _delete_usage(self, pairs: list[tuple[str, str]]) -> None:
        async with self.db.write_core() as conn:
            for where in by_key(pairs):
                await conn.execute(delete(AccessUsage).where(*where))
        await self._paused()

    # ---- embed_tokens ----

    async def _tokens(self) -> None:
        before = self.now - timedelta(days=self.retention.tokens_kept_days)
        while True:
            async with self.db.read() as s:     # found outside the write lock (no index on expires_at)
                ids = list((await s.execute(select(EmbedToken.id).where(EmbedToken.expires_at < before)
                                            .limit(self.batch))).scalars())
            if not ids:
                return
            async with self.db.write_core() as conn:
                await conn.execute(delete(EmbedToken).where(EmbedToken.id.in_(ids),
                                                            EmbedToken.expires_at < before))
            self.out.tokens += len(ids)
            await self._paused()
            if len(ids) < self.batch:
                return

    async def _paused(self) -> None:
        self.out.batches += 1
        await asyncio.sleep(self.pause_s)     # the metering writer's turn at the write lock


async def prune_once(db: "Database", retention: Retention, **kw) -> Pruned:  # noqa: ANN003
    """One pass (see the module's docstring); ``kw``: ``now``, ``batch``, ``page``, ``pause_s``."""
    t0 = time.monotonic()
    out = await Prune(db, retention, **kw).run()
    level = logging.INFO if out.total else logging.DEBUG
    log.log(level, "access prune: deleted %d visitor counters of %d ended embed chains, %d day and %d month "
            "counters past their retention, %d expired embed tokens (%d transactions, %.2f s)",
            out.visitor_rows, out.chains, out.day_rows, out.month_rows, out.tokens, out.batches,
            time.monotonic() - t0)
    return out


class Pruner(LeaderLoop):
    """Runs ``prune_once`` every ``SIS_ACCESS_PRUNE_INTERVAL_S`` in the background, in one
    process at a time among coordinators sharing a database (``LeaderLoop``, as the lease
    sweeper does)."""

    ROLE = "access-prune"
    WHAT = "access prune"

    def __init__(self, db: "Database", settings: "Settings") -> None:
        self.db = db
        self.retention = Retention.of(settings)
        self.last: Pruned | None = None
        self.deleted_total = 0
        super().__init__(db.url, settings.access_prune_interval_s)

    async def pass_once(self, **kw) -> Pruned:  # noqa: ANN003
        out = await prune_once(self.db, self.retention, **kw)
        self.last = out
        self.deleted_total += out.total
        return out
