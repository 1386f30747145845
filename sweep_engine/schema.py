"""Wire types between the coordinator, the node agent and the sweep engine.

This module is the contract the coordinator imports (``coordinator ->
sweep_engine.schema`` only), so it is pure Python: no torch, no numpy.

Types: ``PhotoRef``; ``Job`` (photos to measure); ``Measurement`` per photo
(``RoadWidth`` with the image ``RoadRow``s it was read on, ``Calibration``
with ``scaleTrust`` and evidence, ``ObjectMeasurement`` with its image
``box``); ``Fact``; ``Result`` (facts, measurements, ``Timings``,
``Skipped`` photos).  Constants: ``FACT_KINDS``,
``PHYSICAL_BOUNDS``, ``PRIMARY_KEY``, ``CONFIDENCES``, ``SCALE_TRUSTS``, ``BASES``.

Stability rules:

- ``SCHEMA_VERSION`` is 1.  ``Job`` and ``Result`` carry it on the wire as
  ``schemaVersion``; a document with another version is refused, never guessed.
  A field is added, renamed or given a new meaning only with a version bump,
  save an optional one that documents without it still validate against
  (``_Wire.added``): it is left off the wire when unset, so that a document of
  before reads and writes back unchanged. The coordinator is updated before
  the nodes that send it, since a reader without it refuses it as unknown.
- Image-space evidence (an object's ``box``, a road width's ``rows``) is in
  pixels of the photo as the provider lists it (``PhotoRef.width`` x
  ``height``), continuous coordinates from the image's top-left corner, u to
  the right and v down: what a reviewer's browser draws over that photo. The
  schema checks its form; whether it lies inside the photo is the
  coordinator's check, which knows the job's photos.
- JSON field names are camelCase (``scaleTrust``, ``heightIsLowerBound``,
  ``engineBuild``); Python attributes are snake_case.  Positions are WGS84
  degrees, lengths metres, angles degrees (heading clockwise from north,
  pitch positive up), times ISO 8601 text.
- Every type has ``to_dict``/``from_dict`` and ``to_json``/``from_json``.
  ``from_dict`` checks everything and raises ``SchemaError`` with *all* the
  reasons at once (``err.reasons``, each prefixed with the field path, e.g.
  ``photos[2].lat: ...``).  Unknown fields are refused: a typo such as
  ``height_is_lower_bound`` must not pass silently.  ``validate(obj)`` checks
  an object built in Python through the same path.
- Honesty: a ``Fact`` whose confidence is ``unknown`` carries ``value: null``,
  and a null value must say ``unknown`` (unknown is not zero).
- Plausibility is apart from structure: ``PHYSICAL_BOUNDS`` gives, per fact
  kind and value key, a plausible ``(min, max)``; ``bound_violations(fact)``
  lists what falls outside, for the coordinator's validator.
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

SCHEMA_VERSION = 1

FACT_KINDS: tuple[str, ...] = (
    "roadway", "kerbs", "gates", "entrances", "fences",
    "poles", "wires", "signage", "drainage", "vegetation",
)
CONFIDENCES = ("high", "low", "unknown")
SCALE_TRUSTS = ("high", "low", "unknown")
BASES = ("measured", "modelled", "assumed")
UNITS = ("m",)   # every quantity a fact carries is a length (PHYSICAL_BOUNDS); a node's free text is not served

# Per kind, the value keys a fact may carry and their plausible range in metres.
PHYSICAL_BOUNDS: dict[str, dict[str, tuple[float, float]]] = {
    "roadway": {"widthM": (1.5, 60.0)},
    "kerbs": {"lengthM": (0.3, 500.0), "offsetM": (0.0, 40.0)},
    "gates": {"widthM": (0.5, 20.0), "heightM": (0.3, 6.0)},
    "entrances": {"widthM": (0.5, 20.0), "heightM": (1.0, 12.0)},
    "fences": {"lengthM": (0.3, 500.0), "heightM": (0.2, 6.0)},
    "poles": {"heightM": (0.5, 40.0), "widthM": (0.03, 2.0)},
    "wires": {"clearanceM": (2.0, 60.0)},
    "signage": {"widthM": (0.1, 10.0), "heightM": (0.1, 10.0)},
    "drainage": {"widthM": (0.1, 5.0)},
    "vegetation": {"heightM": (0.1, 60.0), "widthM": (0.1, 60.0)},
}
# The key a bare-number value stands for.
PRIMARY_KEY: dict[str, str] = {
    "roadway": "widthM", "kerbs": "lengthM", "gates": "widthM", "entrances": "widthM",
    "fences": "lengthM", "poles": "heightM", "wires": "clearanceM", "signage": "heightM",
    "drainage": "widthM", "vegetation": "heightM",
}


class SchemaError(ValueError):
    """A wire document that does not fit the schema; ``reasons`` lists every fault."""

    def __init__(self, reasons: list[str]):
        self.reasons = list(reasons)
        super().__init__("; ".join(self.reasons) or "invalid document")


class _Reader:
    """Reads fields out of one JSON object, collecting faults instead of stopping at the first."""

    def __init__(self, data: Any, path: str, errors: list[str], allowed: tuple[str, ...]):
        self.path, self.errors = path, errors
        if not isinstance(data, dict):
            self.fail("", "must be an object")
            data = {}
        self.data = data
        for key in data:
            if key not in allowed:
                self.fail(key, "unknown field")

    def fail(self, key: str, why: str) -> None:
        where = _join(self.path, key) if key else (self.path or "(document)")
        self.errors.append(f"{where}: {why}")

    def _get(self, key: str, optional: bool) -> tuple[bool, Any]:
        if key not in self.data or (optional and self.data[key] is None):
            if not optional:
                self.fail(key, "is required")
            return False, None
        return True, self.data[key]

    def num(self, key: str, lo: float = -math.inf, hi: float = math.inf, optional: bool = False) -> float | None:
        ok, v = self._get(key, optional)
        if not ok:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            self.fail(key, "must be a finite number")
            return None
        if not lo <= v <= hi:
            self.fail(key, f"must be within [{lo:g}, {hi:g}]")
        return float(v)

    def int(self, key: str, lo: int = 0, optional: bool = False) -> int | None:
        ok, v = self._get(key, optional)
        if not ok:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            self.fail(key, f"must be an integer >= {lo}")
            return None
        return v

    def text(self, key: str, optional: bool = False, choices: tuple[str, ...] | None = None) -> str | None:
        ok, v = self._get(key, optional)
        if not ok:
            return None
        if not isinstance(v, str) or not v:
            self.fail(key, "must be non-empty text")
            return None
        if choices is not None and v not in choices:
            self.fail(key, f"must be one of {', '.join(choices)}")
        return v

    def time(self, key: str) -> str | None:
        v = self.text(key)
        if v is not None:
            try:
                datetime.fromisoformat(v.replace("Z", "+00:00"))
            except ValueError:
                self.fail(key, "must be an ISO 8601 time")
        return v

    def flag(self, key: str) -> bool:
        ok, v = self._get(key, False)
        if ok and not isinstance(v, bool):
            self.fail(key, "must be true or false")
            return False
        return bool(v)

    def maybe_flag(self, key: str) -> bool | None:
        """An optional true/false: None when absent or null."""
        ok, v = self._get(key, True)
        if ok and not isinstance(v, bool):
            self.fail(key, "must be true or false")
            return None
        return v if ok else None

    def box(self, key: str) -> list[float] | None:
        """An optional pixel box ``[u0, v0, u1, v1]``: four finite numbers, not negative, u0 <= u1, v0 <= v1."""
        ok, v = self._get(key, True)
        if not ok:
            return None
        if not (isinstance(v, list) and len(v) == 4 and all(
                isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) and c >= 0 for c in v)):
            self.fail(key, "must be [u0, v0, u1, v1]: four finite pixel coordinates, none negative")
            return None
        if v[0] > v[2] or v[1] > v[3]:
            self.fail(key, "must have u0 <= u1 and v0 <= v1")
        return [float(c) for c in v]

    def obj(self, key: str, optional: bool = False) -> dict | None:
        ok, v = self._get(key, optional)
        if ok and not isinstance(v, dict):
            self.fail(key, "must be an object")
            return None
        return v

    def items(self, key: str) -> list[tuple[str, Any]]:
        ok, v = self._get(key, False)
        if not ok:
            return []
        if not isinstance(v, list):
            self.fail(key, "must be a list")
            return []
        return [(f"{_join(self.path, key)}[{i}]", item) for i, item in enumerate(v)]

    def version(self) -> None:
        v = self.int("schemaVersion", lo=0)
        if v is not None and v != SCHEMA_VERSION:
            self.fail("schemaVersion", f"is {v}; this engine speaks version {SCHEMA_VERSION}")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _finish(obj: Any, errors: list[str]) -> Any:
    if errors:
        raise SchemaError(errors)
    return obj


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


@functools.cache
def _wire_fields(cls: type) -> tuple[tuple[str, str], ...]:
    """(attribute, wire name) of each field of a wire type, worked out once per type: the
    coordinator reads and writes thousands of documents a second, and spelling the names
    afresh each time cost more than the rest of ``to_dict``."""
    return tuple((f.name, _camel(f.name)) for f in fields(cls))


@functools.cache
def _wire_names(cls: type) -> tuple[str, ...]:
    return tuple(wire for _, wire in _wire_fields(cls))


def _out(v: Any) -> Any:
    if isinstance(v, _Wire):
        return v.to_dict()
    if isinstance(v, list):
        return [_out(x) for x in v]
    return v


@functools.cache
def _added_wire(cls: type) -> tuple[str, ...]:
    return tuple(wire for name, wire in _wire_fields(cls) if name in cls.added)


class _Wire:
    """JSON helpers shared by every wire type: a field ``foo_bar`` is ``fooBar`` on the wire."""

    # Optional fields added to version 1 after it was published: left off the wire when None.
    added: frozenset[str] = frozenset()

    @classmethod
    def wire_names(cls) -> tuple[str, ...]:
        return _wire_names(cls)

    def to_dict(self) -> dict[str, Any]:
        out = {wire: _out(getattr(self, name)) for name, wire in _wire_fields(type(self))}
        for wire in _added_wire(type(self)):
            if out[wire] is None:
                del out[wire]
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, text: str | bytes):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise SchemaError([f"not JSON: {exc}"]) from None
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Any, path: str = ""):
        errors: list[str] = []
        return _finish(cls._read(data, path, errors), errors)


def validate(obj: _Wire) -> None:
    """Check an object built in Python exactly as if it had arrived on the wire."""
    type(obj).from_dict(obj.to_dict())


@dataclass
class PhotoRef(_Wire):
    """One street photo as the provider lists it; read in place, never rehosted."""

    id: str
    lon: float
    lat: float
    captured_at: str
    width: int
    height: int
    url: str
    license: str
    provider: str
    heading: float | None = None
    pitch: float | None = None
    camera_make: str | None = None
    camera_model: str | None = None
    focal_mm: float | None = None
    sensor_width_mm: float | None = None

    @classmethod
    def _read(cls, data, path, errors):
        r = _Reader(data, path, errors, cls.wire_names())
        url = r.text("url")
        if url is not None and not url.startswith(("http://", "https://")):
            r.fail("url", "must be an http(s) URL")
        return cls(id=r.text("id"), lon=r.num("lon", -180, 180), lat=r.num("lat", -90, 90),
                   heading=r.num("heading", 0, 360, optional=True), pitch=r.num("pitch", -90, 90, optional=True),
                   captured_at=r.time("capturedAt"), camera_make=r.text("cameraMake", optional=True),
                   camera_model=r.text("cameraModel", optional=True),
                   focal_mm=r.num("focalMm", 0.5, 2000, optional=True),
                   sensor_width_mm=r.num("sensorWidthMm", 0.5, 100, optional=True),
                   width=r.int("width", lo=1), height=r.int("height", lo=1), url=url,
                   license=r.text("license"), provider=r.text("provider"))


def _finite_number(c: Any) -> bool:
    return isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c)


def _read_polygon(r: _Reader, key: str, center_lon: float | None) -> dict | None:
    """A GeoJSON Polygon of closed rings of finite ``[lon, lat]``. Its longitudes run on continuously from
    the job's centre (``center_lon``, in [-180, 180]): within 180 degrees of it, so past +-180 where the
    area crosses the antimeridian (``179.999 .. 180.0007``), as the coordinator draws it. Without a
    readable centre (refused on its own), within 180 degrees of some centre: [-360, 360]."""
    poly = r.obj(key)
    if poly is None:
        return None
    rings = poly.get("coordinates")
    ok = poly.get("type") == "Polygon" and isinstance(rings, list) and len(rings) >= 1
    for ring in rings if ok else []:
        ok = ok and isinstance(ring, list) and len(ring) >= 4 and ring[0] == ring[-1] and all(
            isinstance(p, list) and len(p) == 2 and all(_finite_number(c) for c in p)
            and -90 <= p[1] <= 90 for p in ring)
    if not ok:
        r.fail(key, "must be a GeoJSON Polygon of closed rings of finite [lon, lat]")
        return poly
    ref, reach = (0.0, 360.0) if center_lon is None else (center_lon, 180.0)
    far = next((p[0] for ring in rings for p in ring if abs(p[0] - ref) > reach), None)
    if far is not None:
        if center_lon is None:
            r.fail(key, f"longitude {far:g} is beyond [-360, 360]: an area's longitudes lie within 180 "
                        "degrees of its centerLon, which is in [-180, 180]")
        else:
            r.fail(key, f"longitude {far:g} lies {abs(far - ref):g} degrees from centerLon {ref:g}: an area's "
                        "longitudes run on continuously from its centre's, within 180 degrees of it (past "
                        "+-180 where it crosses the antimeridian)")
    return poly


@dataclass
class Job(_Wire):
    """A work unit: photos in one area, and the engine parameters to run them with.

    ``center_lon`` is in [-180, 180]; ``area``'s longitudes run on continuously from it, within 180 degrees
    of it: an area across the antimeridian goes past 180 or -180 (``180.0004`` is 179.9996 W) rather than
    jumping from 179.9998 to -179.9997. Photos' longitudes, like every longitude a result carries, are in
    [-180, 180]; a point is read on the area's scale by turning it to lie within 180 degrees of the centre
    (``pipeline.inside``), as the coordinator's validation reads facts.
    """

    job_id: str
    sweep_id: str
    area: dict
    center_lon: float
    center_lat: float
    radius_m: float
    photos: list[PhotoRef]
    params: dict = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def _read(cls, data, path, errors):
        r = _Reader(data, path, errors, cls.wire_names())
        r.version()
        photos = [PhotoRef._read(item, p, errors) for p, item in r.items("photos")]
        ids = [p.id for p in photos]
        if len(set(ids)) != len(ids):
            r.fail("photos", "photo ids must be unique")
        n = len(errors)
        center_lon = r.num("centerLon", -180, 180)
        return cls(job_id=r.text("jobId"), sweep_id=r.text("sweepId"),
                   area=_read_polygon(r, "area", center_lon if len(errors) == n else None),
                   center_lon=center_lon, center_lat=r.num("centerLat", -90, 90),
                   radius_m=r.num("radiusM", 1, 50_000), photos=photos,
                   params=r.obj("params", optional=True) or {})


# Most image rows a road width may carry as its evidence (the engine sends at most ``ROAD_ROWS_SENT``).
ROAD_ROWS_MAX = 256


_ROW_KEYS = frozenset(("v", "uLeft", "uRight"))
_NUMBER = (int, float)


@dataclass
class RoadRow(_Wire):
    """One image row the road width was read on: where the road's left and right edges cross it (pixels)."""

    v: float
    u_left: float
    u_right: float

    @classmethod
    def well_formed(cls, data) -> RoadRow | None:
        """A well-formed row in one test, or None. A result carries hundreds of rows, and reading each
        through ``_Reader`` tripled the time of validating a result; a bool is not an int here, and NaN
        and infinity fail the range, so this takes exactly what ``_read`` takes without a fault."""
        if type(data) is dict and data.keys() == _ROW_KEYS:
            v, ul, ur = data["v"], data["uLeft"], data["uRight"]
            if (type(v) in _NUMBER and type(ul) in _NUMBER and type(ur) in _NUMBER
                    and 0 <= v < math.inf and 0 <= ul <= ur < math.inf):
                return cls(v=float(v), u_left=float(ul), u_right=float(ur))
        return None

    @classmethod
    def _read(cls, data, path, errors):
        r = _Reader(data, path, errors, cls.wire_names())
        row = cls(v=r.num("v", 0), u_left=r.num("uLeft", 0), u_right=r.num("uRight", 0))
        if row.u_left is not None and row.u_right is not None and row.u_left > row.u_right:
            r.fail("uLeft", "must not lie right of uRight")
        return row


