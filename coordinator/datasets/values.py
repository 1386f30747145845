"""Values of records being loaded, read one way by every kind."""
from __future__ import annotations

from typing import Any, Mapping

import sqlalchemy as sa


def number(value: Any) -> float:
    """A record's number: a JSON number or numeric text, as a float. Never a boolean, which
    float() reads as 1.0 or 0.0 (a position of true,false landed at 1,0 and widened the
    version's extent to cover ground it holds nothing of); anything else is a ValueError, so
    the record is counted bad."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{value!r} is not a number")
    return float(value)


def not_utf8(value: Any) -> str | None:
    """Why a record read as text cannot be stored as text, or None. Text files are read with
    undecodable bytes kept as lone surrogates (``surrogateescape``), so that one bad byte is one
    bad record, counted, where a strict decoder ended the whole load at it, naming a position in
    its buffer that no operator could find. A JSON string escaping a lone surrogate
    (``"\\ud800"``) cannot be stored either, and is said the same way. A NUL (U+0000, a raw
    byte in a CSV or ``"\\u0000"`` in JSON) is UTF-8 but no PostgreSQL text holds it: stored,
    it failed the whole load there while SQLite kept it, so it is a bad record on both.

    ``value`` is text, or a parsed record (dicts, lists, numbers, ``None``): every string in
    it, keys too, is looked at, walked without recursion (a record nested deeper than the
    stack is the parser's to refuse, not this check's)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            why = _text_not_utf8(v)
            if why:
                return why
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return None


def _text_not_utf8(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        ch = text[exc.start]
        return (f"not UTF-8: byte 0x{ord(ch) - 0xDC00:02X}" if "\udc80" <= ch <= "\udcff"
                else "not UTF-8: a lone surrogate")
    if "\x00" in text:
        return "holds a NUL character (U+0000), which PostgreSQL cannot store in text"
    return None


def column_limits(*tables: sa.Table) -> dict[str, int]:
    """The longest text each length-bound column (``String(n)``) of ``tables`` holds, by
    column name, the shortest where two tables share a name (a staging table and the one
    rows move to): what ``too_long`` checks rows against, read from the model so that no
    length is written twice."""
    out: dict[str, int] = {}
    for table in tables:
        for col in table.columns:
            n = getattr(col.type, "length", None)
            if isinstance(col.type, sa.String) and n:
                out[col.name] = min(n, out.get(col.name, n))
    return out


def too_long(row: Mapping[str, Any], limits: Mapping[str, int]) -> str | None:
    """Why a row does not fit its columns' lengths (``column_limits``), or None. PostgreSQL
    refuses text longer than a ``varchar(n)``, failing the whole load, where SQLite keeps
    it: checked before the row is written, such a record is one bad record on both. Lengths
    are in characters, as PostgreSQL counts them."""
    for name, n in limits.items():
        v = row.get(name)
        if isinstance(v, str) and len(v) > n:
            return f"{name} is {len(v)} characters, longer than the {n} its column holds"
    return None
