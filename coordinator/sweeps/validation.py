"""Validation of every submitted result, all of it or none of it.

A result goes forward only if every check passes; otherwise it is rejected with
every reason found (not just the first), and the reasons are recorded:

- schema: the wire types of ``sweep_engine.schema`` (unknown fields refused);
- identity: the job id is the leased job's, the node id the authenticated node's;
- engine build: among the accepted builds (published manifests, or the
  configured development hashes);
- photos: every photo id named (facts' sources, measurements, skipped) is one of
  the job's, and every job photo is accounted for exactly once;
- place: every fact lies inside the job's area, within ``fact_margin_m``; every
  measured object within ``object_margin_m`` (it is seen from a photo inside);
- values: within ``PHYSICAL_BOUNDS`` per fact kind; measured road widths and
  object sizes and ranges within plain physical limits; not more facts than
  photos could give;
- image evidence (optional: objects' boxes, the rows a road width was read on):
  inside its photo, whose size the job knows, since a reviewer is shown it
  drawn over that photo; not more rows than the width's samples;
- timings: total at least the longest stage, no longer than the lease has
  existed, and inference time spent where photos were measured;
- fact timestamps not in the future (one without an offset read as UTC).
"""
from __future__ import annotations

import functools

import math
import time
from datetime import datetime, timedelta
from pathlib import Path

import shapely

from coordinator.core import jsontext
from coordinator.core.times import aware
from sweep_engine.schema import PHYSICAL_BOUNDS, Result, SchemaError, bound_violations

from . import coverage, jobs

MAX_OBJECT_RANGE_M = 300.0
MAX_OBJECT_SIZE_M = 100.0
MAX_FACTS_PER_PHOTO = 100
CLOCK_SLACK_S = 5.0
FUTURE_SLACK = timedelta(hours=1)      # a fact's time may lead the coordinator's clock by this


PUBLISHED_TTL_S = 60.0
_published: dict[str, tuple[float, frozenset[str]]] = {}


def published_builds(settings) -> frozenset[str]:
    """Engine builds named by the verified node-app manifests in ``settings.manifests_dir``
    (``coordinator.manifests``). Verifying signatures on every submission would cost more
    than the rest of it, so the set is kept for a minute."""
    from .. import manifests
    folder = settings.manifests_dir
    if not folder:
        return frozenset()
    now = time.monotonic()
    hit = _published.get(str(folder))
    if hit is None or now - hit[0] > PUBLISHED_TTL_S:
        hit = (now, frozenset(manifests.published_engine_builds(Path(folder))))
        _published[str(folder)] = hit
    return hit[1]


def accepted_builds(settings) -> frozenset[str]:
    """Engine builds a result may come from: the published ones and the configured
    (``SIS_ENGINE_BUILDS``: a development hash in tests). In ``--demo`` the engine
    installed beside the coordinator, with its shipped weights, is accepted too, so
    that a local ``sis-node run --allow-cpu`` can take part."""
    configured = _configured_builds(settings.engine_builds, settings.demo)
    published = published_builds(settings)
    return configured | published if published else configured


@functools.lru_cache(maxsize=16)
def _configured_builds(engine_builds: str, demo: bool) -> frozenset[str]:
    configured = {b.strip() for b in engine_builds.split(",") if b.strip()}
    if demo:
        configured |= _local_engine_builds()
    return frozenset(configured)


@functools.cache
def _local_engine_builds() -> frozenset[str]:
    import sweep_engine   # torch-free: the package root computes build hashes from files
    shipped = Path(sweep_engine.__file__).resolve().parent / "default_weights" / "weights.json"
    builds = {sweep_engine.build_hash()}
    if shipped.exists():
        builds.add(sweep_engine.build_hash(shipped))
    return frozenset(builds)


