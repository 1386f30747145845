"""``sis ingest KIND PATH``, ``sis datasets list`` and ``sis datasets drop``: loading
files, seeing what was loaded and deleting what is no longer wanted, from the command line."""
from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from .kinds import KINDS


def add_parser(sub, db_arg, settings_of) -> None:  # noqa: ANN001
    ig = sub.add_parser("ingest", help="load a dataset file as a new dataset version (progress on stderr)")
    ig.add_argument("kind", metavar="KIND", help="what the file holds (sis datasets kinds lists them)")
    ig.add_argument("path", metavar="PATH", help="the file")
    ig.add_argument("--license", help="the data's license (default: the kind's usual one)")
    ig.add_argument("--source", help="where the file came from, kept with the version (default: its name)")
    for option, takers in KINDS.companion_options().items():     # files a kind needs beside the main one
        ig.add_argument(f"--{option}", metavar=option.upper(),
                        help="; ".join(f"{kind}: {text}" for kind, text in takers))
    db_arg(ig)
    ig.set_defaults(run=lambda a: asyncio.run(ingest(a, settings_of)))

    ds = sub.add_parser("datasets", help="list dataset versions and the kinds that can be ingested")
    dsub = ds.add_subparsers(dest="datasets_command", required=True, metavar="ACTION")
    dl = dsub.add_parser("list", help="every dataset version: id, kind, state, counts, extent, license, sha256")
    dl.add_argument("--kind", help="only versions of this kind")
    dl.add_argument("--bad", action="store_true", help="under each version, every bad record's reason kept with it "
                                                       "(the first twenty)")
    db_arg(dl)
    dd = dsub.add_parser("drop", help="delete what dataset versions stored (rows, files); their records are kept, "
                                      "marked dropped")
    dd.add_argument("ids", metavar="VERSION", type=int, nargs="+", help="version ids, as sis datasets list shows")
    dd.add_argument("--crashed", action="store_true",
                    help="also drop versions still marked loading: only when no sis ingest is running")
    db_arg(dd)
    dd.set_defaults(run=lambda a: asyncio.run(drop_datasets(a, settings_of(a))))
    dk = dsub.add_parser("kinds", help="the kinds this coordinator can ingest")
    dk.set_defaults(run=lambda a: kinds_list())
    dl.set_defaults(run=lambda a: asyncio.run(list_datasets(a, settings_of(a))))


class Bar:
    """A progress bar on stderr (tqdm) over the file's bytes, with the counts beside it;
    silent when stderr is not a terminal, where the closing line says it all."""

    def __init__(self, desc: str) -> None:
        from tqdm import tqdm

        self._bar = tqdm(desc=desc, total=None, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr,
                         disable=None, dynamic_ncols=True, leave=True)

    def advance(self, done: int, total: int | None) -> None:
        if self._bar.total is None and total:
            self._bar.total = total
        self._bar.update(done - self._bar.n)

    def counts(self, records: int, bad: int) -> None:
        self._bar.set_postfix_str(f"{records:,} records, {bad:,} bad", refresh=False)

    def close(self) -> None:
        self._bar.close()


def kinds_list() -> int:
    names = KINDS.names()
    for name in names:
        k = KINDS.get(name)
        print(f"{k.name:20} {','.join(k.suffixes):24} {k.license:20} {k.description}")
    print(f"{len(names)} kinds")
    return 0


