"""Who may call what, and how often. Everything here runs inside ``call_tool``,
before any cache lookup and before the tool, so every face (REST of each
family, MCP) gets the same enforcement.

Two steps, split so that a request with bad parameters is not counted:

1. ``identify``: resolve the credential (anonymous literal, key, embed token),
   refuse an invalid one (401) or one without the tool's scope (403). No
   counting, except that failed credentials are counted per client IP (60 a
   minute), so guessing keys is limited: past that an address's guesses are
   refused 429 without a lookup, while a live key or token it presents is still
   served (``LiveCredentials``), so a lockout never refuses a valid key.
2. ``admit``: the per-minute window (429), then the persisted day / month /
   budget counters in one transaction that also re-reads revocation (401 if
   revoked since, 429 if a quota is spent, 403 if an embed budget is spent).
   ``/limits`` (``SELF_READS``) counts in the window only: the same transaction
   re-reads revocation and expiry and counts nothing, so a caller whose quota or
   budget is spent can still read it.
   Direct-family keyed requests, whose counters have no ceiling, wait only for a
   shared revocation read (``revocation.py``) and are counted after (``tally.py``).

The anonymous credential's literal is ``anon``: ``/public/v1/anon/events``.
It has kind ``anon``, plan ``anon`` and the anonymous scopes of SPEC.md.
"""
from __future__ import annotations

import asyncio
import hashlib
import functools
import ipaddress
import logging
import math
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, NoReturn

from coordinator.core.context import Caller
from coordinator.core.errors import Forbidden, RateLimited, ServiceError, Unauthorized
from coordinator.core.registry import Tool
from coordinator.core.access import credentials as creds
from coordinator.core.access import plans
from coordinator.core.access.clientip import ClientIp
from coordinator.core.access.prune import Pruner
from coordinator.core.access.revocation import RevocationReads
from coordinator.core.access.meter import LIFE, Counter, RateLimiter, UsageStore, Window, day_period, month_period, \
    seconds_until_period_end

if TYPE_CHECKING:  # pragma: no cover
    from coordinator.core.db import Database
    from coordinator.core.context import RequestFacts
    from coordinator.core.settings import Settings

log = logging.getLogger("sis.access")

ANON_CREDENTIAL = "anon"

# Unknown, malformed or revoked credentials one client IP may present per minute; past that,
# what it presents is looked up only if it is live (``LiveCredentials``), and refused 429 if not.
FAILED_CREDENTIALS_PER_MINUTE = 60

# Caller kinds, as /limits names them.
KIND_IP, KIND_ANON, KIND_KEY, KIND_EMBED = "ip", "anon", "key", "embed"

# Tools by which a caller reads its own credential, caps and quotas (``GET /public/v1/:cred/limits``).
# They count against the per-minute window only: no day, month, embed-loads or embed-budget
# counter, so they answer when those are spent (a caller can always learn where it stands and
# when it resets) and reading them costs nothing of what they report. Revocation and expiry
# are still re-read in the metering transaction.
SELF_READS = frozenset({"credential_limits"})


def client_ip(remote_ip: str | None) -> str:
    return remote_ip or "unknown"


