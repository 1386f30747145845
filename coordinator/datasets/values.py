"""Values of records being loaded, read one way by every kind."""
from __future__ import annotations

import json
from typing import Any


def number(value: Any) -> float:
    """A record's number: a JSON number or numeric text, as a float. Never a boolean, which
    float() reads as 1.0 or 0.0 (a position of true,false landed at 1,0 and widened the
    version's extent to cover ground it holds nothing of); anything else is a ValueError, so
    the record is counted bad."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{value!r} is not a number")
    return float(value)


def not_utf8(value: Any) -> str | None:
    """Why a record read as text is not UTF-8, or None. Text files are read with undecodable bytes
    kept as lone surrogates (``surrogateescape``), so that one bad byte is one bad record, counted,
    where a strict decoder ended the whole load at it, naming a position in its buffer that no
    operator could find. A JSON string escaping a lone surrogate (``"\\ud800"``) cannot be stored
    either, and is said the same way."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    try:
        text.encode("utf-8")
        return None
    except UnicodeEncodeError as exc:
        ch = text[exc.start]
        return (f"not UTF-8: byte 0x{ord(ch) - 0xDC00:02X}" if "\udc80" <= ch <= "\udcff"
                else "not UTF-8: a lone surrogate")
