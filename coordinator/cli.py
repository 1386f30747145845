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

    from .nodes.cli import add_parser as add_nodes_parser
    add_nodes_parser(sub, db_arg, _settings)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
