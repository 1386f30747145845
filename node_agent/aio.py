"""The agent's asyncio helpers: the engine's own thread, tasks let go unawaited, and cancels
that ``asyncio.wait_for`` swallowed.

Apart from the agent's modules (``node_agent.loop`` and the parts it is made of) because
each of them uses these, and they hold no state of the agent's.
"""
from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any, Callable


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn`` in a daemon thread (not the default executor: a second Ctrl-C must not
    wait for a long engine run to end before the process can exit)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future = loop.create_future()

    def settle(value: Any, exc: BaseException | None) -> None:
        if not fut.done():
            fut.set_exception(exc) if exc is not None else fut.set_result(value)

    def target() -> None:
        try:
            value, exc = fn(*args), None
        except BaseException as e:  # handed to the awaiting task, not lost in the thread
            value, exc = None, e
        with contextlib.suppress(RuntimeError):  # the loop closed: the agent stopped at once
            loop.call_soon_threadsafe(settle, value, exc)

    threading.Thread(target=target, daemon=True, name="sis-engine").start()
    return await fut


def retrieve(fut: asyncio.Future) -> None:
    """Done callback for a task the agent may let go unawaited: its exception counts as seen,
    so asyncio never logs "exception was never retrieved". A cancelled one has none to see, and
    ``exception()`` raises CancelledError there, which asyncio logs as "Exception in callback"
    with a traceback: a second Ctrl-C during a job leaves the engine's task to be cancelled as
    the event loop shuts down."""
    if not fut.cancelled():
        fut.exception()


def raise_if_cancelled() -> None:
    """Honour a cancellation that ``asyncio.wait_for`` swallowed: on Python 3.11 a cancel that
    lands as the awaited event completes is lost, and the loop would turn for ever."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
