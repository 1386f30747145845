"""Stop signals where the event loop cannot take them (Windows' ProactorEventLoop has no add_signal_handler),
simulated on Linux (audit h13)."""
from __future__ import annotations

import asyncio
import asyncio.unix_events
import signal
import types

import pytest

import node_agent.loop
from node_agent import cli


class FakeAgent:
    instances: list["FakeAgent"] = []

    def __init__(self, *a, **k):
        self.now_event = None
        self.stops = 0
        self.handlers: dict[int, object] = {}
        FakeAgent.instances.append(self)

    def request_stop(self):
        self.stops += 1

    async def run(self):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
            self.handlers[sig] = signal.getsignal(sig)
        signal.raise_signal(signal.SIGUSR1)          # Ctrl-Break, as SIGBREAK (here SIGUSR1 stands for it)
        for _ in range(50):
            if self.stops:
                break
            await asyncio.sleep(0.01)
        return 0


def _no_loop_signals(monkeypatch):
    def no_signals(self, *a, **k):
        raise NotImplementedError       # what ProactorEventLoop.add_signal_handler does
    monkeypatch.setattr(asyncio.AbstractEventLoop, "add_signal_handler", no_signals)
    monkeypatch.setattr(asyncio.unix_events._UnixSelectorEventLoop, "add_signal_handler", no_signals)


@pytest.mark.parametrize("loop_signals", [False, True], ids=["windows", "linux"])
def test_stop_signals_are_the_agents_while_it_runs_and_given_back_after(monkeypatch, loop_signals):
    if not loop_signals:
        _no_loop_signals(monkeypatch)
    monkeypatch.setattr(signal, "SIGBREAK", signal.SIGUSR1, raising=False)
    monkeypatch.setattr(node_agent.loop, "Agent", FakeAgent)
    ended = []      # SIGBREAK's default ends the process: here a handler that records it
    previous_usr1 = signal.signal(signal.SIGUSR1, lambda *_: ended.append(True))
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    try:
        code, at_once = asyncio.run(cli._run_agent(types.SimpleNamespace(coordinator="http://x"),
                                                   types.SimpleNamespace(data_dir="x"), None, None, None))
        agent = FakeAgent.instances[-1]
        assert code == 0 and agent.stops == 1 and not ended      # Ctrl-Break asked the agent to stop
        assert all(agent.handlers[sig] != before[sig] for sig in before)
        # After the loop closed: each signal's handler is what it was before, none bound to the closed loop.
        assert {sig: signal.getsignal(sig) for sig in before} == before
    finally:
        for sig, h in before.items():
            signal.signal(sig, h)
        signal.signal(signal.SIGUSR1, previous_usr1)


def test_a_ctrl_c_after_the_loop_closed_is_no_runtime_error(monkeypatch):
    """Before: the plain handler, bound to the closed loop, stayed; a Ctrl-C during the engine's shutdown
    raised RuntimeError('Event loop is closed') instead of KeyboardInterrupt."""
    _no_loop_signals(monkeypatch)
    monkeypatch.delattr(signal, "SIGBREAK", raising=False)
    monkeypatch.setattr(node_agent.loop, "Agent", FakeAgent)
    monkeypatch.setattr(FakeAgent, "run", lambda self: asyncio.sleep(0, 0))
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        asyncio.run(cli._run_agent(types.SimpleNamespace(coordinator="http://x"), types.SimpleNamespace(data_dir="x"),
                                   None, None, None))
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
        with pytest.raises(KeyboardInterrupt):
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])