@dataclass
class RoadWidth(_Wire):
    """A photo's road width; ``rows`` (optional) are the image rows it was read on, so a reviewer can see
    on the photo which edges were measured (a sample of them where there were many: ``samples`` counts all)."""

    width_m: float
    method: str
    spread_m: float
    samples: int
    rows: list[RoadRow] | None = None

    added = frozenset({"rows"})

    @classmethod
    def _read(cls, data, path, errors):
        r = _Reader(data, path, errors, cls.wire_names())
        raw, rows = r.data.get("rows"), None
        if raw is not None:
            if not isinstance(raw, list):
                r.fail("rows", "must be a list")
            elif len(raw) > ROAD_ROWS_MAX:
                r.fail("rows", f"must hold at most {ROAD_ROWS_MAX} entries")
            else:
                rows = [RoadRow.well_formed(item) or RoadRow._read(item, f"{_join(path, 'rows')}[{i}]", errors)
                        for i, item in enumerate(raw)]
        return cls(width_m=r.num("widthM", 0), method=r.text("method"), spread_m=r.num("spreadM", 0),
                   samples=r.int("samples", lo=1), rows=rows)


@dataclass
class Calibration(_Wire):
    """The per-scene scale verdict and the evidence it rests on (in-band, never hidden)."""

    scale_trust: str
    focal_px: float
    focal_basis: str
    camera_height_m: float
    pitch_deg: float
    evidence: dict = field(default_factory=dict)

    @classmethod
    def _read(cls, data, path, errors):
        r = _Reader(data, path, errors, cls.wire_names())
        return cls(scale_trust=r.text("scaleTrust", choices=SCALE_TRUSTS), focal_px=r.num("focalPx", 1),
                   focal_basis=r.text("focalBasis", choices=BASES),
                   camera_height_m=r.num("cameraHeightM", 0.1, 20), pitch_deg=r.num("pitchDeg", -90, 90),
                   evidence=r.obj("evidence") or {})


