"""Settings in one typed place.

Every setting has a default and a help line (the field description). Values
come from, in order of precedence: command-line flags, environment variables
with the prefix ``SIS_`` (``SIS_DATABASE_URL``...), an optional TOML file named
by ``SIS_CONFIG``, then the defaults below. Secrets are never defaults: they
come by environment or file.

Each upstream source has nested settings under its adapter's name
(``SIS_SOURCES__GDACS__BASE_URL``, ``__TIMEOUT_S``, ``__API_KEY`` or
``__API_KEY_FILE``, and the adapter's own options such as
``SIS_SOURCES__USGS__FEED``); the adapter declares their defaults
(``coordinator/sources``), so a new upstream adds no line here.
"""
from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import (BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict,
                               TomlConfigSettingsSource)

DEFAULT_DB = "sqlite+aiosqlite:///var/sis.db"
# The database of demo mode when none is named (``sis serve --demo``, SIS_DEMO): beside the
# default one, so that a plain ``sis serve`` afterwards serves none of the demo's data.
DEMO_DB = "sqlite+aiosqlite:///var/demo.db"
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")

# Flat source settings of earlier releases, now nested (``SIS_SOURCES__<NAME>__...``): named
# so that a deployment still setting them is told, not silently ignored.
MOVED = {"SIS_GDACS_BASE_URL": "SIS_SOURCES__GDACS__BASE_URL", "SIS_USGS_BASE_URL": "SIS_SOURCES__USGS__BASE_URL",
         "SIS_USGS_FEED": "SIS_SOURCES__USGS__FEED",
         "SIS_PHOTO_PROVIDER_BASE_URL": "SIS_SOURCES__PANORAMAX__BASE_URL",
         "SIS_PHOTO_PROVIDER_TIMEOUT_S": "SIS_SOURCES__PANORAMAX__TIMEOUT_S"}