class _Local:
    """A local metric plane around the job's centre, for distances in metres. Longitudes
    are unwrapped beside the centre's first (``coverage.unwrap_lon``), the job's area's
    and the facts' alike: a job across the antimeridian has its area's longitudes past
    +-180 (``jobs._plan``) and its facts at -179.9999 or 179.9999, all some metres apart."""

    def __init__(self, lat0: float, lon0: float) -> None:
        self.lat0, self.lon0 = lat0, lon0
        self.kx = coverage.M_PER_DEG * math.cos(math.radians(lat0))

    def xy(self, lon: float, lat: float) -> tuple[float, float]:
        return ((coverage.unwrap_lon(lon, self.lon0) - self.lon0) * self.kx, (lat - self.lat0) * coverage.M_PER_DEG)


def _outside_m(area: shapely.Polygon, points: list[tuple[float, float]]) -> list[float]:
    """How far each point lies outside ``area``: 0 inside or on its edge, else the distance
    to the nearest edge. One vectorised shapely call for all of a result's points: making a
    shapely ``Point`` per fact or object and asking for each distance in turn took about a
    fifth of the time of validating a result."""
    if not points:
        return []
    return shapely.distance(area, shapely.points(points)).tolist()


def _parse(body: bytes) -> Result:
    """``Result.from_json``, with the JSON read by ``jsontext.loads`` (the standard
    library's values at orjson's speed, a tenth of a submission's cost); a body neither
    reads is given the standard library's reason."""
    try:
        data = jsontext.loads(body)
    except UnicodeDecodeError as exc:      # UTF-16 or UTF-32, which Result.from_json's json.loads would read
        raise SchemaError([f"the body is not UTF-8 (byte {exc.start}); a result is sent as UTF-8 JSON"]) from None
    except ValueError:                     # refused: json gives the verdict and its reasons, read as UTF-8
        return Result.from_json(body.decode("utf-8-sig"))
    return Result.from_dict(data)