@dataclass
class ObjectMeasurement(_Wire):
    """One detected object: range, bearing and position of the point where its box-centre ray meets it,
    and its apparent size (``size: {widthM, heightM}`` on the wire).

    ``heightIsLowerBound`` / ``widthIsLowerBound`` say the object was cut (its
    box touches the top/bottom or left/right frame edge, or a nearer thing hides
    its foot), so that size is a minimum.

    Optional: ``box``, the detection's box in the photo's pixels, ``[u0, v0, u1, v1]``;
    ``usedForScale``, on a vehicle or person (the classes with a size prior), whether the
    calibration's scale rested on it (false: left out, cut by the frame or off the consensus).
    """

    label: str
    distance_m: float
    width_m: float
    height_m: float
    bearing_deg: float
    lon: float
    lat: float
    height_is_lower_bound: bool
    width_is_lower_bound: bool = False
    score: float = 1.0
    box: list[float] | None = None
    used_for_scale: bool | None = None

    added = frozenset({"box", "used_for_scale"})

    @classmethod
    def wire_names(cls) -> tuple[str, ...]:
        return tuple(n for n in super().wire_names() if n not in ("widthM", "heightM")) + ("size",)

    def to_dict(self):
        out = super().to_dict()
        out["size"] = {"widthM": out.pop("widthM"), "heightM": out.pop("heightM")}
        return out

    @classmethod
    def _read(cls, data, path, errors):
        r = _Reader(data, path, errors, cls.wire_names())
        size = _Reader(r.obj("size") or {}, _join(path, "size"), errors, ("widthM", "heightM"))
        return cls(label=r.text("label"), distance_m=r.num("distanceM", 0), width_m=size.num("widthM", 0),
                   height_m=size.num("heightM", 0), bearing_deg=r.num("bearingDeg", 0, 360),
                   lon=r.num("lon", -180, 180), lat=r.num("lat", -90, 90),
                   height_is_lower_bound=r.flag("heightIsLowerBound"),
                   width_is_lower_bound=r.flag("widthIsLowerBound"), score=r.num("score", 0, 1),
                   box=r.box("box"), used_for_scale=r.maybe_flag("usedForScale"))