class SourceSettings(BaseModel):
    """One upstream's settings. Unset fields take the adapter's declared defaults; other
    keys are the adapter's own options, checked against what it declares when sources are
    built. A key comes by indirection: ``api_key`` from the environment, or ``api_key_file``
    naming a file that holds it (a mounted secret), never from the repository."""

    model_config = ConfigDict(extra="allow")

    base_url: str | None = None
    timeout_s: float | None = Field(None, gt=0, le=120)
    api_key: SecretStr | None = None
    api_key_file: Path | None = None


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SIS_", env_nested_delimiter="__", extra="forbid",
                                      validate_default=True)

    host: str = Field("127.0.0.1", description="Address the coordinator listens on.")
    port: int = Field(8080, ge=0, le=65535, description="Port the coordinator listens on (0 picks a free one).")
    public_base_url: str = Field("", description="Base URL the service is reached at, for links in documents; empty means derived from each request.")
    database_url: str = Field(DEFAULT_DB, description="SQLAlchemy URL: sqlite+aiosqlite:///path (embedded default) or postgresql+asyncpg://user@host/db. In demo mode, when no database is named (--database, SIS_DATABASE_URL or the SIS_CONFIG file), sqlite+aiosqlite:///var/demo.db.")
    demo: bool = Field(False, description="Answer sources from bundled recorded samples served by an in-process fake upstream (offline; labelled demo in every answer).")
    log_level: str = Field("INFO", description="Log level of the coordinator's own and Tornado's loggers: DEBUG, INFO, WARNING, ERROR or CRITICAL (any case); other libraries' stay at WARNING (or this level where it is higher).")

    source_timeout_s: float = Field(8.0, gt=0, le=120, description="Timeout of one request to an upstream source, where its adapter declares none of its own and SIS_SOURCES__<NAME>__TIMEOUT_S does not set one.")
    sources: dict[str, SourceSettings] = Field(default_factory=dict, description="Per-source settings by adapter name: SIS_SOURCES__<NAME>__BASE_URL, __TIMEOUT_S, __API_KEY or __API_KEY_FILE, and the adapter's options (`sis settings` lists every source's, with defaults).")

    event_square_deg: float = Field(0.5, gt=0, le=10, description="Side of the fixed square served as an event's modeled bbox in the direct family, in degrees.")
    events_cache_s: int = Field(60, ge=0, description="Server cache lifetime of a healthy hazard-event list.")
    poll_interval_s: float = Field(300.0, ge=0, description="Interval of the hazard-event history poller; 0 disables it.")
    polls_kept: int = Field(2016, ge=2, description="Polls kept in the event history (older ones are pruned; changes are kept).")

    redis_url: str = Field("", description="Redis URL for shared caches and rate-limit counters when several coordinators run; empty means in process.")
    data_dir: str = Field("var/data", description="Folder of loaded data kept as files (bathymetry and population grids, read in windows), one folder per dataset version (KIND/ID-TOKEN); every coordinator serving them must see the same folder.")
    manifests_dir: str = Field(str(Path(__file__).resolve().parents[2] / "manifests"), description="Folder of published signed node-app manifests (node-app*.json) with their public keys in keys/*.pub.")

    cache_max_mb: int = Field(256, ge=1, le=65536, description="Most megabytes of answers (their data's JSON; about twice that in memory) one process keeps in its answer cache, besides at most 10000 of them; past either, expired answers go first, then the least recently used.")
    idle_timeout_s: float = Field(60.0, ge=1, le=3600, description="Seconds a request body may take, a keep-alive connection stay idle between requests, or an answer go unread by its client, before the connection is closed (a request head has SIS_HEAD_TIMEOUT_S, and never more than this).")
    head_timeout_s: float = Field(10.0, gt=0, le=3600, description="Seconds a client may take to send a request's head, from its first byte (for a connection's first request, from its opening), before the connection is closed; apart from SIS_IDLE_TIMEOUT_S, which a keep-alive connection may stay silent between requests and a head never exceeds. At SIS_MAX_CONNECTIONS a newcomer is accepted by closing the connection longest on its head (else the longest idle, else the longest sending its body); only when all are being answered is it refused.")
    max_connections: int = Field(0, ge=0, description="Most connections open at once in one process; 0 means the descriptor limit less 256 (at most 10000). At it, a newcomer closes the slowest connection instead (see SIS_HEAD_TIMEOUT_S), and is refused only when every one is being answered.")
    max_connections_per_ip: int = Field(256, ge=0, description="Most connections open at once from one address (the trusted proxies' are not counted against it); 0 means no per-address cap.")
    trusted_proxies: str = Field("", description="Comma-separated addresses or CIDR ranges of reverse proxies whose client-IP header is believed; empty means the socket address is the client IP.")
    client_ip_header: str = Field("X-Forwarded-For", description="Header a trusted proxy puts the client IP in (X-Forwarded-For: the rightmost address not itself a trusted proxy; any other header: its whole value).")
    mcp_allowed_origins: str = Field("", description="Comma-separated origins (scheme://host[:port]) whose browser pages may call POST /mcp and /legacy/mcp, besides the service's own (the request's Host, or SIS_PUBLIC_BASE_URL); a request whose Origin header is another is refused 403. Requests without an Origin header (every client but a browser) are served whatever this says.")
    embed_ttl_s: int = Field(3600, ge=60, le=7 * 86400, description="Lifetime of an embed token; a renewal before expiry issues a new one with the same budget counters.")
    embed_budget: int = Field(500, ge=1, description="Default request budget per visitor of an embed token chain, when minting names none.")
    access_cache_s: float = Field(60.0, ge=0, description="How long a key or embed-token lookup is cached in process; revocation does not wait for it (re-read on every request: in the metering transaction, or by the shared revocation read of keyed direct reads).")
    access_prune_interval_s: float = Field(3600.0, ge=0, description="Interval of the pass, in the leader process only, that deletes the visitor counters of ended embed chains, day and month counters past their retention and long-expired embed tokens; 0 disables it (nothing is then ever deleted).")
    embed_usage_grace_s: int = Field(3600, ge=60, le=86400, description="Seconds after the last token of an embed chain expired or was revoked before the chain's per-visitor counters are deleted (what was admitted just before its end is counted first).")
    embed_tokens_kept_days: int = Field(30, ge=1, le=3650, description="Days an expired (or revoked) embed token's row is kept after its expiry, for sis embed list and so that presenting it is refused as expired rather than unknown; then it is deleted.")
    usage_days_kept: int = Field(62, ge=2, le=3650, description="UTC days of per-day usage counters kept, today included; older ones are deleted (the service reads only today's).")
    usage_months_kept: int = Field(24, ge=2, le=1200, description="UTC months of per-month usage counters kept, this month included; older ones are deleted (the service reads only this month's).")
    rate_limit_prefix: str = Field("sis", description="Prefix of rate-limit counter and answer cache keys in Redis, so that several deployments can share one Redis (a --demo coordinator adds :demo to its cache's).")
    bench_unlimited: bool = Field(False, description="Benchmarks only: per-minute windows are counted but never refuse (day, month and budget quotas, scopes and revocation still hold). Never set in production.")

    sweep_max_photos: int = Field(3000, ge=1, le=100000, description="Most photos one sweep request queues (whole cells, those the provider listed completely nearest the centre first); where the provider holds more, the answer's caveat says so, and the same circle asked again goes on with the ground not yet queued.")
    sweep_max_searches: int = Field(32, ge=1, le=256, description="Most searches of the street-photo provider one sweep request makes (each one box, one page of up to 500 photos): where a box's page is cut it is split into parts searched in turn, nearest the centre first, and ground the searches leave unlisted waits for the same circle asked again (its answer's caveat says so). More reads more of a dense circle at once, at the provider's expense and the request's latency.")
    sweep_searches_at_once: int = Field(4, ge=1, le=16, description="Most of a sweep request's provider searches running at once: they run in rounds of this many (never more than the searches left of SIS_SWEEP_MAX_SEARCHES), each the nearest boxes not yet searched, so the same circle asked over the same ground searches the same boxes whichever answer comes first. More shortens a dense circle's answer and weighs more on the provider.")
    sweep_max_queued_per_requester: int = Field(25, ge=1, le=100000, description="Most sweep requests one requester (by address) may have queued at once; one more that would queue new ground is answered 429 until some of theirs are swept. Exact across processes when they share SIS_REQUESTER_HASH_KEY.")
    job_max_photos: int = Field(20, ge=1, le=500, description="Most photos in one job (work unit) handed to a node.")
    lease_ttl_s: float = Field(600.0, gt=0, description="Lifetime of a job lease; a heartbeat extends it by this much from now.")
    lease_sweep_interval_s: float = Field(30.0, ge=0, description="Interval of the sweeper that returns lapsed leases to the queue; 0 disables it.")
    lease_retry_after_s: int = Field(30, ge=1, description="Retry-After sent to a node when no job is waiting.")
    job_max_failures: int = Field(5, ge=1, description="Lapsed leases plus rejected results after which a job is parked as failed, with its reason.")
    trust_streak: int = Field(10, ge=1, description="Consecutive valid results after which a node is trusted (its jobs are no longer replicated); one invalid result resets the streak.")
    quorum_max: int = Field(3, ge=2, le=5, description="Most replicas of one job: two disagreeing results call one more node, up to this many.")
    reissue_max: int = Field(2, ge=0, le=20, description="Times the ground of a rejected job is swept again (a new job, offered only to nodes other than those whose results were rejected) before it is parked with its reason; 0 parks it at the first rejection.")
    fact_margin_m: float = Field(25.0, ge=0, le=500, description="How far outside a job's area a submitted fact may lie (positions are derived from photos at the area's edge).")
    object_margin_m: float = Field(150.0, ge=0, le=1000, description="How far outside a job's area a measured object may lie (seen from a photo inside it).")
    result_max_bytes: int = Field(2_000_000, ge=1024, description="Largest result body a node may submit; larger ones are refused (413) and not kept.")
    engine_builds: str = Field("", description="Comma-separated engine build hashes accepted from nodes, besides those of published node-app manifests (a development hash in tests and demo).")
    requester_hash_key: str = Field("", description="Key of the keyed hash (HMAC-SHA-256) kept of a sweep requester's address, for abuse handling (by env or file, never in the repository); empty means a random key per start of sis serve (shared by its --workers), so hashes compare only within one run and no address can be recovered from them.")
    node_enrol_secret: str = Field("", description="When set, enrolment needs this shared secret in the X-Enrol-Secret header (by env or file, never in the repository); empty means open enrolment, as volunteer projects run.")
    node_enrol_per_minute: int = Field(10, ge=1, description="Enrolments one client IP (an IPv6 /64) may make per minute; more are refused 429 with Retry-After. Nodes are free to make, so this bounds how fast one address can add them.")
    node_ip_per_minute: int = Field(6000, ge=1, description="Requests one client IP (an IPv6 /64) may make per minute to the node protocol's routes, all its nodes together; more are refused 429 with Retry-After.")
    node_per_minute: int = Field(600, ge=1, description="Requests one node token may make per minute to the node protocol's routes (a working node makes a few: leases, heartbeats, results); more are refused 429 with Retry-After.")
    review_ip_per_minute: int = Field(1200, ge=1, description="Requests one client IP (an IPv6 /64) may make per minute to the review API, whatever key it sends (bad keys included); more are refused 429 with Retry-After.")
    reviewer_per_minute: int = Field(600, ge=1, description="Requests one reviewer key may make per minute to the review API; more are refused 429 with Retry-After.")
    review_tiles_url: str = Field("", pattern=r"^(https?://\S*\{z\}\S*\{x\}\S*\{y\}\S*|https?://\S*\{z\}\S*\{y\}\S*\{x\}\S*)?$", description="URL template of the base map under the review page's map (Leaflet's form: {z}, {x}, {y}, optionally {s}); the reviewer's browser loads the tiles straight from there, never through the coordinator. Empty (the default) means no base map, and the page says so; OpenStreetMap's standard tiles are https://tile.openstreetmap.org/{z}/{x}/{y}.png (their usage policy applies: a light load of reviewers, with attribution).")
    review_tiles_attribution: str = Field("© OpenStreetMap contributors", max_length=300, description="Attribution shown on the review page's map for its base map tiles (plain text; required by most tile licences).")
    review_tiles_attribution_url: str = Field("https://www.openstreetmap.org/copyright", pattern=r"^(https?://\S+)?$", description="Link of that attribution (the tiles' licence page); empty for none.")

    seen_max_facts: int = Field(1000, ge=10, le=20000, description="Most facts one seen_layer answer serves; beyond it the nearest are served with truncated:true and a caveat, so latency stays bounded.")

    @field_validator("log_level")
    @classmethod
    def _a_log_level(cls, v: str) -> str:
        level = v.strip().upper()
        if level not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return level

    @field_validator("host", "data_dir")
    @classmethod
    def _not_empty(cls, v: str, info) -> str:  # noqa: ANN001
        """An env file whose templated value came out empty: for the host, listening on every interface
        (a public service from a setting meant for this machine); for the data folder, the working one."""
        if not v.strip():
            raise ValueError("is empty" + (": give an address (127.0.0.1 for this machine only, 0.0.0.0 for every "
                                           "interface)" if info.field_name == "host" else ": give a folder"))
        return v

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_read(cls, v: str) -> str:
        from .access.clientip import parse_proxies
        try:
            parse_proxies(v)
        except ValueError as exc:
            raise ValueError(f"not addresses or CIDR ranges: {exc}") from None
        return v

    @field_validator("redis_url")
    @classmethod
    def _redis_url_has_a_scheme(cls, v: str) -> str:
        """Refused at start-up, not at the first request: redis-py takes only these schemes."""
        if v and not v.startswith(REDIS_SCHEMES):
            raise ValueError(f"a Redis URL starts with {', '.join(REDIS_SCHEMES[:-1])} or {REDIS_SCHEMES[-1]} "
                             "(for example redis://127.0.0.1:6379/0); empty means no Redis")
        return v

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = os.environ.get("SIS_CONFIG")
        if path:
            if not Path(path).is_file():
                raise FileNotFoundError(f"SIS_CONFIG names {path}, which is not a file")
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


