"""``sis reviewers create|list|revoke``: reviewer keys from the command line, a convenience
over ``sis keys``: a reviewer is a key of the access system with the ``review`` scope, so
``create`` is ``sis keys create --scopes review`` with a reviewer's wording, ``list``
lists the keys holding the scope, and ``revoke`` revokes the key as ``sis keys revoke``
does, keeping the reason in the review log."""
from __future__ import annotations

import argparse
import asyncio
import sys

from coordinator.argtypes import words


def add_parser(sub, db_arg, settings_of) -> None:  # noqa: ANN001
    rv = sub.add_parser("reviewers", help="create, list or revoke reviewer keys (access keys with the scope review)")
    rsub = rv.add_subparsers(dest="reviewers_command", required=True, metavar="ACTION")
    c = rsub.add_parser("create", help="create a reviewer key (an access key with the scope review only); "
                                       "the key is printed once, only its hash is kept")
    c.add_argument("--name", dest="name_opt", metavar="NAME", type=words,
                   help="who the key is for (shown in the review log)")
    c.add_argument("name", nargs="?", type=words, help="the same as --name, positional, kept for older scripts")
    db_arg(c)
    ls = rsub.add_parser("list", help="every key with the scope review, without the keys")
    db_arg(ls)
    r = rsub.add_parser("revoke", help="revoke a reviewer key, effective on the next request "
                                       "(the same as sis keys revoke KEY_ID, with a reason kept)")
    r.add_argument("reviewer_id", metavar="key_id",
                   help="the key's id, as sis reviewers list or sis keys list shows it (key_..., or rv_... "
                        "for a key made before migration 0011)")
    r.add_argument("--reason", required=True, type=words, help="why, recorded with the revocation")
    db_arg(r)
    rv.set_defaults(run=lambda a: asyncio.run(run(a, settings_of(a))))


async def run(args: argparse.Namespace, settings) -> int:  # noqa: ANN001
    from coordinator.core.access.credentials import LIVE, REVOKED
    from coordinator.core.db.urls import label
    from coordinator.core.errors import NotFound
    from coordinator.sweeps.nodes_cli import operator
    from coordinator.core.db.migrate import with_database
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
            # Which database: a key made in var/sis.db is unknown to a coordinator serving var/demo.db.
            print(f"reviewer {reviewer.id} ({reviewer.name}), scope {reviewer.scopes}, in {label(settings.database_url)}")
            print(f"key (shown once; send as Authorization: Bearer <key> or X-Api-Key): {token}")
            return 0
        if args.reviewers_command == "list":
            rows = await keys.list_all(db)
            print(f"{'key':26} {'prefix':10} {'state':8} {'scopes':24} {'created':26} name")
            for r in rows:
                state = REVOKED if r.revoked_at else LIVE       # the words of `sis keys list`
                print(f"{r.id:26} {r.prefix + '...':10} {state:8} {r.scopes:24} "
                      f"{r.created_at.isoformat()[:25]:26} {r.name}")
            print(f"{len(rows)} reviewers")
            return 0
        try:
            await keys.revoke(db, args.reviewer_id, args.reason, f"operator:{operator()}")
        except NotFound as exc:
            print(f"sis reviewers revoke: {exc.message}", file=sys.stderr)
            return 1
        print(f"reviewer {args.reviewer_id} revoked")
        return 0

    return await with_database(settings, work, "sis reviewers", create=args.reviewers_command == "create")