def validate_result(body: bytes, job, node_id: str, leased_at: datetime, now: datetime,
                    settings) -> tuple[Result | None, list[str]]:
    """(the parsed result, []) when valid; (parsed or None, reasons) when not."""
    try:
        result = _parse(body)
    except SchemaError as exc:
        return None, [f"schema: {r}" for r in exc.reasons]
    reasons: list[str] = []
    if result.job_id != jobs.wire_id(job.id):
        reasons.append(f"jobId: is {result.job_id!r}, but the lease is for {jobs.wire_id(job.id)!r}")
    if result.node_id != node_id:
        reasons.append(f"nodeId: is {result.node_id!r}, but the token is node {node_id!r}")
    builds = accepted_builds(settings)
    if result.engine_build not in builds:
        reasons.append(f"engineBuild: {result.engine_build!r} is not among the published engine builds")

    job_photos = {p["id"] for p in job.photos}
    measured = [m.photo_id for m in result.measurements]
    skipped = [k.photo_id for k in result.skipped]
    for pid in sorted(set(measured + skipped) - job_photos):
        reasons.append(f"photos: {pid!r} is not a photo of this job")
    for pid in sorted({p for p in measured + skipped if (measured + skipped).count(p) > 1}):
        reasons.append(f"photos: {pid!r} is accounted for more than once")
    missing = job_photos - set(measured) - set(skipped)
    if missing:
        reasons.append(f"photos: {len(missing)} job photos are neither measured nor skipped "
                       f"(e.g. {sorted(missing)[0]!r})")

    local = _Local(job.center_lat, job.center_lon)
    area = shapely.polygons([local.xy(x, y) for x, y in job.area["coordinates"][0]])
    fact_outside = _outside_m(area, [local.xy(f.lon, f.lat) for f in result.facts])
    object_outside = iter(_outside_m(area, [local.xy(o.lon, o.lat) for m in result.measurements
                                            for o in m.objects]))
    if len(result.facts) > MAX_FACTS_PER_PHOTO * max(1, len(job_photos)):
        reasons.append(f"facts: {len(result.facts)} facts from {len(job_photos)} photos is implausible")
    for i, fact in enumerate(result.facts):
        bad_src = sorted(set(fact.source) - job_photos)
        if bad_src:
            reasons.append(f"facts[{i}].source: {bad_src[0]!r} is not a photo of this job")
        d = fact_outside[i]
        if d > settings.fact_margin_m:
            reasons.append(f"facts[{i}]: lies {d:.0f} m outside the job's area (margin {settings.fact_margin_m:g} m)")
        for v in bound_violations(fact):
            reasons.append(f"facts[{i}]: {v}")
        try:
            # A time without an offset is UTC, as every time the service keeps (``times.aware``):
            # skipping it let any future time through by leaving its offset off.
            ts = aware(datetime.fromisoformat(fact.timestamp.replace("Z", "+00:00")))
            if ts > aware(now) + FUTURE_SLACK:
                reasons.append(f"facts[{i}].timestamp: {fact.timestamp} is in the future")
        except ValueError:  # pragma: no cover - the schema has checked it
            reasons.append(f"facts[{i}].timestamp: not a time")

    lo, hi = PHYSICAL_BOUNDS["roadway"]["widthM"]
    for i, m in enumerate(result.measurements):
        if m.road_width is not None and not lo <= m.road_width.width_m <= hi:
            reasons.append(f"measurements[{i}].roadWidth.widthM = {m.road_width.width_m:g} is outside the "
                           f"plausible [{lo:g}, {hi:g}]")
        for j, o in enumerate(m.objects):
            where = f"measurements[{i}].objects[{j}]"
            if o.distance_m > MAX_OBJECT_RANGE_M:
                reasons.append(f"{where}.distanceM = {o.distance_m:g} is beyond {MAX_OBJECT_RANGE_M:g} m")
            if o.width_m > MAX_OBJECT_SIZE_M or o.height_m > MAX_OBJECT_SIZE_M:
                reasons.append(f"{where}.size is larger than {MAX_OBJECT_SIZE_M:g} m")
            d = next(object_outside)
            if d > settings.object_margin_m:
                reasons.append(f"{where}: lies {d:.0f} m outside the job's area "
                               f"(margin {settings.object_margin_m:g} m)")

    sizes = {p["id"]: (p["width"], p["height"]) for p in job.photos}
    for i, m in enumerate(result.measurements):
        if m.photo_id in sizes:
            reasons.extend(outside_photo(f"measurements[{i}]", m, *sizes[m.photo_id]))

    t = result.timings
    lease_age = (now - leased_at).total_seconds()
    if t.total_s + 1e-6 < max(t.fetch_s, t.infer_s):
        reasons.append(f"timings: totalS {t.total_s:g} is shorter than a stage (fetchS {t.fetch_s:g}, "
                       f"inferS {t.infer_s:g})")
    if t.total_s > lease_age + CLOCK_SLACK_S:
        reasons.append(f"timings: totalS {t.total_s:g} is longer than the lease has existed ({lease_age:.1f} s)")
    if result.measurements and t.infer_s <= 0:
        reasons.append("timings: photos were measured with no inference time")
    return result, reasons


def outside_photo(where: str, m, width: int, height: int) -> list[str]:
    """Why a measurement's image evidence does not fit its photo (``width`` x ``height`` pixels, as the
    provider lists it): a box or a road row past the image's right or bottom edge (the schema has refused
    negative and reversed ones), or more rows than the width was read on."""
    out = []
    for j, o in enumerate(m.objects):
        if o.box is not None and (o.box[2] > width or o.box[3] > height):
            out.append(f"{where}.objects[{j}].box {o.box} lies outside the {width} x {height} photo")
    rows = m.road_width.rows if m.road_width is not None else None
    if rows:
        if len(rows) > m.road_width.samples:
            out.append(f"{where}.roadWidth.rows: {len(rows)} rows for a width read on {m.road_width.samples}")
        for k, r in enumerate(rows):
            if r.v > height or r.u_right > width:
                out.append(f"{where}.roadWidth.rows[{k}] (v {r.v:g}, u {r.u_left:g}-{r.u_right:g}) lies outside "
                           f"the {width} x {height} photo")
    return out
