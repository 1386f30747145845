"""``sis jobs list|requeue``: the operator's view of sweep jobs, and the way back for a
parked one. A job parks (``failed``) after ``job_max_failures`` lapsed leases or trusted
nodes' invalid results; nothing else moves it again, so an operator who has looked at
its reason (a poison photo fixed upstream, a bad engine build withdrawn) requeues it.
A rejected job's ground is reissued as a new job or parked by the review
(``review.workflow``); ``requeue`` on a rejected job whose ground is parked queues it
again as a new job, the reissue count starting again (``jobs.requeue_rejected``). The
list shows the lineage (``from job-3, reissue 1``, ``from job-5, requeued``,
``reissued as job-9``)."""
from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Callable

from coordinator.argtypes import positive, words
from coordinator.core.text import one_line

from . import transitions as tr

LIST_LIMIT = 500


def add_parser(sub, db_arg: Callable[[argparse.ArgumentParser], None], settings_of) -> None:  # noqa: ANN001
    jb = sub.add_parser("jobs", help="list sweep jobs or requeue a parked one")
    jsub = jb.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    ls = jsub.add_parser("list", help="sweep jobs, oldest first, with their state, failures and reason (past "
                                      "--limit, the latest)")
    ls.add_argument("--state", choices=tr.JOB_STATES, help="only jobs in this state (default: every state)")
    ls.add_argument("--limit", type=positive, default=LIST_LIMIT, help=f"most jobs listed (default {LIST_LIMIT})")
    db_arg(ls)
    rq = jsub.add_parser("requeue", help="put a parked (failed) job back in the queue, its failures cleared; "
                                         "for a rejected job, queue its parked ground again as a new job")
    rq.add_argument("job_id", help="the job's id (job-<n> or <n>, as `sis jobs list` shows it)")
    rq.add_argument("--reason", default="requeued by an operator", type=words,
                    help="why, recorded with the job's transition (default: 'requeued by an operator')")
    db_arg(rq)
    jb.set_defaults(run=lambda a: asyncio.run(run(a, settings_of(a))))


async def run(args: argparse.Namespace, settings) -> int:  # noqa: ANN001
    from coordinator.core.errors import ServiceError
    from coordinator.sweeps.nodes_cli import operator
    from coordinator.core.db.migrate import with_database
    from . import jobs, leases

    async def work(db) -> int:  # noqa: ANN001
        if args.jobs_command == "list":
            return await _list(db, args.state, args.limit)
        try:
            job_id = jobs.parse_job_id(args.job_id)
        except ValueError:
            print(f"sis jobs requeue: {args.job_id!r} is not a job id (job-<n> or <n>)", file=sys.stderr)
            return 1
        if job_id is None:                  # a number no job row can have
            print(f"sis jobs requeue: no such job {args.job_id}", file=sys.stderr)
            return 1
        actor = f"operator:{operator()}"
        try:
            job = await leases.requeue(db, job_id, actor, args.reason)
        except ServiceError as exc:
            if (exc.details or {}).get("state") != tr.JOB_REJECTED:
                print(f"sis jobs requeue: {exc.message}", file=sys.stderr)
                return 1
            try:                            # a rejected job: its parked ground goes back to the queue
                new_id = await jobs.requeue_rejected(db, job_id, actor, args.reason)
            except ServiceError as exc2:
                print(f"sis jobs requeue: {exc2.message}", file=sys.stderr)
                return 1
            print(f"job {jobs.wire_id(job_id)} is rejected: its parked ground is queued again as "
                  f"{jobs.wire_id(new_id)} (reissue count starts again)")
            return 0
        print(f"job {jobs.wire_id(job.id)} requeued: {job.state}, quorum {job.quorum}, "
              f"{job.valid_results} valid result{'s' if job.valid_results != 1 else ''} kept")
        return 0

    return await with_database(settings, work, "sis jobs")


async def _list(db, state: str | None, limit: int) -> int:  # noqa: ANN001
    from sqlalchemy import func, select

    from coordinator.core.db.models import SweepJob, SweepReissue
    from .jobs import wire_id

    async with db.read() as s:
        # The latest past the limit, listed oldest first: the oldest were the first jobs a deployment
        # ever ran, and after a year the list showed nothing of today.
        q = select(SweepJob).order_by(SweepJob.id.desc()).limit(limit)
        count = select(func.count()).select_from(SweepJob)
        if state:
            q, count = q.where(SweepJob.state == state), count.where(SweepJob.state == state)
        rows = list((await s.execute(q)).scalars())[::-1]
        total = (await s.execute(count)).scalar_one()
        ids = [j.id for j in rows]
        links = list((await s.execute(select(SweepReissue).where(
            SweepReissue.job_id.in_(ids) | SweepReissue.parent_id.in_(ids))))) if ids else []
    parent = {r.job_id: r for (r,) in links}
    child = {r.parent_id: r.job_id for (r,) in links}
    print(f"{'job':14} {'state':9} {'sweep':26} {'photos':>6} {'valid':>5} {'quorum':>6} {'failures':>8}  "
          f"{'updated':26} {'lineage':34} reason")
    for j in rows:
        line = []
        if j.id in parent:
            gen = parent[j.id].generation
            line.append(f"from {wire_id(parent[j.id].parent_id)}, " + (f"reissue {gen}" if gen else "requeued"))
        if j.id in child:
            line.append(f"reissued as {wire_id(child[j.id])}")
        print(f"{wire_id(j.id):14} {j.state:9} {j.sweep_id:26} {len(j.photos):6d} {j.valid_results:5d} "
              f"{j.quorum:6d} {j.failures:8d}  {tr.iso(j.updated_at):26} {'; '.join(line) or '-':34} "
              f"{one_line(j.reason or '')}")
    shown = f" (the latest {len(rows)} shown: --limit)" if len(rows) < total else ""
    print(f"{total} job{'s' if total != 1 else ''}{shown}")
    return 0
