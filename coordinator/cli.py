"""The ``sis`` command: serve the coordinator, migrate its database, inspect settings."""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from . import __version__
from .settings import load, settings_table


def _settings(args: argparse.Namespace):
    return load(host=getattr(args, "host", None), port=getattr(args, "port", None),
                database_url=getattr(args, "database", None), demo=True if getattr(args, "demo", False) else None)


async def _serve(args: argparse.Namespace) -> int:
    from .app import make_app
    from .services import SchemaOutOfDate, create_services

    settings = _settings(args)
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        services = await create_services(settings)
    except SchemaOutOfDate as exc:
        print(f"sis serve: {exc}", file=sys.stderr)
        return 2
    app = make_app(services)
    server = app.listen(settings.port, settings.host, xheaders=False)
    port = next(iter(server._sockets.values())).getsockname()[1]  # the real port when 0 was asked
    db_label = "embedded SQLite" if settings.is_sqlite else "PostgreSQL"
    print(f"sis {__version__}: serving on http://{settings.host}:{port} ({db_label}"
          f"{', demo data' if settings.demo else ''}); Ctrl-C stops", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.stop()
    await services.close()
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from .db import migrate

    settings = _settings(args)
    if settings.is_sqlite:
        from pathlib import Path
        from sqlalchemy.engine import make_url
        db_path = make_url(settings.database_url).database
        if db_path and db_path != ":memory:":
            Path(db_path).parent.mkdir(parents=True, exist_ok=True)
    migrate.upgrade(settings.database_url, args.revision)
    print(f"database at {args.revision}: {settings.database_url.split('@')[-1]}")
    return 0


def cmd_settings(args: argparse.Namespace) -> int:
    for env, default, help_ in settings_table():
        print(f"{env:28} {default:50} {help_}")
    return 0


async def _poll(args: argparse.Namespace) -> int:
    from .services import create_services

    services = await create_services(_settings(args), start_background=False)
    try:
        from .hazards.history import poll_once
        out = await poll_once(services.db, services.sources, keep=services.settings.polls_kept)
        h = out.feed.health
        print(f"poll {out.poll_id}: {len(out.feed.events)} events, {len(out.changes)} changes, "
              f"sources usable {h.usable}/{h.queried}")
    finally:
        await services.close()
    return 0


async def _nodes(args: argparse.Namespace) -> int:
    from .db import Database
    from .nodes import registry
    from .services import SchemaOutOfDate, prepare_database

    settings = _settings(args)
    db = Database(settings.database_url)
    try:
        try:
            await prepare_database(settings, db)
        except SchemaOutOfDate as exc:
            print(f"sis nodes: {exc}", file=sys.stderr)
            return 2
        if args.nodes_command == "list":
            nodes = await registry.list_nodes(db)
            print(f"{'node':24} {'state':9} {'streak':>6} {'valid':>6} {'invalid':>7}  last seen                  platform / gpu")
            for n in nodes:
                state = "revoked" if n.revoked_at else ("trusted" if n.trusted else "untrusted")
                print(f"{n.id:24} {state:9} {n.streak:6d} {n.valid_total:6d} {n.invalid_total:7d}  "
                      f"{n.last_seen_at.isoformat()[:25]:26} {n.platform} / {n.gpu}")
            print(f"{len(nodes)} nodes")
            return 0
        from .errors import NotFound
        try:
            released = await registry.revoke(db, args.node_id, args.reason, f"operator:{_operator()}",
                                             settings.job_max_failures)
        except NotFound as exc:
            print(f"sis nodes revoke: {exc.message}", file=sys.stderr)
            return 1
        print(f"node {args.node_id} revoked; released {released} lease{'s' if released != 1 else ''} "
              "back to the queue")
        return 0
    finally:
        await db.close()


def _operator() -> str:
    import getpass
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment
        return "cli"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sis", description="Spatial Intelligence Service coordinator.")
    p.add_argument("--version", action="version", version=f"sis {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def db_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--database", metavar="URL",
                        help="SQLAlchemy URL (default: SIS_DATABASE_URL, else sqlite+aiosqlite:///var/sis.db)")

    s = sub.add_parser("serve", help="serve the coordinator (applies migrations itself on SQLite)")
    s.add_argument("--host", help="listen address (default 127.0.0.1)")
    s.add_argument("--port", type=int, help="listen port (default 8080)")
    db_arg(s)
    s.add_argument("--demo", action="store_true", help="answer sources from bundled recorded samples (offline)")
    s.set_defaults(run=lambda a: asyncio.run(_serve(a)))

    m = sub.add_parser("migrate", help="apply pending database migrations")
    db_arg(m)
    m.add_argument("--revision", default="head", help="target revision (default head)")
    m.set_defaults(run=cmd_migrate)

    st = sub.add_parser("settings", help="list every setting with its default and help")
    st.set_defaults(run=cmd_settings)

    po = sub.add_parser("poll", help="poll the hazard-event sources once and record the changes")
    db_arg(po)
    po.add_argument("--demo", action="store_true", help="poll the bundled recorded samples")
    po.set_defaults(run=lambda a: asyncio.run(_poll(a)))

    nd = sub.add_parser("nodes", help="list or revoke volunteer compute nodes")
    nsub = nd.add_subparsers(dest="nodes_command", required=True, metavar="ACTION")
    nl = nsub.add_parser("list", help="every enrolled node with its trust and counts")
    db_arg(nl)
    nr = nsub.add_parser("revoke", help="revoke a node at once; its leased jobs go back to the queue")
    nr.add_argument("node_id", help="the node's id (nd_...)")
    nr.add_argument("--reason", required=True, help="why, recorded with the revocation and shown to the node")
    db_arg(nr)
    nd.set_defaults(run=lambda a: asyncio.run(_nodes(a)))
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
