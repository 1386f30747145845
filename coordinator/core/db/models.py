"""Tables. The schema is owned by Alembic migrations (``migrations/``); these
declarations must match them, which ``tests/test_migrations.py`` checks."""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import (JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Index, Integer, LargeBinary,
                        SmallInteger, String, Text, text)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# BigInteger ids that still autoincrement on SQLite (where only INTEGER PRIMARY KEY does).
BigId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    pass


class EventPoll(Base):
    """One poll of the hazard-event sources; the history subsystem's heartbeat."""

    __tablename__ = "event_polls"
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    finished_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    sources_queried: Mapped[int] = mapped_column(Integer)
    sources_usable: Mapped[int] = mapped_column(Integer)
    events_seen: Mapped[int] = mapped_column(Integer)
    health: Mapped[dict] = mapped_column(JSON)


class HazardEvent(Base):
    """The current state of one hazard event as last polled."""

    __tablename__ = "hazard_events"
    id: Mapped[str] = mapped_column(String(80), primary_key=True)
    source: Mapped[str] = mapped_column(String(20), index=True)
    event_type: Mapped[str] = mapped_column(String(8))
    title: Mapped[str] = mapped_column(Text)
    alert_level: Mapped[str | None] = mapped_column(String(10), nullable=True)
    episode: Mapped[str | None] = mapped_column(String(40), nullable=True)
    active: Mapped[bool] = mapped_column(Boolean, index=True)
    first_seen: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_seen: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    data: Mapped[dict] = mapped_column(JSON)


class EventChange(Base):
    """A derived change of an event: new, escalated, deescalated or resolved."""

    __tablename__ = "event_changes"
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    event_id: Mapped[str] = mapped_column(String(80), index=True)
    kind: Mapped[str] = mapped_column(String(12))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    poll_id: Mapped[int] = mapped_column(BigId, ForeignKey("event_polls.id", ondelete="SET NULL"), nullable=True)
    from_level: Mapped[str | None] = mapped_column(String(10), nullable=True)
    to_level: Mapped[str | None] = mapped_column(String(10), nullable=True)
    from_episode: Mapped[str | None] = mapped_column(String(40), nullable=True)
    to_episode: Mapped[str | None] = mapped_column(String(40), nullable=True)
    title: Mapped[str] = mapped_column(Text)
    event_type: Mapped[str] = mapped_column(String(8))

    __table_args__ = (Index("ix_event_changes_at_id", "at", "id"),)


# ---- access: keys, embed tokens, persisted usage (migration 0002) ---------

class AccessKey(Base):
    """An API key. Only the sha256 of the key is stored; ``prefix`` (the first
    characters) lets an operator tell keys apart in listings."""

    __tablename__ = "access_keys"
    id: Mapped[str] = mapped_column(String(24), primary_key=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(Text)
    plan: Mapped[str] = mapped_column(String(12))
    scopes: Mapped[list] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class EmbedToken(Base):
    """An embed token minted from a key. Renewal makes a new token in the same
    ``chain_id``; budgets are counted per chain and visitor, so they carry over."""

    __tablename__ = "embed_tokens"
    id: Mapped[str] = mapped_column(String(24), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    key_id: Mapped[str] = mapped_column(String(24), ForeignKey("access_keys.id", ondelete="CASCADE"), index=True)
    chain_id: Mapped[str] = mapped_column(String(24), index=True)
    origin: Mapped[str] = mapped_column(Text)
    budget: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class AccessUsage(Base):
    """A persisted counter: ``subject`` (``key:<id>``, ``direct:<id>``,
    ``embed:<chain>:<visitor>``, ``embedloads:<key id>``) over ``period``
    (``d:YYYY-MM-DD``, ``m:YYYY-MM`` in UTC, or ``life``)."""

    __tablename__ = "access_usage"
    subject: Mapped[str] = mapped_column(String(120), primary_key=True)
    period: Mapped[str] = mapped_column(String(16), primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger)


# ---- sweeps: requests, coverage, jobs, leases, results, nodes (migration 0003) ----

class Node(Base):
    """A volunteer compute node. Its bearer token is stored only as a SHA-256 hash."""

    __tablename__ = "nodes"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(120))
    platform: Mapped[str] = mapped_column(String(200))
    gpu: Mapped[str] = mapped_column(String(200))
    engine_version: Mapped[str] = mapped_column(String(60))
    engine_build: Mapped[str] = mapped_column(String(128))
    enrolled_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    revoked_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    streak: Mapped[int] = mapped_column(Integer, default=0)
    valid_total: Mapped[int] = mapped_column(Integer, default=0)
    invalid_total: Mapped[int] = mapped_column(Integer, default=0)
    trusted: Mapped[bool] = mapped_column(Boolean, default=False)


class SweepRequest(Base):
    """A request to sweep a circle of ground. ``requester_hash`` is never served."""

    __tablename__ = "sweep_requests"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    lat: Mapped[float] = mapped_column(Float)
    lon: Mapped[float] = mapped_column(Float)
    radius_m: Mapped[float] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(16), index=True)
    requested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    requester_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    asked: Mapped[int] = mapped_column(Integer, default=1)
    photos: Mapped[int] = mapped_column(Integer, default=0)
    jobs_total: Mapped[int] = mapped_column(Integer, default=0)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)


