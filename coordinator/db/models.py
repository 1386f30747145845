"""Tables. The schema is owned by Alembic migrations (``migrations/``); these
declarations must match them, which ``tests/test_migrations.py`` checks."""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, ForeignKey, Index, Integer, String, Text
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
