"""``sis nodes list|revoke``: the operator's view of volunteer nodes."""
from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from collections import Counter
from typing import Callable

from coordinator.argtypes import positive, words
from coordinator.core.text import one_line
from coordinator.core.times import iso


def add_parser(sub, db_arg: Callable[[argparse.ArgumentParser], None], settings_of) -> None:  # noqa: ANN001
    nd = sub.add_parser("nodes", help="list or revoke volunteer compute nodes")
    nsub = nd.add_subparsers(dest="nodes_command", required=True, metavar="ACTION")
    nl = nsub.add_parser("list", help="enrolled nodes with their trust and counts, the latest seen first")
    nl.add_argument("--state", choices=NODE_STATES, help="only nodes in this state")
    nl.add_argument("--limit", type=positive, default=LIST_LIMIT, help=f"most nodes listed (default {LIST_LIMIT})")
    db_arg(nl)
    nr = nsub.add_parser("revoke", help="revoke a node at once; its leased jobs go back to the queue")
    nr.add_argument("node_id", help="the node's id (nd_...)")
    nr.add_argument("--reason", required=True, type=words,
                    help="why, recorded with the revocation and shown to the node")
    db_arg(nr)
    nd.set_defaults(run=lambda a: asyncio.run(run(a, settings_of(a))))


NODE_STATES = ("trusted", "untrusted", "revoked")
LIST_LIMIT = 500


def state_of(node) -> str:  # noqa: ANN001
    return "revoked" if node.revoked_at else ("trusted" if node.trusted else "untrusted")


def operator() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment
        return "cli"


async def run(args: argparse.Namespace, settings) -> int:  # noqa: ANN001
    from coordinator.core.errors import NotFound
    from coordinator.core.db.migrate import with_database
    from coordinator.sweeps import nodes as registry

    async def work(db) -> int:  # noqa: ANN001
        if args.nodes_command == "list":
            nodes = await registry.list_nodes(db)
            counts = Counter(map(state_of, nodes))
            shown = sorted((n for n in nodes if args.state in (None, state_of(n))),
                           key=lambda n: (n.last_seen_at, n.id), reverse=True)
            print(f"{'node':24} {'state':9} {'streak':>6} {'valid':>6} {'invalid':>7}  {'last seen':20} "
                  "platform / gpu")
            for n in shown[:args.limit]:
                print(f"{n.id:24} {state_of(n):9} {n.streak:6d} {n.valid_total:6d} {n.invalid_total:7d}  "
                      f"{iso(n.last_seen_at):20} {one_line(n.platform)} / {one_line(n.gpu)}")
            cut = f"; the {args.limit} seen last shown (--limit)" if len(shown) > args.limit else ""
            print(f"{len(nodes)} node{'s' if len(nodes) != 1 else ''} ("
                  + ", ".join(f"{counts[k]} {k}" for k in NODE_STATES) + f"){cut}")
            return 0
        try:
            released = await registry.revoke(db, args.node_id, args.reason, f"operator:{operator()}",
                                             settings.job_max_failures)
        except NotFound as exc:
            print(f"sis nodes revoke: {exc.message}", file=sys.stderr)
            return 1
        print(f"node {args.node_id} revoked; released {released} lease{'s' if released != 1 else ''} "
              "back to the queue")
        return 0

    return await with_database(settings, work, "sis nodes")