class SweepRequestCell(Base):
    """The H3 cells a request asked for; ``sweepable`` when the provider listed photos in it."""

    __tablename__ = "sweep_request_cells"
    request_id: Mapped[str] = mapped_column(String(40), ForeignKey("sweep_requests.id", ondelete="CASCADE"),
                                            primary_key=True)
    cell: Mapped[int] = mapped_column(BigInteger, primary_key=True, index=True)
    sweepable: Mapped[bool] = mapped_column(Boolean)


class CoverageCell(Base):
    """Sweep bookkeeping of one H3 cell: queued (jobs exist for it) or covered (approved results)."""

    __tablename__ = "coverage_cells"
    cell: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    state: Mapped[str] = mapped_column(String(12), index=True)
    request_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    covered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


# The condition of the queue's partial index (migration 0019), as the claims write it
# (``sweeps.leases.queued``): both databases use a partial index only where a query's own
# terms imply its condition, which a bound parameter does not in a generic plan.
QUEUED_JOBS_SQL = "state = 'queued'"


class SweepJob(Base):
    """A work unit: a bounded set of photo references in one area."""

    __tablename__ = "sweep_jobs"
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    sweep_id: Mapped[str] = mapped_column(String(40), ForeignKey("sweep_requests.id", ondelete="CASCADE"),
                                          index=True)
    state: Mapped[str] = mapped_column(String(16))
    area: Mapped[dict] = mapped_column(JSON)
    center_lat: Mapped[float] = mapped_column(Float)
    center_lon: Mapped[float] = mapped_column(Float)
    radius_m: Mapped[float] = mapped_column(Float)
    cells: Mapped[list] = mapped_column(JSON)
    photos: Mapped[list] = mapped_column(JSON)
    quorum: Mapped[int] = mapped_column(Integer, default=1)
    active_leases: Mapped[int] = mapped_column(Integer, default=0)
    valid_results: Mapped[int] = mapped_column(Integer, default=0)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    canonical_lease_id: Mapped[str | None] = mapped_column(String(40), nullable=True)   # its result is the canonical one
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        Index("ix_sweep_jobs_state_id", "state", "id"),
        # The claims' oldest queued jobs: only queued rows, so a claim never walks past the
        # jobs done before them, whatever the planner's statistics say (migration 0019).
        Index("ix_sweep_jobs_queued", "id", sqlite_where=text(QUEUED_JOBS_SQL), postgresql_where=text(QUEUED_JOBS_SQL)),
    )


class SweepLease(Base):
    """One node's hold on one replica of a job, with an expiry that heartbeats extend."""

    __tablename__ = "sweep_leases"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    job_id: Mapped[int] = mapped_column(BigId, ForeignKey("sweep_jobs.id", ondelete="CASCADE"), index=True)
    node_id: Mapped[str] = mapped_column(String(40), ForeignKey("nodes.id", ondelete="CASCADE"), index=True)
    state: Mapped[str] = mapped_column(String(12))
    leased_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    __table_args__ = (Index("ix_sweep_leases_state_expires", "state", "expires_at"),)


class SweepResult(Base):
    """What a node submitted on one lease (at most one per lease: submissions are idempotent)."""

    __tablename__ = "sweep_results"
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    lease_id: Mapped[str] = mapped_column(String(40), ForeignKey("sweep_leases.id", ondelete="CASCADE"),
                                          unique=True)
    job_id: Mapped[int] = mapped_column(BigId, ForeignKey("sweep_jobs.id", ondelete="CASCADE"), index=True)
    node_id: Mapped[str] = mapped_column(String(40), index=True)
    state: Mapped[str] = mapped_column(String(12))
    reasons: Mapped[list] = mapped_column(JSON)
    body: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    body_sha256: Mapped[str] = mapped_column(String(64))
    engine_build: Mapped[str | None] = mapped_column(String(128), nullable=True)
    facts: Mapped[int] = mapped_column(Integer, default=0)
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class SweepTransition(Base):
    """Every state change of a request, job, lease, result, node or cell: who, when, why."""

    __tablename__ = "sweep_transitions"
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    subject: Mapped[str] = mapped_column(String(8))
    subject_id: Mapped[str] = mapped_column(String(40))
    from_state: Mapped[str | None] = mapped_column(String(16), nullable=True)
    to_state: Mapped[str] = mapped_column(String(16))
    actor: Mapped[str] = mapped_column(String(80))
    reason: Mapped[str] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (Index("ix_sweep_transitions_subject", "subject", "subject_id", "id"),)