class SettingsMoved(ValueError):
    """A setting of an earlier release is still set under its old name."""


class SettingsError(ValueError):
    """The settings cannot be read (the SIS_CONFIG file is no TOML, or cannot be read)."""


def read_config(path: str) -> dict[str, Any]:
    """The SIS_CONFIG file's table; what is wrong with it in one line naming the file."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"SIS_CONFIG names {path}, which is not a file")
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"SIS_CONFIG file {path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise SettingsError(f"SIS_CONFIG file {path} is not valid TOML: it is not UTF-8 text") from None
    except OSError as exc:
        raise SettingsError(f"SIS_CONFIG file {path} cannot be read: {exc.strerror or exc}") from None


def load(**overrides: Any) -> Settings:
    """Flags (``overrides``; None is a flag not given) over the environment over the
    SIS_CONFIG file over the defaults. Demo mode without a database named anywhere uses
    ``DEMO_DB``, not the default database."""
    moved = [f"{old} is now {new}" for old, new in MOVED.items() if old in os.environ]
    if moved:
        raise SettingsMoved("settings have moved: " + "; ".join(moved))
    if os.environ.get("SIS_CONFIG"):
        read_config(os.environ["SIS_CONFIG"])      # its mistakes said in a line of ours, not tomllib's trace
    settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    if settings.demo and "database_url" not in settings.model_fields_set:
        settings.database_url = DEMO_DB
    return settings


def settings_table(source_rows: Iterable[tuple[str, str, str]] = ()) -> list[tuple[str, str, str]]:
    """(env name, default, help) for every setting, for docs and `sis settings`; the nested
    settings of each source (``sources.registry.source_settings_rows``, which the sources
    declare) follow ``SIS_SOURCES``."""
    rows = []
    for name, f in Settings.model_fields.items():
        rows.append((f"SIS_{name.upper()}", "{}" if name == "sources" else repr(f.default), f.description or ""))
        if name == "sources":
            rows.extend(source_rows)
    return rows


def _markdown_default(default: str) -> str:
    """A default as ``sis settings`` shows it (a repr) as docs/settings.md writes it."""
    import ast

    try:
        value = ast.literal_eval(default)
    except (ValueError, SyntaxError):
        return f"`{default}`"
    if value is None:
        return "none"
    if value == "" or value == {}:
        return "empty"
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


def markdown_rows(rows: Iterable[tuple[str, str, str]]) -> list[str]:
    """``settings_table`` rows as the rows of a Markdown table (``sis settings --markdown``)."""
    import re

    def text(help_: str) -> str:     # setting names as code (their underscores are no emphasis)
        help_ = re.sub(r"(?<![`\w])(SIS_[A-Za-z0-9_<>]*[A-Za-z0-9_>])", r"`\1`", help_)
        return help_.replace("|", "&#124;").replace("\n", " ")

    return [f"| `{env}` | {_markdown_default(default).replace('|', '&#124;')} | {text(help_)} |"
            for env, default, help_ in rows]