@functools.lru_cache(maxsize=65536)
def ip_bucket(ip: str) -> str:
    """What a per-IP window counts: an IPv4 address, or the /64 of an IPv6 one (one subscriber
    usually holds a whole /64, so counting single IPv6 addresses would not limit anyone)."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return ip
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return str(addr.ipv4_mapped)
        return str(ipaddress.ip_network(f"{addr}/64", strict=False))
    return str(addr)


def visitor_id(chain_id: str, ip: str) -> str:
    """An embed visitor is a client IP within one token chain, stored only as this hash."""
    return hashlib.sha256(f"{chain_id}|{ip}".encode()).hexdigest()[:20]


def caller_kind(caller: Caller) -> str:
    return caller.extra.get("kind", KIND_IP)


def invalid(reason: str, message: str = "the credential is not valid") -> Unauthorized:
    return Unauthorized(message, {"credential": "invalid", "reason": reason})


@dataclass
class _Cached:
    expires: float
    record: object


class LiveCredentials:
    """Which credentials are live (the head of each live key's and embed token's stored
    hash), read for addresses that have spent their budget of failed credentials.

    Refusing such an address everything but cached credentials would let anyone sharing
    it (a NAT, an office, a carrier's gateway) lock out its key users by guessing 60
    times; refusing nothing would let guessing go on at a database read a guess. Instead
    a credential it presents is looked up only if it is in this set, so a valid key is
    served and a guess is refused with no row read. The set is read again when a
    credential is not in it, since the credential may have been made since (by another
    process, ``sis keys create``), but at most once every ``RELOAD_S`` whatever the
    number of guesses: a miss waits for a read that began after it was asked, and
    every request waiting shares that read."""

    RELOAD_S = 0.5

    def __init__(self, db: "Database") -> None:
        self.db = db
        self._heads: frozenset[str] = frozenset()
        self._read_at = -math.inf          # when the last read began (monotonic)
        self._lock = asyncio.Lock()
        self.reads = 0

    async def holds(self, secret_hash: str) -> bool:
        head = secret_hash[:creds.DIGEST_HEAD]
        if head in self._heads:
            return True
        asked = time.monotonic()
        async with self._lock:
            if self._read_at < asked:      # no read began since this was asked: one must
                wait = self._read_at + self.RELOAD_S - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                began = time.monotonic()
                self._heads = await creds.live_digests(self.db)
                self._read_at = began
                self.reads += 1
        return head in self._heads


class Access:
    """The access state of one coordinator process: windows, persisted counters and a
    small cache of credential lookups."""

    def __init__(self, settings: "Settings", db: "Database") -> None:
        self.settings = settings
        self.db = db
        self.limiter = RateLimiter(settings.redis_url, settings.rate_limit_prefix,
                                   enforce=not settings.bench_unlimited)
        if settings.bench_unlimited:
            log.warning("SIS_BENCH_UNLIMITED is set: per-minute rate limits are not enforced")
        self.usage = UsageStore(db)
        self.revocations = RevocationReads(db)
        self.client_ip = ClientIp(settings.trusted_proxies, settings.client_ip_header)
        self.cache_s = settings.access_cache_s
        self._cache: dict[str, _Cached] = {}
        self.live = LiveCredentials(db)
        # Deletes what the access tables no longer need (``prune.py``); started with the other
        # leader jobs (``services.create_services``), run by the leader process only.
        self.pruner = Pruner(db, settings)

    async def close(self) -> None:
        await self.pruner.stop()
        await self.usage.close()
        await self.revocations.close()
        await self.limiter.close()

    # ---- lookups (cached; revocation is re-read when metering, not here) ----

    def forget(self, secret_hash: str) -> None:
        self._cache.pop(secret_hash, None)

    async def _lookup(self, secret: str, finder, ip: str) -> object | None:  # noqa: ANN001
        h = creds.digest(secret)
        hit = self._cache.get(h)
        if hit is not None and hit.expires > time.monotonic():
            return hit.record
        await self._guard_ip(ip, h)  # a cache miss costs a database read: not for a guess past the budget
        record = await finder(self.db, secret)
        if record is not None and self.cache_s > 0:
            if len(self._cache) > 50_000:
                self._cache.clear()
            self._cache[h] = _Cached(time.monotonic() + self.cache_s, record)
        return record

    async def _key_by_id(self, key_id: str) -> creds.KeyRecord | None:
        h = "id:" + key_id
        hit = self._cache.get(h)
        if hit is not None and hit.expires > time.monotonic():
            return hit.record  # type: ignore[return-value]
        record = await creds.find_key_by_id(self.db, key_id)
        if record is not None and self.cache_s > 0:
            self._cache[h] = _Cached(time.monotonic() + self.cache_s, record)
        return record

    async def _failed(self, ip: str, err: ServiceError) -> ServiceError:
        """A failed credential counts in the client IP's window of failed credentials."""
        w = await self.limiter.hit(FAILED_CREDENTIALS_PER_MINUTE, "authfail", ip_bucket(ip))
        if not w.allowed:
            return self._too_many(w, "failedCredentialsPerMinute", "failed-credential per-IP")
        return err

    async def _guard_ip(self, ip: str, secret_hash: str) -> None:
        """Past an IP's window of failed credentials, refuse what it presents without a lookup
        unless it is a live credential (``LiveCredentials``): guessing keys costs a database
        read each and stays refused, a valid key presented from the same address is served."""
        w = await self.limiter.peek(FAILED_CREDENTIALS_PER_MINUTE, "authfail", ip_bucket(ip))
        if not w.allowed and not await self.live.holds(secret_hash):
            raise self._too_many(w, "failedCredentialsPerMinute", "failed-credential per-IP")

    # ---- step 1: who is it ----

    async def identify(self, tool: Tool, family: str, facts: "RequestFacts") -> Caller:
        ip = self.client_ip.resolve(facts.remote_ip, facts.headers)
        if family != "public":
            return await self._identify_direct(tool, ip, facts.api_key)
        caller = await self._identify_public(ip, facts.credential or "")
        missing = [s for s in tool.scopes if s not in caller.scopes]
        # A key-only route says so to anon first: "use a key" is what it needs to hear, and the scopes
        # it lacks come with it.
        if not tool.keyless and caller_kind(caller) == KIND_ANON:
            raise Forbidden(f"{tool.name} is not open to the anonymous credential: use a key or an embed token",
                            {"reason": "needs_key", **({"missingScopes": missing} if missing else {})})
        if missing:
            raise Forbidden(f"this credential lacks the scope {missing[0]}", {"missingScopes": missing})
        if tool.name in SELF_READS:
            caller.extra["self_read"] = True
        return caller

    async def _identify_direct(self, tool: Tool, ip: str, api_key: str | None) -> Caller:
        if not api_key:
            if not tool.keyless:
                raise Unauthorized(f"{tool.name} needs a key in the X-Api-Key header or as ?key= on the URL",
                                   {"credential": "missing"})
            return Caller(ip=ip, extra={"kind": KIND_IP})
        if not creds.KEY_RE.fullmatch(api_key):
            raise await self._failed(ip, invalid("malformed", "the API key is not valid"))
        key = await self._lookup(api_key, creds.find_key, ip)
        if key is None or key.revoked_at is not None:  # type: ignore[union-attr]
            raise await self._failed(ip, invalid("revoked" if key else "unknown", "the API key is not valid"))
        return Caller(ip=ip, key_id=key.id, plan=key.plan, scopes=frozenset(key.scopes),  # type: ignore[union-attr]
                      extra={"kind": KIND_KEY, "key": key, "secret_hash": creds.digest(api_key)})

    async def _identify_public(self, ip: str, cred: str) -> Caller:
        if cred == ANON_CREDENTIAL:
            return Caller(ip=ip, credential=ANON_CREDENTIAL, plan="anon", scopes=frozenset(plans.ANON_SCOPES),
                          extra={"kind": KIND_ANON})
        if creds.KEY_RE.fullmatch(cred):
            key = await self._lookup(cred, creds.find_key, ip)
            if key is None or key.revoked_at is not None:  # type: ignore[union-attr]
                raise await self._failed(ip, invalid("revoked" if key else "unknown",
                                                     "the credential in the path is not valid"))
            return Caller(ip=ip, key_id=key.id, credential=key.id, plan=key.plan,  # type: ignore[union-attr]
                          scopes=frozenset(key.scopes),  # type: ignore[union-attr]
                          extra={"kind": KIND_KEY, "key": key, "secret_hash": creds.digest(cred)})
        if creds.EMBED_RE.fullmatch(cred):
            token = await self._lookup(cred, creds.find_embed, ip)
            if token is None or token.revoked_at is not None:  # type: ignore[union-attr]
                raise await self._failed(ip, invalid("revoked" if token else "unknown",
                                                     "the embed token in the path is not valid"))
            assert isinstance(token, creds.EmbedRecord)
            if token.expires_at <= datetime.now(timezone.utc):
                raise invalid("expired", "the embed token has expired: renew it before it expires, "
                                         "or mint a new one")
            key = await self._key_by_id(token.key_id)
            if key is None or key.revoked_at is not None:
                raise await self._failed(ip, invalid("revoked", "the embed token in the path is not valid"))
            # An embed token acts with its key's plan and scopes, except that it cannot mint more tokens.
            scopes = frozenset(s for s in key.scopes if s != "earth.embed")
            return Caller(ip=ip, key_id=key.id, credential=token.id, plan=key.plan, scopes=scopes,
                          extra={"kind": KIND_EMBED, "key": key, "embed": token, "secret_hash": creds.digest(cred),
                                 "visitor": visitor_id(token.chain_id, ip_bucket(ip))})
        raise await self._failed(ip, invalid("malformed", "the credential in the path is not valid: use "
                                             f"'{ANON_CREDENTIAL}', a key or an embed token"))

    # ---- step 2: may it, now ----

    async def admit(self, family: str, caller: Caller) -> dict[str, str]:
        """Count the request against every ceiling that applies; return the RateLimit headers."""
        kind = caller_kind(caller)
        if kind in (KIND_IP, KIND_ANON):
            w = await self.limiter.hit(plans.DIRECT_ANON_PER_MINUTE, "ip", ip_bucket(caller.ip))
            if not w.allowed:
                raise self._too_many(w, "perMinute", "anonymous per-IP")
            caller.extra["window"] = w
            return w.headers()
        key: creds.KeyRecord = caller.extra["key"]
        plan = plans.PLANS[key.plan]
        now = datetime.now(timezone.utc)
        day, month = day_period(now), month_period(now)
        if family != "public":
            # No day or month ceiling here: the request waits only for the revocation read
            # (``revocation.py``), and its counts are written after it (``tally.py``).
            w = await self.limiter.hit(plans.DIRECT_KEYED_PER_MINUTE, "dkey", key.id)
            if not w.allowed:
                raise self._too_many(w, "perMinute", "keyed")
            refused = await self.revocations.check(key.id)
            if refused:
                self._revoked(caller, key, refused)
            self.usage.tally.add([(f"direct:{key.id}", day), (f"direct:{key.id}", month)])
            caller.extra["window"] = w
            return w.headers()
        w = await self.limiter.hit(plan.per_minute, "key", key.id)
        if not w.allowed:
            raise self._too_many(w, "perMinute", f"{plan.name} plan")
        counters = []
        embed_id = None
        if kind == KIND_EMBED:
            token: creds.EmbedRecord = caller.extra["embed"]
            embed_id = token.id
            counters.append(Counter(f"embed:{token.chain_id}:{caller.extra['visitor']}", LIFE,
                                    token.budget, "embedBudget"))
            counters.append(Counter(f"embedloads:{key.id}", day, plan.embed_loads_per_day, "embedLoadsPerDay"))
        counters += [Counter(f"key:{key.id}", day, plan.per_day, "perDay"),
                     Counter(f"key:{key.id}", month, plan.per_month, "perMonth")]
        if caller.extra.get("self_read"):
            counters = []         # SELF_READS: the transaction below only re-reads revocation and expiry
        caller.extra["window"] = w
        out = await self.usage.consume(counters, key_id=key.id, embed_id=embed_id, at=now)
        if out.refused:
            self._revoked(caller, key, out.refused)
        if out.exhausted is not None:
            c = out.exhausted
            if c.name == "embedBudget":
                raise Forbidden(f"this visitor has spent the embed token's budget of {c.limit} requests",
                                {"reason": "embed_budget_exhausted", "budget": c.limit,
                                 "note": "The budget is per visitor over the token's whole chain of renewals; "
                                         "it does not reset."})
            reset = seconds_until_period_end(c.period, now) or 0
            raise RateLimited(f"the {c.name} quota of the {plan.name} plan ({c.limit}) is spent",
                              {"limit": c.name, "quota": c.limit, "plan": plan.name, "retryAfterS": reset},
                              headers={"Retry-After": str(reset), "RateLimit-Limit": str(c.limit),
                                       "RateLimit-Remaining": "0", "RateLimit-Reset": str(reset)})
        caller.extra["counts"] = out.counts
        return w.headers()

    def _revoked(self, caller: Caller, key: creds.KeyRecord, reason: str) -> NoReturn:
        self.forget(caller.extra.get("secret_hash", ""))
        self.forget("id:" + key.id)
        raise invalid(reason, "the embed token has expired" if reason == "expired"
                      else "the credential has been revoked")

    @staticmethod
    def _too_many(w: Window, limit: str, which: str) -> RateLimited:
        retry = max(1, w.reset_s)
        return RateLimited(f"too many requests: the {which} limit is {w.limit} per minute",
                           {"limit": limit, "perMinute": w.limit, "retryAfterS": retry},
                           headers={"Retry-After": str(retry), **w.headers()})

    # ---- what a caller may read of its own usage ----

    async def key_usage(self, key: creds.KeyRecord) -> dict[str, int]:
        now = datetime.now(timezone.utc)
        day, month = day_period(now), month_period(now)
        got = await self.usage.read([(f"key:{key.id}", day), (f"key:{key.id}", month),
                                     (f"direct:{key.id}", day), (f"direct:{key.id}", month),
                                     (f"embedloads:{key.id}", day)])
        return {"publicToday": got[(f"key:{key.id}", day)], "publicThisMonth": got[(f"key:{key.id}", month)],
                "directToday": got[(f"direct:{key.id}", day)], "directThisMonth": got[(f"direct:{key.id}", month)],
                "embedLoadsToday": got[(f"embedloads:{key.id}", day)]}

    async def visitor_used(self, caller: Caller) -> int:
        token: creds.EmbedRecord = caller.extra["embed"]
        subject = f"embed:{token.chain_id}:{caller.extra['visitor']}"
        return (await self.usage.read([(subject, LIFE)]))[(subject, LIFE)]


def embed_headers(caller: Caller) -> dict[str, str]:
    """What binds browsers only: an embed token's answers may be read and framed by its origin."""
    token = caller.extra.get("embed")
    if token is None:
        return {}
    return {"Access-Control-Allow-Origin": token.origin,
            "Content-Security-Policy": f"frame-ancestors {token.origin}"}