@dataclass
class Measurement(_Wire):
    """What one photo gave: road width (or null), the calibration verdict, and the objects."""

    photo_id: str
    calibration: Calibration
    road_width: RoadWidth | None = None
    objects: list[ObjectMeasurement] = field(default_factory=list)

    @classmethod
    def _read(cls, data, path, errors):
        r = _Reader(data, path, errors, cls.wire_names())
        rw = r.obj("roadWidth", optional=True)
        cal = r.obj("calibration")
        return cls(photo_id=r.text("photoId"),
                   road_width=RoadWidth._read(rw, _join(path, "roadWidth"), errors) if rw is not None else None,
                   calibration=Calibration._read(cal, _join(path, "calibration"), errors) if cal is not None else None,
                   objects=[ObjectMeasurement._read(item, p, errors) for p, item in r.items("objects")])


@dataclass
class Fact(_Wire):
    """A georeferenced street fact of one of ``FACT_KINDS``, as the seen layer serves it.

    ``spread`` (optional) says how far its observations were apart: ``positionM``
    (largest distance of an observation from the fact's position) and, per value
    key, the range (max - min) of the observed values, in the value's unit.
    """

    kind: str
    lon: float
    lat: float
    value: dict | float | None
    unit: str
    confidence: str
    basis: str
    source: list[str]
    timestamp: str
    spread: dict | None = None

    @classmethod
    def _read(cls, data, path, errors):
        r = _Reader(data, path, errors, cls.wire_names())
        spread = r.obj("spread", optional=True)
        if spread is not None:
            sr = _Reader(spread, _join(path, "spread"), errors, ("positionM", *PHYSICAL_BOUNDS.get(
                r.data.get("kind"), {})))
            for key in spread:
                sr.num(key, 0)
        kind, confidence = r.text("kind", choices=FACT_KINDS), r.text("confidence", choices=CONFIDENCES)
        value = r.data.get("value")
        if "value" not in r.data:
            r.fail("value", "is required (null when unknown)")
        elif value is None:
            if confidence not in (None, "unknown"):
                r.fail("value", "is null, so confidence must be 'unknown'")
        elif confidence == "unknown":
            r.fail("value", "must be null when confidence is 'unknown'")
        elif isinstance(value, dict):
            v = _Reader(value, _join(path, "value"), errors, tuple(PHYSICAL_BOUNDS.get(kind, {})))
            if not value:
                r.fail("value", "must name at least one quantity")
            for key in value:
                if key in PHYSICAL_BOUNDS.get(kind, {}):
                    v.num(key, 0, optional=True)
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            r.fail("value", "must be an object, a finite number or null")
        source = [s for p, s in r.items("source")]
        if not source or not all(isinstance(s, str) and s for s in source):
            r.fail("source", "must list the photo ids it rests on")
        return cls(kind=kind, lon=r.num("lon", -180, 180), lat=r.num("lat", -90, 90), value=value,
                   unit=r.text("unit", choices=UNITS), confidence=confidence, basis=r.text("basis", choices=BASES),
                   source=source, timestamp=r.time("timestamp"), spread=spread)


