"""Keys and embed tokens: their formats, and the rows they are stored as.

A key is ``sisk_`` + 32 random URL-safe characters (192 bits); an embed token
is ``sise_`` + the same. Only the sha256 of either is stored, so a database
leak does not leak usable credentials; a lookup hashes what was presented and
reads one row by a unique index. The prefix tells the two kinds apart before
any database work, and a credential that has neither prefix (nor is the
anonymous literal) is refused without touching the database.
"""
from __future__ import annotations

import hashlib
import ipaddress
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from urllib.parse import quote, unquote, unquote_plus, urlsplit

import idna
from sqlalchemy import func, select, update

from coordinator.core.db import Database
from coordinator.core.db.models import AccessKey, EmbedToken
from coordinator.core.db.transactions import for_update
from coordinator.core.errors import BadParameter, Conflict, Forbidden, NotFound, Unauthorized
from coordinator.core.access import plans
from coordinator.core.times import aware, iso

KEY_PREFIX = "sisk_"
EMBED_PREFIX = "sise_"
_BODY = r"[A-Za-z0-9_-]{32}"
KEY_RE = re.compile(re.escape(KEY_PREFIX) + _BODY)
EMBED_RE = re.compile(re.escape(EMBED_PREFIX) + _BODY)
# A credential of this service anywhere in a text (a key, an embed token, a node token, a legacy
# reviewer key), of any length past its prefix and four characters: what the logs may show of it.
_IN_TEXT = re.compile(r"(sis[kenr]_[A-Za-z0-9_-]{4})[A-Za-z0-9_-]+")
_SHOWN = re.compile(r"sis[kenr]_[A-Za-z0-9_-]{4}")
_CREDENTIAL_PARAMETERS = ("key", "token")
URI_SAFE = "/_-.~:@!$'()*,;+="     # what a redacted part keeps as it is: the URI's own characters

# The review API's scope (docs/review.md): held by reviewers' keys (``sis reviewers create``),
# never by a key made without asking for it, nor by the anonymous credential, and not a scope
# of the public contract (no tool declares it; the review API checks it itself).
REVIEW_SCOPE = "review"
EMBED_SCOPE = "earth.embed"
# Scopes a key may hold: the anonymous ones, the site-intel scope, the right to mint embed
# tokens, and the review scope. A key made without ``scopes`` gets all but the last.
DEFAULT_KEY_SCOPES: tuple[str, ...] = (*plans.ANON_SCOPES, "earth.site-intel", EMBED_SCOPE)
ALL_SCOPES: tuple[str, ...] = (*DEFAULT_KEY_SCOPES, REVIEW_SCOPE)
KEY_PLANS = tuple(p for p in plans.PLANS if p != "anon")
MIN_EMBED_TTL_S, MAX_EMBED_TTL_S = 60, 7 * 86400

# A key's state as the operator's lists say it (sis keys list, sis reviewers list): one word each.
LIVE, REVOKED = "live", "revoked"


def now() -> datetime:
    return datetime.now(timezone.utc)


def redacted(uri: str) -> str:
    """``uri`` (a request's, as the logs write it) with every credential in it cut to the
    prefix that ``sis keys list`` shows (``sisk_2vTk…``): the database keeps only digests so
    that a leak of it gives nothing usable, and a log must not undo that. Read by the URI's
    structure, not only by the credential's look: the path's credential (``/public/v1/CRED/``)
    and ``?key=`` and ``?token=`` whatever they hold (a mistyped secret, a password), and a
    credential anywhere else percent-encoded or not. Matched on the look alone, one spelled
    ``sisk_%66…`` (served: Tornado decodes it) or one character short was written whole."""
    path, sep, query = uri.partition("?")
    segments = path.split("/")
    if len(segments) > 3 and segments[1:3] == ["public", "v1"] and unquote(segments[3]) != "anon":
        segments[3] = _cut(unquote(segments[3]))
    path = "/".join(_redacted_part(seg, unquote) for seg in segments)
    pairs = []
    for pair in query.split("&") if sep else ():
        name, eq, value = pair.partition("=")
        if unquote_plus(name).strip().lower() in _CREDENTIAL_PARAMETERS:
            value = _cut(unquote_plus(value))
        pairs.append(_redacted_part(name, unquote_plus) + eq + _redacted_part(value, unquote_plus))
    return path + sep + "&".join(pairs)


