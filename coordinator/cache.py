"""One cache for slow answers: keyed by tool and normalised parameters, with
the TTL the tool declares, and single flight (concurrent cold requests for the
same key share one computation). A degraded answer is never stored."""
from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from typing import Any, Awaitable, Callable

from .honesty import Answer


def cache_key(tool: str, family: str, params: dict[str, Any]) -> str:
    return f"{tool}|{family}|" + json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)


class AnswerCache:
    def __init__(self, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: OrderedDict[str, tuple[float, Answer]] = OrderedDict()
        self._inflight: dict[str, asyncio.Future[Answer]] = {}
        self.max_entries = max_entries
        self.clock = clock
        self.hits = self.misses = 0

    def get(self, key: str) -> Answer | None:
        hit = self._entries.get(key)
        if hit is None:
            return None
        expires, answer = hit
        if expires <= self.clock():
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return answer

    def put(self, key: str, answer: Answer, ttl_s: float) -> None:
        if ttl_s <= 0 or not answer.may_cache:
            return
        self._entries[key] = (self.clock() + ttl_s, answer)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    async def get_or_compute(self, key: str, ttl_s: float, compute: Callable[[], Awaitable[Answer]]) -> Answer:
        hit = self.get(key)
        if hit is not None:
            self.hits += 1
            return hit
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        self.misses += 1
        fut: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        try:
            answer = await compute()
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved: waiters, if any, re-raise it themselves
            raise
        finally:
            self._inflight.pop(key, None)
        fut.set_result(answer)
        self.put(key, answer, ttl_s)
        return answer
