"""Tiles: the live facts of one H3 cell packed into one row, as circle reads use them.

A dense 1500 m circle serves the nearest thousand facts of some 2,000 in its inner
disc. Read from ``seen_facts`` that is some 2,000 index entries walked and 1,000
rows fetched by key, one at a time, which was nine tenths of the answer's time on
SQLite. Read from ``seen_tiles`` it is some 170 rows, whose arrays numpy measures and
orders at once (``query.seen_facts``).

A tile holds, for every live fact of its cell, its id, latitude and longitude (three
arrays, little-endian int64 and float64), its ``doc`` as served (``publish.fact_doc``;
the UTF-8 texts one after another in ``docs``, their lengths in ``lens``, int32), in
the order the facts were approved. ``seen_facts`` stays the record; tiles are made
only from it:

- ``append``: an approval's new facts, in the approval's own transaction, so a fact
  is served exactly when it is live. Each touched tile is made if missing (insert,
  or nothing on conflict) and then read locked (``FOR UPDATE`` on PostgreSQL; on
  SQLite the write transaction holds the database), so two approvals in one cell
  take turns instead of losing one's facts.
- ``rebuild``: every tile again from ``seen_facts`` (migration 0007, the benches'
  bulk loads, and tests that write facts directly).

Facts are never removed from the seen layer today; a change that removes them must
remake their cells' tiles in the same transaction.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
from sqlalchemy import Connection, bindparam, delete, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite

from coordinator.core.db.models import SeenFact, SeenTile
from ..sweeps.coverage import chunks
from .spatial import in_cells

TILES = SeenTile.__table__
FACTS = SeenFact.__table__
ID, POS, LEN = np.dtype("<i8"), np.dtype("<f8"), np.dtype("<i4")
BLOBS = ("ids", "lats", "lons", "lens", "docs")
EMPTY = {"facts": 0, **{k: b"" for k in BLOBS}}
REBUILD_CELLS = 2_000     # cells per batch of a whole rebuild (some 15,000 facts in a dense city)

Fact = tuple[int, float, float, str]      # id, lat, lon, doc


def pack(facts: Sequence[Fact]) -> dict:
    """A tile's columns for these facts, in this order."""
    docs = [f[3].encode() for f in facts]
    return {"facts": len(facts), "ids": np.array([f[0] for f in facts], ID).tobytes(),
            "lats": np.array([f[1] for f in facts], POS).tobytes(),
            "lons": np.array([f[2] for f in facts], POS).tobytes(),
            "lens": np.array([len(d) for d in docs], LEN).tobytes(), "docs": b"".join(docs)}


_SET = (update(TILES).where(TILES.c.cell == bindparam("b_cell"))
        .values(facts=bindparam("b_facts"), **{k: bindparam(f"b_{k}") for k in BLOBS}))


def append(conn: Connection, facts: Iterable[dict]) -> int:
    """Add newly live facts (dicts with ``cell``, ``id``, ``lat``, ``lon``, ``doc``) to their
    cells' tiles, in the caller's transaction. Returns how many tiles changed."""
    by_cell: dict[int, list[Fact]] = defaultdict(list)
    for f in facts:
        by_cell[f["cell"]].append((f["id"], f["lat"], f["lon"], f["doc"]))
    pg = conn.dialect.name == "postgresql"
    make = (postgresql.insert if pg else sqlite.insert)(TILES).on_conflict_do_nothing(index_elements=["cell"])
    for cells in chunks(sorted(by_cell)):
        conn.execute(make, [{"cell": c, **EMPTY} for c in cells])
        q = select(TILES).where(TILES.c.cell.in_(cells)).order_by(TILES.c.cell)
        rows = conn.execute(q.with_for_update() if pg else q).all()
        changed = []
        for row in rows:
            new = pack(by_cell[row.cell])
            changed.append({"b_cell": row.cell, "b_facts": row.facts + new["facts"],
                            **{f"b_{k}": bytes(getattr(row, k)) + new[k] for k in BLOBS}})
        conn.execute(_SET, changed)
    return len(by_cell)


def rebuild(conn: Connection) -> int:
    """Make every tile again from ``seen_facts``, in the caller's transaction. Returns how
    many facts were packed. The table is read a batch of ``REBUILD_CELLS`` cells at a time,
    each batch a range of the ``(cell, lat, lon)`` index, so the work grows with the facts
    and no batch ends inside a cell."""
    cols = (FACTS.c.cell, FACTS.c.id, FACTS.c.lat, FACTS.c.lon, FACTS.c.doc)
    next_cells = (select(FACTS.c.cell).where(FACTS.c.cell > bindparam("after")).distinct()
                  .order_by(FACTS.c.cell).limit(REBUILD_CELLS))
    in_range = (select(*cols).where(FACTS.c.cell.between(bindparam("first"), bindparam("last")))
                .order_by(FACTS.c.cell, FACTS.c.id))
    conn.execute(delete(TILES))
    done, after = 0, -1           # cell ids are positive
    while batch := conn.execute(next_cells, {"after": after}).scalars().all():
        done += _write(conn, conn.execute(in_range, {"first": batch[0], "last": batch[-1]}).all())
        after = batch[-1]
    return done


def _write(conn: Connection, rows: list) -> int:
    """Insert the tiles of ``rows`` (cell, id, lat, lon, doc), ordered by cell, each cell whole."""
    tiles, i = [], 0
    while i < len(rows):
        j = i
        while j < len(rows) and rows[j].cell == rows[i].cell:
            j += 1
        tiles.append({"cell": rows[i].cell, **pack([tuple(r)[1:] for r in rows[i:j]])})
        i = j
    for batch in chunks(tiles):
        conn.execute(insert(TILES), batch)
    return len(rows)


@dataclass
class Packed:
    """Facts of some tiles, as arrays: ``docs[starts[i]:ends[i]]`` is fact i's doc."""

    ids: np.ndarray
    lats: np.ndarray
    lons: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    docs: bytes


_READ = {pg: select(*(TILES.c[k] for k in BLOBS)).where(in_cells(TILES.c.cell, pg)) for pg in (False, True)}


def read(conn: Connection, cells: list[int]) -> Packed:
    """The facts of the tiles of ``cells`` (one statement; the cell list is one parameter)."""
    rows = conn.execute(_READ[conn.dialect.name == "postgresql"], {"cells": cells}).all()
    if not rows:
        nothing = np.zeros(0, ID)
        return Packed(nothing, np.zeros(0, POS), np.zeros(0, POS), nothing, nothing, b"")
    ids, lats, lons, lens, docs = (b"".join(col) for col in zip(*rows))
    lens = np.frombuffer(lens, LEN)
    ends = np.cumsum(lens, dtype=np.int64)
    return Packed(np.frombuffer(ids, ID), np.frombuffer(lats, POS), np.frombuffer(lons, POS), ends - lens, ends,
                  docs)