# ---- review and the seen layer (migration 0004) ----

class Reviewer(Base):
    """A reviewer's key: a person allowed to approve or reject contributed sweeps. Only the
    SHA-256 hash of the token is kept. Self-contained until the access system takes keys over."""

    __tablename__ = "reviewers"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(120))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    revoked_reason: Mapped[str | None] = mapped_column(Text, nullable=True)


class SeenFact(Base):
    """An approved street fact, live in the seen layer; ``cell`` is its H3 cell (resolution 10)."""

    __tablename__ = "seen_facts"
    # Circle reads pick and order by position inside the index (migration 0005).
    __table_args__ = (Index("ix_seen_facts_cell_position", "cell", "lat", "lon", postgresql_include=["id"]),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    cell: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(16))
    lat: Mapped[float] = mapped_column(Float)
    lon: Mapped[float] = mapped_column(Float)
    value: Mapped[dict | float | None] = mapped_column(JSON, nullable=True)
    unit: Mapped[str] = mapped_column(String(16))
    confidence: Mapped[str] = mapped_column(String(8))
    basis: Mapped[str] = mapped_column(String(10))
    photos: Mapped[list] = mapped_column(JSON)
    provider: Mapped[str] = mapped_column(String(40))
    license: Mapped[str] = mapped_column(Text)       # every license of its photos (migration 0020)
    observed_at: Mapped[str] = mapped_column(String(40))
    job_id: Mapped[int] = mapped_column(BigId, index=True)
    sweep_id: Mapped[str] = mapped_column(String(40))
    approved_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # The fact as served, encoded at approval from the columns above (``publish.fact_doc``,
    # migration 0006): a read of a thousand facts fetches one column and joins text.
    doc: Mapped[str] = mapped_column(Text)


class SeenTile(Base):
    """The live facts of one H3 cell (resolution 10) packed together, as circle reads use
    them (``seen.tiles``, migration 0007): a 1500 m circle reads some 170 tiles instead of
    some 2,000 index entries and 1,000 rows. Made only from ``seen_facts``, which stays the
    record, and appended to at approval in the same transaction."""

    __tablename__ = "seen_tiles"
    cell: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=False)   # the rowid on SQLite
    facts: Mapped[int] = mapped_column(Integer)
    ids: Mapped[bytes] = mapped_column(LargeBinary)      # int64 little-endian, one per fact
    lats: Mapped[bytes] = mapped_column(LargeBinary)     # float64 little-endian
    lons: Mapped[bytes] = mapped_column(LargeBinary)     # float64 little-endian
    lens: Mapped[bytes] = mapped_column(LargeBinary)     # int32 little-endian: each fact's length in docs
    docs: Mapped[bytes] = mapped_column(LargeBinary)     # the facts' ``doc`` (UTF-8), one after another