def _cut(secret: str) -> str:
    """What a log shows of a credential: its prefix and four characters where it looks like one
    of this service's, else nothing of it."""
    shown = _SHOWN.match(secret)
    return (shown.group(0) if shown else "") + "…" if secret else ""


def _redacted_part(raw: str, decode) -> str:  # noqa: ANN001
    """A path segment or query part as written, or where a credential is in it once decoded, the
    decoded text with the credential cut, written back percent-encoded (a decoded text may hold a
    line break, which the log must not)."""
    text = decode(raw)
    if not _IN_TEXT.search(text):
        return raw
    out, last = [], 0
    for found in _IN_TEXT.finditer(text):
        out += [quote(text[last:found.start()], safe=URI_SAFE), found.group(1), "…"]
        last = found.end()
    return "".join([*out, quote(text[last:], safe=URI_SAFE)])


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(6)


def _new_secret(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(24)


@dataclass(frozen=True)
class KeyRecord:
    id: str
    prefix: str
    name: str
    plan: str
    scopes: tuple[str, ...]
    created_at: datetime
    revoked_at: datetime | None

    @classmethod
    def of(cls, row: AccessKey) -> "KeyRecord":
        return cls(row.id, row.prefix, row.name, row.plan, tuple(row.scopes), aware(row.created_at),
                   aware(row.revoked_at) if row.revoked_at else None)

    def as_json(self) -> dict:
        return {"id": self.id, "prefix": self.prefix, "name": self.name, "plan": self.plan,
                "scopes": list(self.scopes), "createdAt": iso(self.created_at),
                "revokedAt": iso(self.revoked_at)}


@dataclass(frozen=True)
class EmbedRecord:
    id: str
    key_id: str
    chain_id: str
    origin: str
    budget: int
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None

    @classmethod
    def of(cls, row: EmbedToken) -> "EmbedRecord":
        return cls(row.id, row.key_id, row.chain_id, row.origin, row.budget, aware(row.created_at),
                   aware(row.expires_at), aware(row.revoked_at) if row.revoked_at else None)

    @property
    def ttl_s(self) -> int:
        """The lifetime its chain was minted with. Every token of a chain is written with
        ``expires_at = created_at + ttl`` from one instant (at mint and at each renewal), so
        the row holds its ttl without a column of its own."""
        return round((self.expires_at - self.created_at).total_seconds())

    def as_json(self) -> dict:
        return {"id": self.id, "keyId": self.key_id, "chain": self.chain_id, "origin": self.origin,
                "budgetPerVisitor": self.budget, "ttlS": self.ttl_s, "createdAt": iso(self.created_at),
                "expiresAt": iso(self.expires_at)}


_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
_LOOPBACK = ("localhost", "127.0.0.1", "[::1]")


def _bad_origin(message: str) -> BadParameter:
    return BadParameter(f"'origin' {message}", {"parameter": "origin"})


def origin_host(host: str) -> str:
    """The host of an origin as browsers send it, or BadParameter: a DNS name of letters,
    digits and hyphens (a Unicode name in its IDNA form), an IPv4 address, or an IPv6
    address in brackets. Nothing else may pass: the origin is written into
    ``Access-Control-Allow-Origin`` and ``Content-Security-Policy`` headers, where a ``;``,
    a space, a comma or a quote would add to or break the header's meaning."""
    if host.startswith("["):
        try:
            return f"[{ipaddress.IPv6Address(host[1:-1] if host.endswith(']') else '')}]"
        except ValueError:
            raise _bad_origin("has an invalid IPv6 address") from None
    if not host.isascii():
        # UTS #46 without transitional mapping, as browsers send it: the standard library's
        # "idna" codec is IDNA 2003, which maps ß to ss (faß.de became fass.de, another site,
        # allowed in the headers while the page's own origin, xn--fa-hia.de, was refused).
        try:
            host = idna.encode(host, uts46=True, transitional=False).decode("ascii")
        except (idna.IDNAError, UnicodeError):
            raise _bad_origin("has an invalid host name") from None
    host = host.lower()
    labels = host.split(".")
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise _bad_origin("has an invalid host name (letters, digits, hyphens and dots)")
    if labels[-1].isdigit():
        try:
            return str(ipaddress.IPv4Address(host))
        except ValueError:
            raise _bad_origin("has an invalid IPv4 address") from None
    return host


def normalise_origin(origin: str) -> str:
    """A framing origin as browsers send it: scheme://host[:port], https (or http on
    loopback), lower case, the default port and a bare ``/`` left out. Anything more (a
    path, query, fragment, user, a character outside a host name) is refused, not
    cleaned: an origin that needed cleaning is not the one a browser will send."""
    text = origin.strip()
    if not text or any(ch.isspace() or not ch.isprintable() for ch in text):
        raise _bad_origin("must be an origin such as https://example.org, without spaces or control characters")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise _bad_origin("is not a valid origin") from None
    if parts.scheme not in ("https", "http") or not parts.netloc:
        raise _bad_origin("must be an origin such as https://example.org")
    if parts.path not in ("", "/") or parts.query or parts.fragment or "?" in text or "#" in text or "@" in parts.netloc:
        raise _bad_origin("must be scheme://host[:port] only, without a path, query, fragment or user")
    host_text = parts.netloc.rsplit(":", 1)[0] if not parts.netloc.endswith("]") else parts.netloc
    host = origin_host(host_text)
    if port == 0 or (port is None and parts.netloc.endswith(":")):
        raise _bad_origin("has an invalid port")
    if parts.scheme == "http" and host not in _LOOPBACK:
        raise _bad_origin("must use https (http only on localhost)")
    default = {"https": 443, "http": 80}[parts.scheme]
    port_text = f":{port}" if port and port != default else ""
    return f"{parts.scheme}://{host}{port_text}"


def check_scopes(scopes: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The scopes a key is made with, each one known, at least one: a key with none could
    call no credentialed route, not even ``/limits`` to see why, so it is refused, never made."""
    unknown = [s for s in scopes if s not in ALL_SCOPES]
    if unknown:
        raise BadParameter(f"unknown scope {unknown[0]!r}: the scopes are {', '.join(ALL_SCOPES)}",
                           {"scope": unknown[0], "allowed": list(ALL_SCOPES)})
    if not scopes:
        raise BadParameter("a key needs at least one scope (an empty scope list is refused): the scopes are "
                           f"{', '.join(ALL_SCOPES)}; leave the scopes out for every scope but review",
                           {"scopes": [], "allowed": list(ALL_SCOPES)})
    return tuple(dict.fromkeys(scopes))


async def create_key(db: Database, name: str, plan: str = "Free",
                     scopes: list[str] | tuple[str, ...] | None = None) -> tuple[str, KeyRecord]:
    """Create a key; the secret is returned once and never stored."""
    if plan not in KEY_PLANS:
        raise BadParameter(f"plan must be one of {', '.join(KEY_PLANS)}", {"plan": plan})
    scope_list = check_scopes(DEFAULT_KEY_SCOPES if scopes is None else scopes)
    secret = _new_secret(KEY_PREFIX)
    row = AccessKey(id=_new_id("key_"), key_hash=digest(secret), prefix=secret[:9], name=name, plan=plan,
                    scopes=list(scope_list), created_at=now(), revoked_at=None)
    async with db.write() as s:
        s.add(row)
    return secret, KeyRecord.of(row)


async def list_keys(db: Database) -> list[KeyRecord]:
    async with db.read() as s:
        rows = (await s.execute(select(AccessKey).order_by(AccessKey.created_at, AccessKey.id))).scalars()
        return [KeyRecord.of(r) for r in rows]


async def revoke_key(db: Database, key_id: str) -> KeyRecord:
    """Revoke a key (and with it every embed token minted from it). Idempotent."""
    async with db.write() as s:
        row = await s.get(AccessKey, key_id)
        if row is None:
            raise NotFound(f"no key with id {key_id}", {"keyId": key_id})
        if row.revoked_at is None:
            row.revoked_at = now()
            await s.execute(update(EmbedToken).where(EmbedToken.key_id == key_id,
                                                     EmbedToken.revoked_at.is_(None)).values(revoked_at=row.revoked_at))
        return KeyRecord.of(row)


async def find_key(db: Database, secret: str) -> KeyRecord | None:
    async with db.read() as s:
        row = (await s.execute(select(AccessKey).where(AccessKey.key_hash == digest(secret)))).scalar_one_or_none()
        return KeyRecord.of(row) if row else None


DIGEST_HEAD = 16       # hex characters of a stored hash kept by ``live_digests``: 64 bits


async def live_digests(db: Database) -> frozenset[str]:
    """The head of the stored hash of every live credential (keys not revoked, embed tokens
    neither revoked nor expired), one read of each table. What an address that has spent
    its budget of failed credentials is checked against before a lookup: a live
    credential is looked up, a guess is refused without touching the rows."""
    at = now()
    async with db.read() as s:
        keys = await s.execute(select(func.substr(AccessKey.key_hash, 1, DIGEST_HEAD))
                               .where(AccessKey.revoked_at.is_(None)))
        out = set(keys.scalars())
        embeds = await s.execute(select(func.substr(EmbedToken.token_hash, 1, DIGEST_HEAD))
                                 .where(EmbedToken.revoked_at.is_(None), EmbedToken.expires_at > at))
        out.update(embeds.scalars())
    return frozenset(out)


async def find_key_by_id(db: Database, key_id: str) -> KeyRecord | None:
    async with db.read() as s:
        row = await s.get(AccessKey, key_id)
        return KeyRecord.of(row) if row else None


async def find_embed(db: Database, secret: str) -> EmbedRecord | None:
    async with db.read() as s:
        row = (await s.execute(select(EmbedToken).where(EmbedToken.token_hash == digest(secret)))).scalar_one_or_none()
        return EmbedRecord.of(row) if row else None


async def mint_embed(db: Database, key: KeyRecord, origin: str, budget: int, ttl_s: int) -> tuple[str, EmbedRecord]:
    """Mint a new embed token chain from ``key``. The origin is checked here, once.

    The plan's "max embed keys" bounds the chains alive at once (unrevoked, unexpired). The key
    must hold ``earth.embed``, whoever asks (the HTTP route and ``sis embed mint`` alike)."""
    if EMBED_SCOPE not in key.scopes:
        raise Forbidden(f"key {key.id} lacks the scope {EMBED_SCOPE}, which minting embed tokens needs",
                        {"missingScopes": [EMBED_SCOPE]})
    origin = normalise_origin(origin)
    if budget < 1:
        raise BadParameter("'budget' must be at least 1", {"parameter": "budget"})
    if not MIN_EMBED_TTL_S <= ttl_s <= MAX_EMBED_TTL_S:
        raise BadParameter(f"'ttl' must be between {MIN_EMBED_TTL_S} and {MAX_EMBED_TTL_S} seconds",
                           {"parameter": "ttl", "minimum": MIN_EMBED_TTL_S, "maximum": MAX_EMBED_TTL_S})
    plan = plans.PLANS[key.plan]
    t = now()
    async with db.write() as s:
        # The key's row locked (PostgreSQL; a SQLite write transaction holds the database), so the
        # mints of one key count its live chains one after another: counted side by side under READ
        # COMMITTED, 50 concurrent mints of a Free key (2 live chains) gave 10-11 chains.
        krow = await s.get(AccessKey, key.id, with_for_update=for_update(db))
        if krow is None or krow.revoked_at is not None:
            raise NotFound(f"no live key with id {key.id}", {"keyId": key.id})
        if plan.max_embed_keys is not None:
            live = (await s.execute(select(func.count(func.distinct(EmbedToken.chain_id))).where(
                EmbedToken.key_id == key.id, EmbedToken.revoked_at.is_(None), EmbedToken.expires_at > t))).scalar_one()
            if live >= plan.max_embed_keys:
                raise Conflict(f"the {plan.name} plan allows {plan.max_embed_keys} live embed tokens per key",
                               {"maxEmbedKeys": plan.max_embed_keys, "live": live})
        secret = _new_secret(EMBED_PREFIX)
        row = EmbedToken(id=_new_id("emb_"), token_hash=digest(secret), key_id=key.id, chain_id=_new_id("chn_"),
                         origin=origin, budget=budget, created_at=t, expires_at=t + timedelta(seconds=ttl_s),
                         revoked_at=None)
        s.add(row)
    return secret, EmbedRecord.of(row)


async def renew_embed(db: Database, token: EmbedRecord) -> tuple[str, EmbedRecord]:
    """A new token in the same chain (same origin, budget, lifetime and counters), with a fresh
    expiry: the lifetime the chain was minted with (``ttl``), not the default of the day, so a
    7-day token renews for 7 days and a 60 s one for 60 s. The old token stays valid until its
    own expiry so that requests in flight are not broken."""
    ttl_s = min(max(token.ttl_s, MIN_EMBED_TTL_S), MAX_EMBED_TTL_S)
    t = now()
    async with db.write() as s:
        # The token was found live when the request was authenticated; a `sis embed revoke` of its
        # chain since then must win, or the renewal would hand out a token of a revoked chain. Its row
        # is locked (PostgreSQL; a SQLite write transaction holds the database) and read again:
        # ``revoke_embed_chain`` locks the chain's rows before it revokes them, so whichever of the
        # two comes second sees what the first wrote, the new token included.
        revoked = (await s.execute(select(EmbedToken.revoked_at).where(EmbedToken.id == token.id)
                                   .with_for_update())).scalar_one_or_none()
        if revoked is not None:
            raise Unauthorized("the credential has been revoked", {"credential": "invalid", "reason": "revoked"})
        secret = _new_secret(EMBED_PREFIX)
        row = EmbedToken(id=_new_id("emb_"), token_hash=digest(secret), key_id=token.key_id,
                         chain_id=token.chain_id, origin=token.origin, budget=token.budget, created_at=t,
                         expires_at=t + timedelta(seconds=ttl_s), revoked_at=None)
        s.add(row)
    return secret, EmbedRecord.of(row)


async def revoke_embed_chain(db: Database, chain_id: str) -> int:
    """Revoke every token of an embed chain (`sis embed revoke`); returns how many were live.
    ``NotFound`` for a chain id no token has (a typo), which must not read as done."""
    async with db.write() as s:
        # Locked first, then revoked by a statement of its own: on PostgreSQL an UPDATE that waited
        # for a renewal's lock does not see the token that renewal inserted; the next statement does.
        await s.execute(select(EmbedToken.id).where(EmbedToken.chain_id == chain_id).with_for_update())
        res = await s.execute(update(EmbedToken).where(EmbedToken.chain_id == chain_id,
                                                       EmbedToken.revoked_at.is_(None)).values(revoked_at=now()))
        if not res.rowcount and (await s.execute(select(func.count()).select_from(EmbedToken).where(
                EmbedToken.chain_id == chain_id))).scalar_one() == 0:
            raise NotFound(f"no embed chain with id {chain_id} (sis embed list shows them)", {"chainId": chain_id})
        return res.rowcount or 0


async def list_embeds(db: Database, key_id: str | None = None) -> list[EmbedRecord]:
    async with db.read() as s:
        q = select(EmbedToken).order_by(EmbedToken.created_at, EmbedToken.id)
        if key_id:
            q = q.where(EmbedToken.key_id == key_id)
        return [EmbedRecord.of(r) for r in (await s.execute(q)).scalars()]
