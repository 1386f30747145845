"""The road-width prior: ``ruasWidthM``, the width of ONE direction's carriageway of a
road, modelled from its OpenStreetMap class. It is a model, never a measurement.

The model (docs/features.md cites it): Indonesian Government Regulation PP 34/2006 on
roads sets minimum road-body widths by function: arterial 11 m, collector 9 m, local
7.5 m, neighbourhood (lingkungan) 6.5 m. Indonesian OSM mapping puts jalan tol on
``motorway``, national roads on ``trunk``, provincial on ``primary`` and regency/city
roads on ``secondary`` (UPSTREAMS.md §10); the functional class is taken from the OSM
class as below. A road body carries two directions, so one ruas is half of it; a
two-way road is about 2 ruas. A way tagged ``oneway=yes`` is still one direction of a
road body (dual carriageways map each direction as a oneway way), so its ruas is the
same half. Classes outside the table (links, service roads, tracks, paths) are null:
the regulation does not size them and a guess would pass for a figure.
"""
from __future__ import annotations

from typing import Mapping

MODEL = "PP 34/2006 minimum road-body width by functional class, halved per direction"

# OSM highway class -> (functional class in PP 34/2006, minimum road-body width in m)
ROAD_BODY_M: dict[str, tuple[str, float]] = {
    "motorway": ("arterial", 11.0),
    "trunk": ("arterial", 11.0),
    "primary": ("arterial", 11.0),
    "secondary": ("collector", 9.0),
    "tertiary": ("local", 7.5),
    "unclassified": ("local", 7.5),
    "residential": ("neighbourhood", 6.5),
}

# Classes loaded as roads: the model's, plus those served with a null width.
ROAD_CLASSES = frozenset(ROAD_BODY_M) | {f"{c}_link" for c in ("motorway", "trunk", "primary", "secondary", "tertiary")} | {
    "service", "living_street"}


def functional_class(highway: str) -> str | None:
    row = ROAD_BODY_M.get(highway)
    return row[0] if row else None


def ruas_width_m(highway: str, tags: Mapping[str, str] | None = None) -> float | None:
    """One direction's carriageway width from the class model, or None outside it.
    ``tags`` are accepted for the day the model reads more of them (``lanes``); today
    the model is the class alone, as documented."""
    row = ROAD_BODY_M.get(highway)
    return None if row is None else row[1] / 2


def directions(tags: Mapping[str, str]) -> int:
    """How many directions of travel the way carries: 1 for ``oneway=yes|1|-1``, else 2."""
    return 1 if str(tags.get("oneway", "")).lower() in ("yes", "1", "-1", "true") else 2