class SeenMeasurement(Base):
    """An approved per-photo measurement (road width, calibration, objects), for street_measure."""

    __tablename__ = "seen_measurements"
    __table_args__ = (Index("ix_seen_measurements_cell_position", "cell", "lat", "lon",
                            postgresql_include=["id"]),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    cell: Mapped[int] = mapped_column(BigInteger)
    photo_id: Mapped[str] = mapped_column(String(200))
    lat: Mapped[float] = mapped_column(Float)
    lon: Mapped[float] = mapped_column(Float)
    heading: Mapped[float | None] = mapped_column(Float, nullable=True)
    captured_at: Mapped[str] = mapped_column(String(40))
    provider: Mapped[str] = mapped_column(String(40))
    license: Mapped[str] = mapped_column(Text)       # every license of its photos (migration 0020)
    photo_url: Mapped[str] = mapped_column(Text)
    road_width: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    calibration: Mapped[dict] = mapped_column(JSON)
    objects: Mapped[list] = mapped_column(JSON)
    job_id: Mapped[int] = mapped_column(BigId)
    approved_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


# ---- ingested datasets (migration 0008) ----

class DatasetVersion(Base):
    """One load of a file by ``sis ingest`` (``coordinator.datasets``): what was loaded,
    from where, under which license, the file's sha256, its extent and its counts. The
    rows a kind writes carry this id, and answers name it. ``state`` is ``loading`` from
    the start of the load, then ``ready`` or ``failed``: a load that crashed stays
    ``loading`` for all to see, and only ``ready`` versions are ever served. ``sis datasets
    drop`` deletes what a version stored and marks it ``dropped``."""

    __tablename__ = "dataset_versions"
    __table_args__ = (Index("ix_dataset_versions_kind_state", "kind", "state", "id"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(60))
    state: Mapped[str] = mapped_column(String(8))
    source: Mapped[str] = mapped_column(Text)
    license: Mapped[str] = mapped_column(String(120))
    file_name: Mapped[str] = mapped_column(Text)
    file_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    loaded_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    records: Mapped[int] = mapped_column(BigInteger)
    bad_records: Mapped[int] = mapped_column(BigInteger)
    bad_samples: Mapped[list] = mapped_column(JSON)
    west: Mapped[float | None] = mapped_column(Float, nullable=True)
    south: Mapped[float | None] = mapped_column(Float, nullable=True)
    east: Mapped[float | None] = mapped_column(Float, nullable=True)
    north: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Its folder in the data directory, for a kind that keeps files (migration 0018); None
    # for versions loaded before, whose folder is KIND/ID.
    folder: Mapped[str | None] = mapped_column(String(200), nullable=True)


# ---- rejected ground swept again (migration 0009) ----

class SweepReissue(Base):
    """A job made again from a rejected one (``review.workflow``): the same photos and
    cells, under the same sweep request. ``generation`` counts the reissues of that ground
    (1 for the first); once it reaches ``reissue_max`` a further rejection parks the
    ground instead. A job with no row here is an original (generation 0)."""

    __tablename__ = "sweep_reissues"
    job_id: Mapped[int] = mapped_column(BigId, ForeignKey("sweep_jobs.id", ondelete="CASCADE"), primary_key=True)
    parent_id: Mapped[int] = mapped_column(BigId, ForeignKey("sweep_jobs.id", ondelete="CASCADE"), index=True)
    generation: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class SweepJobExclusion(Base):
    """A node a job is never offered to: a reissued job excludes the nodes whose results
    on the rejected job (and on its rejected forebears) went to the reviewer."""

    __tablename__ = "sweep_job_exclusions"
    job_id: Mapped[int] = mapped_column(BigId, ForeignKey("sweep_jobs.id", ondelete="CASCADE"), primary_key=True)
    node_id: Mapped[str] = mapped_column(String(40), primary_key=True)


# ---- PB2002 plate boundary steps, dataset kind pb2002 (migration 0010) ----

class PlateStep(Base):
    """One step of ``PB2002_steps.dat`` loaded by ``sis ingest pb2002``
    (``coordinator/panels/plates.py``), tagged with its dataset version."""

    __tablename__ = "plate_steps"
    __table_args__ = (Index("ix_plate_steps_version_seq", "version_id", "seq"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    version_id: Mapped[int] = mapped_column(BigId, ForeignKey("dataset_versions.id"))
    seq: Mapped[int] = mapped_column(Integer)
    boundary: Mapped[str] = mapped_column(String(12))
    lon1: Mapped[float] = mapped_column(Float)
    lat1: Mapped[float] = mapped_column(Float)
    lon2: Mapped[float] = mapped_column(Float)
    lat2: Mapped[float] = mapped_column(Float)
    length_km: Mapped[float] = mapped_column(Float)
    velocity_mm_a: Mapped[float | None] = mapped_column(Float, nullable=True)
    step_class: Mapped[str] = mapped_column(String(3))
    orogen: Mapped[bool] = mapped_column(Boolean)


# ---- map features: OpenStreetMap extracts and Overture places (migration 0012) ----

# The partial indexes' conditions, as the queries that read them write them (features.store):
# the level index holds the rows at LEAD_LEVEL or above (migration 0016), the infra index
# the infrastructure tool's point classes at every level (migration 0017).
LEAD_LEVEL = 4
INFRA_POINT_CLASSES = ("comm_tower", "power_pole", "power_tower", "substation")
INFRA_POINTS_SQL = "cls IN (" + ", ".join(f"'{c}'" for c in INFRA_POINT_CLASSES) + ")"


class _MapFeatureColumns:
    """The columns of a map feature, in the table the tools read and in the load's staging."""

    cls: Mapped[str] = mapped_column(String(20))
    tile: Mapped[int] = mapped_column(Integer)
    lon: Mapped[float] = mapped_column(Float)
    lat: Mapped[float] = mapped_column(Float)
    sample: Mapped[int] = mapped_column(Integer)
    level: Mapped[int] = mapped_column(SmallInteger)
    fid: Mapped[str] = mapped_column(String(80))
    name: Mapped[str | None] = mapped_column(Text, nullable=True)
    license: Mapped[str] = mapped_column(String(80))
    brand: Mapped[str | None] = mapped_column(String(24), nullable=True)
    props: Mapped[dict] = mapped_column(JSON)
    geom: Mapped[list | None] = mapped_column(JSON, nullable=True)
    # The GeoJSON Feature a bbox tool serves for this point, encoded at load time (migration
    # 0015, ``features.geojson.doc_of``): a large bbox answer joins these instead of
    # rebuilding 2,000 rows. NULL where no bbox tool serves the row as a point.
    doc: Mapped[str | None] = mapped_column(Text, nullable=True)


class MapFeature(_MapFeatureColumns, Base):
    """One mapped feature of a loaded extract (``sis ingest osm|places``,
    ``coordinator/features/``), tagged with its dataset version: a point, or one chunk of
    a line no wider than ``features.grid.CHUNK_DEG`` (``geom`` holds its coordinates).
    ``tile`` is the 0.05-degree grid key (``features.grid``); the query index covers
    ``lon``, ``lat`` and ``sample`` so a bbox is counted and sampled from the index alone.
    ``sample`` is a random integer fixed at load, so a sample is stable between calls;
    ``level`` its trailing zero bits (a feature is at level k or above with probability
    2^-k), so a uniform sample of about n features of a large bbox reads about n index
    entries (``features.store.sample_box``). A version's rows are written in the order
    (cls, tile, level descending, sample) from ``MapFeatureLoad``, so the rows a sample
    reads lie together (a few pages per tile instead of one page per row)."""

    __tablename__ = "map_features"
    __table_args__ = (
        Index("ix_map_features_query", "version_id", "cls", "tile", "level", "lon", "lat", "sample"),
        Index("ix_map_features_brand", "version_id", "brand", "tile"),
        # Levels 4 and above only, covering a sample's reads: a box holding much of a version
        # is counted and sampled from its top levels in one range (migration 0016).
        Index("ix_map_features_level", "version_id", "cls", "level", "sample", "lon", "lat", "license", "doc",
              sqlite_where=text(f"level >= {LEAD_LEVEL}"), postgresql_where=text(f"level >= {LEAD_LEVEL}")),
        # The infrastructure tool's point classes at every level, covering a sample's reads
        # as the level index does (migration 0017; INFRA_POINTS_SQL).
        Index("ix_map_features_infra", "version_id", "cls", "level", "sample", "lon", "lat", "license", "doc",
              sqlite_where=text(INFRA_POINTS_SQL), postgresql_where=text(INFRA_POINTS_SQL)),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    version_id: Mapped[int] = mapped_column(BigId, ForeignKey("dataset_versions.id"))


class MapFeatureLoad(_MapFeatureColumns, Base):
    """A load's rows on their way into ``map_features``: written as the extract is read,
    then moved in query order a few tiles at a time (``features.store.Writer``)."""

    __tablename__ = "map_features_load"
    __table_args__ = (Index("ix_map_features_load_move", "version_id", "cls", "tile"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    version_id: Mapped[int] = mapped_column(BigId)


# ---- twin reference layers: airports, countries, cities, rivers, seaports (migration 0013) ----

class TwinReference(Base):
    """One record of a reference file loaded by ``sis ingest ourairports|ne_countries|ne_places|
    ne_rivers|wpi`` (``coordinator/twin/reference.py``), tagged with its dataset version. A layer
    reads its newest version highest ``rank`` first, so a points cap keeps the most important
    records; ``geom`` holds a river's lines (points are ``lon``, ``lat``)."""

    __tablename__ = "twin_reference"
    __table_args__ = (Index("ix_twin_reference_version_rank", "version_id", "rank"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    version_id: Mapped[int] = mapped_column(BigId, ForeignKey("dataset_versions.id"))
    layer: Mapped[str] = mapped_column(String(16))
    fid: Mapped[str] = mapped_column(String(80))
    name: Mapped[str | None] = mapped_column(Text, nullable=True)
    lon: Mapped[float] = mapped_column(Float)
    lat: Mapped[float] = mapped_column(Float)
    rank: Mapped[float] = mapped_column(Float)
    props: Mapped[dict] = mapped_column(JSON)
    geom: Mapped[dict | None] = mapped_column(JSON, nullable=True)
