"""The shared answer cache's single-flight lock across processes: a short lease that the
holder renews while it computes. A holder killed mid-computation (SIGKILL, OOM) lets its
lock lapse within the lease, and a waiter takes over then, not after the two minutes the
lease used to last; a holder that computes longer than the lease keeps the lock, and the
key is computed once."""
from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from coordinator.core.cache import RedisAnswerCache
from coordinator.core.honesty import Answer
from tests.test_access_support import REDIS_URL, unique_prefix

pytestmark = pytest.mark.skipif(not REDIS_URL, reason="Redis tests: set SIS_TEST_REDIS_URL")

LEASE_S = 0.5
ROOT = Path(__file__).resolve().parents[1]

# A coordinator's cache in a process of its own, computing "k" for ever once it holds the lock.
HOLDER = """
import asyncio, sys
from coordinator.core.cache import RedisAnswerCache

async def main(url, prefix, lease_s):
    cache = RedisAnswerCache(url, prefix, lease_s=lease_s)

    async def compute():
        print("computing", flush=True)
        await asyncio.Event().wait()

    await cache.run("k", 60, compute)

asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
"""


def counting(computed: list[str], name: str, seconds: float = 0.0):
    async def compute() -> Answer:
        computed.append(name)
        await asyncio.sleep(seconds)
        return Answer({"by": name})
    return compute


async def started(computed: list[str], within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while not computed:
        assert time.monotonic() < deadline, "the computation never started"
        await asyncio.sleep(0.01)


async def test_a_holder_killed_mid_computation_is_taken_over_within_the_lease_not_after_minutes():
    """A second process takes the lock and computes; this one waits for it, and goes on
    waiting while the holder lives past several leases (it renews). Killed with SIGKILL,
    the holder renews no more: its lock lapses and one of the two caches waiting here (two
    coordinators, as far as the lock knows) computes the answer within about one lease of
    the kill, once, and the other is answered from it. With a lease that was not renewed
    they waited 120 s."""
    prefix = unique_prefix()
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLDER, REDIS_URL, prefix, str(LEASE_S), cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=asyncio.subprocess.PIPE)
    caches = [RedisAnswerCache(REDIS_URL, prefix, lease_s=LEASE_S) for _ in range(2)]
    computed: list[str] = []
    try:
        assert await asyncio.wait_for(holder.stdout.readline(), 30) == b"computing\n"
        waiters = [asyncio.create_task(c.run("k", 60, counting(computed, f"waiter{i}")))
                   for i, c in enumerate(caches)]
        await asyncio.sleep(4 * LEASE_S)           # the holder lives: it keeps its lock
        assert not any(w.done() for w in waiters) and computed == []
        holder.kill()
        killed = time.monotonic()
        await holder.wait()
        answers = await asyncio.wait_for(asyncio.gather(*waiters), 10)
        took = time.monotonic() - killed
        print(f"\nholder killed: answered {took:.2f} s later (lease {LEASE_S} s)")
        assert len(computed) == 1
        assert [a.data for a in answers] == [{"by": computed[0]}] * 2
        assert took < LEASE_S + 1.5
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()
        for c in caches:
            await c.close()


async def test_a_computation_longer_than_the_lease_keeps_the_lock_and_runs_once():
    """Two coordinators want one key; the first computes for four leases. It renews its
    lock all along, so the second waits for its entry and computes nothing (before the
    lock was renewed, the second took it once the lease lapsed and computed it too)."""
    prefix = unique_prefix()
    a = RedisAnswerCache(REDIS_URL, prefix, lease_s=LEASE_S)
    b = RedisAnswerCache(REDIS_URL, prefix, lease_s=LEASE_S)
    computed: list[str] = []
    try:
        first = asyncio.create_task(a.run("k", 60, counting(computed, "a", 4 * LEASE_S)))
        await started(computed)
        second = await asyncio.wait_for(b.run("k", 60, counting(computed, "b")), 10)
        assert (await first).data == second.data == {"by": "a"}
        assert computed == ["a"]
        assert await a.redis.get(a._k("lock", "k")) is None        # released once done
    finally:
        await a.close()
        await b.close()


async def test_renewal_stops_once_another_token_holds_the_lock():
    """The lease lapsed (a stalled event loop, say) and another process took the lock:
    the holder's renewal finds a token not its own, leaves that lock alone (its lease not
    touched) and renews no more. Its computation still finishes and is answered."""
    cache = RedisAnswerCache(REDIS_URL, unique_prefix(), lease_s=LEASE_S)
    lock = cache._k("lock", "k")
    renewals: list[bytes | None] = []
    real_eval = cache.redis.eval

    async def eval_seen(script, numkeys, *args):  # noqa: ANN001, ANN202
        if "pexpire" in script:
            renewals.append(await cache.redis.get(lock))
        return await real_eval(script, numkeys, *args)

    cache.redis.eval = eval_seen
    go_on = asyncio.Event()
    computed: list[str] = []

    async def compute() -> Answer:
        computed.append("holder")
        await go_on.wait()
        return Answer({"by": "holder"})

    try:
        run = asyncio.create_task(cache.run("k", 60, compute))
        await started(computed)
        await asyncio.sleep(LEASE_S)
        assert renewals and set(renewals) == {await cache.redis.get(lock)}   # ours, renewed
        await cache.redis.set(lock, b"another", px=5_000)
        await asyncio.sleep(LEASE_S)                     # one renewal finds it another's
        seen = len(renewals)
        assert renewals[-1] == b"another"
        await asyncio.sleep(LEASE_S)                     # and none comes after it
        assert len(renewals) == seen
        assert await cache.redis.get(lock) == b"another"
        assert await cache.redis.pttl(lock) > 3_000      # its lease not cut to ours
        go_on.set()
        assert (await asyncio.wait_for(run, 5)).data == {"by": "holder"}
        assert await cache.redis.get(lock) == b"another"   # not released: not ours
    finally:
        go_on.set()
        await cache.close()


async def test_redis_failing_a_renewal_stops_it_and_the_answer_is_still_returned():
    """A renewal that Redis does not answer stops the renewing, and the cache falls back
    as for any Redis failure (its warning); the computation goes on and its answer is
    returned."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    cache = RedisAnswerCache(REDIS_URL, unique_prefix(), lease_s=LEASE_S)
    real_eval = cache.redis.eval
    renewals = []

    async def eval_failing(script, numkeys, *args):  # noqa: ANN001, ANN202
        if "pexpire" in script:
            renewals.append(1)
            raise RedisConnectionError("Redis went away")
        return await real_eval(script, numkeys, *args)

    cache.redis.eval = eval_failing
    computed: list[str] = []
    try:
        answer = await asyncio.wait_for(cache.run("k", 60, counting(computed, "holder", 3 * LEASE_S)), 5)
        assert answer.data == {"by": "holder"} and computed == ["holder"]
        assert renewals == [1] and cache.fallbacks == 1         # said as a Redis failure, once
        # and it stays fallen back until it is tried again (RETRY_S): the call that failed within it said
        # "answers again" as soon as it returned
        assert cache.degraded
    finally:
        await cache.close()
