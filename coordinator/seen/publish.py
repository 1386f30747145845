"""Making an approved job's facts and measurements live (called in the approval's
write transaction, so a fact is live exactly when its job is approved)."""
from __future__ import annotations

from datetime import datetime

import orjson
from sqlalchemy import insert

from sweep_engine.schema import Result

from coordinator.core.db.models import SeenFact, SeenMeasurement, SweepJob
from ..sources.values import utc_z
from ..sweeps import coverage
from . import tiles


def _license(licenses: set[str]) -> str:
    """A fact derived from photos under one license carries it; from several, all of them,
    so that share-alike and permissive records stay separable."""
    return " AND ".join(sorted(licenses)) if licenses else "unknown"


def fact_doc(row: dict) -> str:
    """The members of a fact's answer object that never change once it is live, encoded
    once here at approval and stored with it (``SeenFact.doc``): ``"kind":...,
    "sweepId":...`` without the braces, the ``id`` (known only once inserted) or the
    ``distanceM`` (which depends on the question). ``query.served_facts`` completes it.
    ``row`` holds the table's columns; the answer's keys keep this order."""
    photos = row["photos"]
    return orjson.dumps({
        "kind": row["kind"], "geometry": {"type": "Point", "coordinates": [row["lon"], row["lat"]]},
        "value": row["value"], "unit": row["unit"], "confidence": row["confidence"], "basis": row["basis"],
        "source": row["provider"] + ":" + ",".join(photos), "photos": photos, "timestamp": row["observed_at"],
        "license": row["license"], "sweepId": row["sweep_id"]})[1:-1].decode()


async def insert_facts(session, facts: list[dict]) -> None:
    """Make facts live: insert their rows (``seen_facts``, with ``doc``) and add them to
    their cells' tiles (``tiles.append``), in the session's transaction."""
    ids = (await session.execute(insert(SeenFact).returning(SeenFact.id, sort_by_parameter_order=True),
                                 facts)).scalars().all()
    live = [{**f, "id": i} for f, i in zip(facts, ids, strict=True)]
    await session.run_sync(lambda s: tiles.append(s.connection(), live))


async def publish(session, job: SweepJob, result: Result, at: datetime) -> tuple[int, int]:
    """Insert the facts and per-photo measurements of ``result`` (the job's canonical,
    agreed result). Returns (facts, measurements) written."""
    photos = {p["id"]: p for p in job.photos}
    facts = []
    for f in result.facts:
        srcs = [photos[s] for s in f.source if s in photos]
        facts.append({
            "cell": coverage.point_cell(f.lat, f.lon), "kind": f.kind, "lat": f.lat, "lon": f.lon,
            "value": f.value, "unit": f.unit, "confidence": f.confidence, "basis": f.basis,
            "photos": list(f.source), "provider": (srcs[0]["provider"] if srcs else "unknown")[:40],
            "license": _license({p["license"] for p in srcs}), "observed_at": utc_z(f.timestamp),
            "job_id": job.id, "sweep_id": job.sweep_id, "approved_at": at})
        facts[-1]["doc"] = fact_doc(facts[-1])
    measurements = []
    for m in result.measurements:
        p = photos.get(m.photo_id)
        if p is None:   # validation has refused such results; never serve what cannot be placed
            continue
        d = m.to_dict()
        measurements.append({
            "cell": coverage.point_cell(p["lat"], p["lon"]), "photo_id": p["id"], "lat": p["lat"],
            "lon": p["lon"], "heading": p.get("heading"), "captured_at": utc_z(p["capturedAt"]),
            "provider": p["provider"][:40], "license": p["license"], "photo_url": p["url"],
            "road_width": d["roadWidth"], "calibration": d["calibration"], "objects": d["objects"],
            "job_id": job.id, "approved_at": at})
    if facts:
        await insert_facts(session, facts)
    if measurements:
        await session.execute(insert(SeenMeasurement), measurements)
    return len(facts), len(measurements)
