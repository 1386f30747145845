"""Reading one value of an upstream's record: unknown when it cannot be read.

An upstream answer is read record by record, and one odd field must not fail the source (and
so every answer that reads it) nor be served as something it is not. A number that is text
("big", "n/a"), NaN or infinite ("NaN", "1e999") is not a number here: None, unknown, never a
zero or the text passed on. A time in seconds (or milliseconds) since the epoch that Python
cannot place (10**20: ``datetime.fromtimestamp`` raises OverflowError or OSError) is unknown
too, and so is an ISO 8601 date that does not parse ("26/10/2026").
"""
from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import Any


def finite(raw: Any) -> float | None:
    """``raw`` as a finite number (a number, or a text of one as FRED writes them); None for
    absent, a boolean, a text that is not a number, NaN or an infinity."""
    if raw is None or isinstance(raw, bool):
        return None
    if isinstance(raw, (int, float)):
        value = raw
    elif isinstance(raw, str):
        try:
            value = float(raw.strip())
        except ValueError:
            return None
    else:
        return None
    try:
        return value if math.isfinite(value) else None
    except OverflowError:      # an int past what a float holds (10**400)
        return None


def epoch_utc(seconds: Any) -> str | None:
    """A time in seconds since the epoch as served (ISO 8601 UTC, ``Z``); None when absent,
    not a finite number, or past what the platform's clock functions place."""
    s = finite(seconds)
    if s is None:
        return None
    try:
        return datetime.fromtimestamp(int(s), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return None


def utc_z(text: str) -> str:
    """An upstream's time as the service writes every time it serves (``2026-06-01T08:13:32Z``):
    providers give offsets (``+00:00``, ``+07:00``) and fractions. A time with no zone, or none
    that reads, is kept as it came: turning it to UTC would invent a zone."""
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (TypeError, ValueError, AttributeError):
        return text
    if t.tzinfo is None:
        return text
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_utc(text: Any) -> datetime | None:
    """An ISO 8601 time as an aware datetime (``Z`` read as UTC; a time without an offset read
    as UTC, as GDACS writes them); None when absent or unreadable."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)


# A lone surrogate or a NUL, as JSON escapes them or (a surrogate) as the bytes json.loads lets
# through with ``surrogatepass``. Either in one title stopped the event history's every poll:
# neither encodes as UTF-8 (SQLite, PostgreSQL), and PostgreSQL's text refuses U+0000.
_ODD_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})|\xed[\xa0-\xbf]")
_ODD_TEXT = re.compile("[\ud800-\udfff]|\x00")


def storable_text(doc: Any, body: bytes) -> Any:
    """``doc`` (parsed from ``body``) with every lone surrogate in its text written U+FFFD and
    every NUL dropped, so that one odd character costs at most its own text. ``body`` is
    searched first (in C) and the document walked only when it holds one: an escaped pair
    (a real character beyond the BMP) is walked and kept as it is."""
    if (b"\\u" not in body and b"\xed" not in body) or not _ODD_ESCAPE.search(body):     # two scans in C first
        return doc
    return _cleaned(doc)


def _cleaned(value: Any) -> Any:
    if isinstance(value, str):
        return _ODD_TEXT.sub(lambda m: "" if m.group() == "\x00" else "\ufffd", value)
    if isinstance(value, list):
        return [_cleaned(v) for v in value]
    if isinstance(value, dict):
        return {_cleaned(k): _cleaned(v) for k, v in value.items()}
    return value