def bound_violations(fact: Fact) -> list[str]:
    """Quantities of a (structurally valid) fact outside ``PHYSICAL_BOUNDS``; empty when plausible."""
    bounds = PHYSICAL_BOUNDS.get(fact.kind, {})
    if fact.value is None:
        return []
    values = fact.value if isinstance(fact.value, dict) else {PRIMARY_KEY[fact.kind]: fact.value}
    out = []
    for key, v in values.items():
        if key in bounds and v is not None and not bounds[key][0] <= v <= bounds[key][1]:
            lo, hi = bounds[key]
            out.append(f"{fact.kind}.{key} = {v:g} is outside the plausible [{lo:g}, {hi:g}]")
    return out


@dataclass
class Timings(_Wire):
    fetch_s: float
    infer_s: float
    total_s: float

    @classmethod
    def _read(cls, data, path, errors):
        r = _Reader(data, path, errors, cls.wire_names())
        return cls(fetch_s=r.num("fetchS", 0), infer_s=r.num("inferS", 0), total_s=r.num("totalS", 0))


@dataclass
class Skipped(_Wire):
    """A job photo that gave no measurement, and why (fetch failed, undecodable, ...)."""

    photo_id: str
    reason: str

    @classmethod
    def _read(cls, data, path, errors):
        r = _Reader(data, path, errors, cls.wire_names())
        return cls(photo_id=r.text("photoId"), reason=r.text("reason"))


@dataclass
class Result(_Wire):
    """What a node submits for a job: facts, per-photo measurements, and who made them how.

    Every job photo is either in ``measurements`` or in ``skipped`` with its reason.
    """

    job_id: str
    node_id: str
    engine_version: str
    engine_build: str
    facts: list[Fact]
    measurements: list[Measurement]
    timings: Timings
    device: str
    skipped: list[Skipped] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def _read(cls, data, path, errors):
        r = _Reader(data, path, errors, cls.wire_names())
        r.version()
        timings = r.obj("timings")
        return cls(job_id=r.text("jobId"), node_id=r.text("nodeId"), engine_version=r.text("engineVersion"),
                   engine_build=r.text("engineBuild"),
                   facts=[Fact._read(item, p, errors) for p, item in r.items("facts")],
                   measurements=[Measurement._read(item, p, errors) for p, item in r.items("measurements")],
                   timings=Timings._read(timings, _join(path, "timings"), errors) if timings is not None else None,
                   device=r.text("device"),
                   skipped=[Skipped._read(item, p, errors) for p, item in r.items("skipped")])
