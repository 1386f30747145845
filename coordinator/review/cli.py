"""``sis reviewers create|list|revoke``: reviewer keys from the command line."""
from __future__ import annotations

import argparse
import asyncio
import sys


def add_parser(sub, db_arg, settings_of) -> None:  # noqa: ANN001
    rv = sub.add_parser("reviewers", help="create, list or revoke reviewer keys (scope review)")
    rsub = rv.add_subparsers(dest="reviewers_command", required=True, metavar="ACTION")
    c = rsub.add_parser("create", help="create a reviewer key; the key is printed once, only its hash is kept")
    c.add_argument("--name", dest="name_opt", metavar="NAME", help="who the key is for (shown in the review log)")
    c.add_argument("name", nargs="?", help="the same as --name, positional, kept for older scripts")
    db_arg(c)
    ls = rsub.add_parser("list", help="every reviewer key, without the keys")
    db_arg(ls)
    r = rsub.add_parser("revoke", help="revoke a reviewer key at once")
    r.add_argument("reviewer_id", help="the reviewer's id (rv_...)")
    r.add_argument("--reason", required=True, help="why, recorded with the revocation")
    db_arg(r)
    rv.set_defaults(run=lambda a: asyncio.run(run(a, settings_of(a))))


async def run(args: argparse.Namespace, settings) -> int:  # noqa: ANN001
    from coordinator.core.errors import NotFound
    from ..services import with_database
    from . import keys

    if args.reviewers_command == "create":
        # --name as `sis keys create` takes it; the positional name of older scripts still works.
        given = [n for n in (args.name_opt, args.name) if n is not None]
        if len(given) != 1:
            print("sis reviewers create: give the reviewer's name once, with --name NAME", file=sys.stderr)
            return 2
        name = given[0]

    async def work(db) -> int:  # noqa: ANN001
        if args.reviewers_command == "create":
            reviewer, token = await keys.create(db, name)
            print(f"reviewer {reviewer.id} ({reviewer.name}), scope {reviewer.scopes}")
            print(f"key (shown once; send as Authorization: Bearer <key> or X-Api-Key): {token}")
            return 0
        if args.reviewers_command == "list":
            rows = await keys.list_all(db)
            print(f"{'reviewer':26} {'state':8} {'scopes':8} {'created':26} {'last used':26} name")
            for r in rows:
                state = "revoked" if r.revoked_at else "active"
                print(f"{r.id:26} {state:8} {r.scopes:8} {r.created_at.isoformat()[:25]:26} "
                      f"{(r.last_used_at.isoformat()[:25] if r.last_used_at else '-'):26} {r.name}")
            print(f"{len(rows)} reviewers")
            return 0
        try:
            await keys.revoke(db, args.reviewer_id, args.reason)
        except NotFound as exc:
            print(f"sis reviewers revoke: {exc.message}", file=sys.stderr)
            return 1
        print(f"reviewer {args.reviewer_id} revoked")
        return 0

    return await with_database(settings, work, "sis reviewers")
