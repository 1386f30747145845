"""Reviewers become keys of the access system, with the ``review`` scope.

Every row of ``reviewers`` (migration 0004) is copied into
``access_keys`` with the ``review`` scope and plan ``Free``, under its own id
(``rv_...``, so ``reviewer:rv_...`` in the review log still names it and ``sis keys
revoke rv_...`` revokes it) and its revocation time. This is an honest migration,
not a re-issue: both tables store the SHA-256 (hex) of the whole secret, computed the
same way, so the stored hash of a ``sisr_...`` token is exactly what the access
system's lookup (``credentials.find_key``) computes from it, and the reviewer keeps
the key they hold. What cannot be carried: ``prefix`` (the first nine characters of
the secret) is not known from a hash, so a migrated key's prefix is the ``sisr_``
that every such token starts with; ``last_used_at`` has no column in the access
system and is dropped. A revocation's reason is kept as a ``sweep_transitions`` row
(subject ``reviewer``), where ``sis reviewers revoke`` now records it. The
``reviewers`` table is left in place, no longer read, so that a downgrade loses
nothing; downgrade carries a revocation made since back to ``reviewers`` and deletes
the copied keys (by the ids of ``reviewers``). Keys made by ``sis reviewers create``
after this migration are ``sisk_...`` keys of the access system only, and a
downgrade leaves them there (the old code would not know them).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25
"""
import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    conn = op.get_bind()
    reviewers = sa.table("reviewers", sa.column("id", sa.String), sa.column("name", sa.String),
                         sa.column("token_hash", sa.String), sa.column("scopes", sa.String),
                         sa.column("created_at", TS), sa.column("revoked_at", TS),
                         sa.column("revoked_reason", sa.Text))
    keys = sa.table("access_keys", sa.column("id", sa.String), sa.column("key_hash", sa.String),
                    sa.column("prefix", sa.String), sa.column("name", sa.Text), sa.column("plan", sa.String),
                    sa.column("scopes", sa.JSON), sa.column("created_at", TS), sa.column("revoked_at", TS))
    log = sa.table("sweep_transitions", sa.column("subject", sa.String), sa.column("subject_id", sa.String),
                   sa.column("from_state", sa.String), sa.column("to_state", sa.String),
                   sa.column("actor", sa.String), sa.column("reason", sa.Text), sa.column("at", TS))
    rows = conn.execute(sa.select(reviewers)).all()
    if rows:
        conn.execute(sa.insert(keys), [
            {"id": r.id, "key_hash": r.token_hash, "prefix": "sisr_", "name": r.name, "plan": "Free",
             "scopes": r.scopes.split() or ["review"], "created_at": r.created_at, "revoked_at": r.revoked_at}
            for r in rows])
        revoked = [r for r in rows if r.revoked_at is not None]
        if revoked:
            conn.execute(sa.insert(log), [
                {"subject": "reviewer", "subject_id": r.id, "from_state": "active", "to_state": "revoked",
                 "actor": "migration:0011", "reason": r.revoked_reason or "(revoked before migration 0011)",
                 "at": r.revoked_at} for r in revoked])


def downgrade() -> None:
    conn = op.get_bind()
    ids = [r[0] for r in conn.execute(sa.text("SELECT id FROM reviewers")).all()]
    if ids:
        keys = sa.table("access_keys", sa.column("id", sa.String), sa.column("revoked_at", TS))
        reviewers = sa.table("reviewers", sa.column("id", sa.String), sa.column("revoked_at", TS))
        for key_id, revoked_at in conn.execute(sa.select(keys.c.id, keys.c.revoked_at).where(
                keys.c.id.in_(ids), keys.c.revoked_at.is_not(None))).all():
            conn.execute(sa.update(reviewers).where(reviewers.c.id == key_id, reviewers.c.revoked_at.is_(None))
                         .values(revoked_at=revoked_at))
        conn.execute(sa.delete(keys).where(keys.c.id.in_(ids)))
