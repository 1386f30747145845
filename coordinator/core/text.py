"""Text from outside (an upstream's message, a node's platform line, a stored reason) made one
line of bounded length before it is logged, printed on an operator's terminal or served as a
reason: a newline or a terminal escape in it would otherwise forge a log line or a table row."""
from __future__ import annotations

import re

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
ONE_LINE_MAX = 1000


def one_line(text: str, limit: int = ONE_LINE_MAX) -> str:
    """``text`` as one line of at most ``limit`` characters: control characters (a newline, a
    terminal escape, a NUL) written as ``\\xNN`` escapes, the rest cut with an ellipsis."""
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256 else
                        f"\\u{ord(m.group()):04x}", text)
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"
