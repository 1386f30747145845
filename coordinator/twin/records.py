"""A layer record as the twin serves it: a GeoJSON Feature (RFC 7946, ``[lon, lat]``) whose
properties carry the record's ``license`` (rule 5), so records of share-alike and permissive
sources stay separable however layers are combined."""
from __future__ import annotations

from typing import Any


def point(fid: Any, lon: float, lat: float, license: str, **props: Any) -> dict[str, Any]:
    lon, lat = float(lon), float(lat)
    if not (-180 <= lon <= 180 and -90 <= lat <= 90):
        raise ValueError(f"position {lon},{lat} is off the Earth")
    return {"type": "Feature", "id": str(fid), "geometry": {"type": "Point", "coordinates": [lon, lat]},
            "properties": {**props, "license": license}}


def feature(fid: Any, geometry: dict[str, Any] | None, license: str, **props: Any) -> dict[str, Any]:
    """Any geometry (a storm's latest polygon, a river's lines), or none where the upstream
    gives no position (a news article): null geometry, never an invented point."""
    return {"type": "Feature", "id": str(fid), "geometry": geometry, "properties": {**props, "license": license}}
