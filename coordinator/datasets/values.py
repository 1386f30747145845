"""Values of records being loaded, read one way by every kind."""
from __future__ import annotations

from typing import Any


def number(value: Any) -> float:
    """A record's number: a JSON number or numeric text, as a float. Never a boolean, which
    float() reads as 1.0 or 0.0 (a position of true,false landed at 1,0 and widened the
    version's extent to cover ground it holds nothing of); anything else is a ValueError, so
    the record is counted bad."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{value!r} is not a number")
    return float(value)
