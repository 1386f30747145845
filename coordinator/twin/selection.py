"""The layer selection rules, in one function (SPEC.md, Layer selection rules; DESIGN.md §12).

1. An unknown id goes to ``rejected[]``.
2. A known id that is not served goes to ``notServed[]`` with its reason: a withdrawn layer, a
   layer with no source here, or one outside the credential's ``layers``.
3. Neither list is ever dropped: both are in every answer, empty or not.
4. A withdrawn id is a known id: ``notServed[]``, never ``rejected[]``.
5. A request naming only withdrawn layers is answered 410 (``Gone``), not the default set,
   with both lists in its details.

A layer whose source fails at read time is not decided here: the selection serves it, and the
read (``assemble``) moves it to ``notServed[]`` with the source's error.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from coordinator.core.errors import BadParameter, Gone

from .layers import DEFAULTS, LAYERS

ALL = "*"
MAX_IDS = 64


@dataclass
class Selection:
    served: list[str] = field(default_factory=list)          # known, servable ids, in request order
    rejected: list[str] = field(default_factory=list)        # unknown ids, as sent
    not_served: list[dict[str, str]] = field(default_factory=list)   # {"id", "reason"}

    def refuse(self, layer_id: str, reason: str) -> None:
        self.not_served.append({"id": layer_id, "reason": reason})


def parse(raw: str | None) -> list[str] | None:
    """The ``layers`` parameter: comma-separated ids, ``*`` for every layer; None when absent.
    Blanks around ids are dropped and a repeated id counts once (first place kept)."""
    if raw is None:
        return None
    ids = [part.strip() for part in raw.split(",")]
    ids = [i for i in ids if i]
    if not ids:
        raise BadParameter("'layers' names no layer: give comma-separated layer ids, or leave it out for the "
                           "defaults", {"parameter": "layers", "value": raw})
    unique = list(dict.fromkeys(ids))
    if len(unique) > MAX_IDS:
        raise BadParameter(f"'layers' names {len(unique)} ids; at most {MAX_IDS}",
                           {"parameter": "layers", "maxIds": MAX_IDS})
    return unique


def select(requested: Iterable[str] | None, allowed: Iterable[str] = (ALL,)) -> Selection:
    """Sort the requested ids (None: the defaults; ``*``: every known layer) into served,
    rejected and not served, given the credential's ``layers`` (``*``: all). Raises ``Gone``
    when every id named is withdrawn."""
    allowed_set = set(allowed)
    every = ALL in allowed_set
    explicit = requested is not None
    ids = list(DEFAULTS) if requested is None else list(requested)
    if ALL in ids:
        ids = [i for i in ids if i != ALL]
        ids += [lid for lid in LAYERS if lid not in ids]
    out = Selection()
    for lid in ids:
        layer = LAYERS.get(lid)
        if layer is None:
            out.rejected.append(lid)
        elif layer.not_served_reason:
            out.refuse(lid, layer.not_served_reason)
        elif not every and lid not in allowed_set:
            out.refuse(lid, "not among this credential's layers")
        else:
            out.served.append(lid)
    if explicit and ids and all(lid in LAYERS and LAYERS[lid].withdrawn for lid in ids):
        raise Gone("every layer named is withdrawn; the default layers are not served in their place",
                   {"rejected": out.rejected, "notServed": out.not_served})
    return out