async def ingest(args: argparse.Namespace, settings_of) -> int:  # noqa: ANN001
    from coordinator.core.db.migrate import with_database
    from . import ingest as ingesting
    from .versions import extent_of, folder_of

    if KINDS.get(args.kind) is None:          # before anything is opened or recorded
        print(f"sis ingest: {ingesting.unknown_kind(args.kind)}", file=sys.stderr)
        return 2
    settings = settings_of(args)

    async def work(db) -> int:  # noqa: ANN001
        # SIGTERM (systemd stop, docker stop, timeout) ends the load as Ctrl-C does, its version marked
        # failed and its rows deleted: uncaught, it left the version `loading` for ever, rows staged.
        # The cancellation lands where the load waits, in a database call; that call's connection
        # lets go of its write lock at once (``core.db``), so the clean-up is not bounded here: a bound
        # cut short the clean-up of a large version (its rows are deleted 50,000 at a time), and the
        # service manager's own stop timeout (TimeoutStopSec, docker stop -t) bounds a stop.
        loop, task, stopped = asyncio.get_running_loop(), asyncio.current_task(), []
        loop.add_signal_handler(signal.SIGTERM, lambda: (stopped.append(True), task.cancel()))
        try:
            companions = {c: getattr(args, c, None) for c in KINDS.companion_options()}
            v = await ingesting.run(db, args.kind, args.path, license=args.license, source=args.source,
                                    progress=Bar(f"{args.kind} {Path(args.path).name}"),
                                    companions={k: p for k, p in companions.items() if p is not None},
                                    data_dir=settings.data_dir)
        except ingesting.IngestError as exc:
            print(f"sis ingest: {exc}", file=sys.stderr)
            return 2 if exc.usage else 1
        except asyncio.CancelledError:
            if not stopped:
                raise
            task.uncancel()      # handled here: what runs after (the database's close) is not being cancelled
            print("sis ingest: stopped by SIGTERM: the version it was loading is marked failed (interrupted) and "
                  "its rows deleted", file=sys.stderr)
            return 128 + signal.SIGTERM
        finally:
            loop.remove_signal_handler(signal.SIGTERM)
        box = extent_of(v)
        print(f"version {v.id} of {v.kind} ready: {v.records} records, {v.bad_records} bad, "
              f"extent {box if box else 'none'}, license {v.license}, sha256 {v.sha256}")
        folder = folder_of(settings.data_dir, v)
        if v.folder is not None and folder.is_dir():
            # Said absolute: a relative SIS_DATA_DIR (the default var/data) is the folder this ran in's,
            # and a server started elsewhere looks elsewhere.
            print(f"its files: {folder.resolve()}" + ("" if Path(settings.data_dir).is_absolute() else
                  f" (SIS_DATA_DIR {settings.data_dir} is relative to the folder this ran in: every coordinator "
                  "must see this one)"))
        if v.bad_records:
            shown = v.bad_samples[:5]
            print(f"sis ingest: {v.bad_records} bad record{'s' if v.bad_records != 1 else ''} not loaded "
                  f"(counted with version {v.id}; `sis datasets list --bad` shows them); first: {'; '.join(shown)}",
                  file=sys.stderr)
        return 0

    return await with_database(settings, work, "sis ingest", create=True)


async def list_datasets(args: argparse.Namespace, settings) -> int:  # noqa: ANN001
    from coordinator.core.db.migrate import with_database
    from .versions import extent_of, iso, list_versions

    if args.kind and args.kind not in KINDS.names():          # a typo would list "0 dataset versions"
        print(f"sis datasets list: no kind {args.kind!r}; the kinds are {', '.join(sorted(KINDS.names()))}",
              file=sys.stderr)
        return 2

    async def work(db) -> int:  # noqa: ANN001
        rows = await list_versions(db, args.kind)
        print(f"{'version':>7} {'kind':16} {'state':7} {'loaded at':20} {'records':>9} {'bad':>6} "
              f"{'extent (w,s,e,n)':36} {'license':16} {'sha256':12} source / note")
        for v in rows:
            box = extent_of(v)
            extent = ",".join(f"{x:.5g}" for x in box) if box else "-"
            note = v.error if v.state == "failed" else "" if v.state == "dropped" else (
                f"first bad: {v.bad_samples[0]}" if v.bad_samples else "")
            print(f"{v.id:7d} {v.kind:16} {v.state:7} {iso(v.loaded_at):20} {v.records:9d} {v.bad_records:6d} "
                  f"{extent:36} {v.license:16} {(v.sha256 or '-')[:12]:12} {v.source}"
                  f"{'  (' + note + ')' if note else ''}")
            if args.bad and v.bad_samples:
                for reason in v.bad_samples:
                    print(f"{'':8}bad: {reason}")
                if v.bad_records > len(v.bad_samples):
                    print(f"{'':8}... and {v.bad_records - len(v.bad_samples)} more, not kept")
        print(f"{len(rows)} dataset versions")
        return 0

    return await with_database(settings, work, "sis datasets")


async def drop_datasets(args: argparse.Namespace, settings) -> int:  # noqa: ANN001
    from coordinator.core.db.migrate import with_database
    from . import drop, versions

    async def work(db) -> int:  # noqa: ANN001
        try:
            chosen = await drop.check(db, args.ids, crashed=args.crashed)
        except drop.DropError as exc:
            print(f"sis datasets drop: {exc}; nothing dropped", file=sys.stderr)
            return 2
        for v in chosen:
            try:
                d = await drop.drop(db, v, settings.data_dir)
            except OSError as exc:      # its files: marked dropped already, so running it again finishes it
                print(f"sis datasets drop: version {v.id} of {v.kind} is marked dropped, but its files could not "
                      f"be removed: {exc}", file=sys.stderr)
                return 1
            done = [part for part, did in (("its rows deleted", KINDS.get(v.kind).discard is not None),
                                           (f"its files removed ({d.folder})", d.folder is not None)) if did]
            now = (f"the newest ready {v.kind} version is {d.newest.id}" if d.newest
                   else f"no {v.kind} version is ready now: its answers say none is loaded")
            if not done:      # a kind that keeps files, none of them removed
                done = ["its load failed and kept no files" if d.was == versions.FAILED
                        else f"no files of it under {settings.data_dir} (SIS_DATA_DIR)"]
            head = "was dropped already: what was left of it deleted" if d.again else "dropped: " + " and ".join(done)
            print(f"version {v.id} of {v.kind} {head}; {now}")
        return 0

    return await with_database(settings, work, "sis datasets")
