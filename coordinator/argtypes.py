"""Argument types of the operator commands: what argparse refuses in one line (exit 2)."""
from __future__ import annotations

import argparse


def words(text: str) -> str:
    """Text that says something: a reason or a name recorded with a change is refused blank."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be blank")
    return text.strip()


def positive(text: str) -> int:
    """A count of at least 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n
