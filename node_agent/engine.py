"""The sweep engine as the job loop sees it: ``run_job(job, images) -> Result``, with its
version and build hash (which enrolment and every result carry).

The engine is compiled into the agent; it is never fetched. Photos reach it as
the bytes the agent fetched, in memory.
"""
from __future__ import annotations


class EngineMissing(RuntimeError):
    """This installation has no usable sweep engine; the message says what is missing."""


def load_engine(device):
    """The real sweep engine on ``device`` (a ``loop.Device``)."""
    try:
        from sweep_engine.pipeline import Engine  # type: ignore[import-not-found]
    except ImportError as exc:
        raise EngineMissing(f"this installation has no sweep engine pipeline ({exc}); "
                            "install the node app with its engine") from None
    return Engine(device=device)
