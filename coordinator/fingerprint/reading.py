"""What the model is asked, and how its answer becomes served figures.

The eight figures of the contract (SPEC.md, Environmental fingerprint v0) are declared once
in ``FIGURES``: the JSON schema the model's answer must fit is built from them (with the
photo numbers bounded by how many photos were shown, so a constrained decoder cannot cite
a photo it was not given), and so is the prompt's list of questions.

Honesty is applied here, not left to the model:

- ``unknown`` carries no value, and a value the model left null is ``unknown`` whatever
  confidence it claimed;
- a metric figure (passable width, overhead clearance) is ``high`` only when a scale anchor
  (an object of assumed size the model names) lies in a photo the figure rests on; a metric
  estimate from a photo with nothing of known size in it is ``low`` at most, and says so;
- each figure names the photos it rests on (all those shown, where the model cited none),
  the model, the newest capture time of those photos (the street as it looked then) and the
  photos' licenses, since a figure is derived from them.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from coordinator.core.honesty import Confidence, figure
from .photos import Nearby
from coordinator.sources.values import utc_z

BASIS = "modelled"        # the seen layer's vocabulary: measured | modelled | assumed
NOTHING_OVERHEAD = "nothing overhead"
_TEXT_LIST = {"type": ["array", "null"], "items": {"type": "string", "maxLength": 80}, "maxItems": 12}
_METRES = {"type": ["number", "null"], "minimum": 0, "maximum": 60}


@dataclass(frozen=True)
class FigureSpec:
    key: str
    value_schema: dict[str, Any]
    question: str
    unit: str | None = None

    @property
    def metric(self) -> bool:
        return self.unit == "m"


FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec("passableWidth", _METRES, "the width in metres that a vehicle can pass through on the street, "
               "between kerbs, parked vehicles, stalls and other obstacles", "m"),
    FigureSpec("sidewalk", {"enum": ["both sides", "one side", "none", None]},
               "whether the street has a sidewalk (a footway apart from the carriageway) on both sides, one side "
               "or none"),
    FigureSpec("surface", {"enum": ["asphalt", "concrete", "paving stones", "gravel", "dirt", "other", None]},
               "the carriageway's surface"),
    FigureSpec("obstacles", _TEXT_LIST, "what narrows or blocks the way (parked vehicles, vendors' stalls, poles "
               "in the carriageway, potholes, construction); an empty list if the way is clear"),
    FigureSpec("signage", _TEXT_LIST, "the traffic and street signs you can see, each named by what it says or "
               "means ('no entry', 'speed limit 30', 'one way', a street name); an empty list if none"),
    FigureSpec("lighting", {"enum": ["street lights", "none visible", None]},
               "whether street lights (lamps on poles or walls) are visible"),
    FigureSpec("overheadClearance", {"anyOf": [{"type": "number", "minimum": 0, "maximum": 60},
                                               {"enum": [NOTHING_OVERHEAD, None]}]},
               f"the height in metres of the lowest thing over the carriageway (wires, branches, bridges, signs, "
               f"awnings), or '{NOTHING_OVERHEAD}'", "m"),
    FigureSpec("floodEvidence", _TEXT_LIST, "signs of flooding: standing water, water marks or silt lines on "
               "walls, flood barriers, sandbags, raised thresholds; an empty list if none"),
)
KEYS = tuple(f.key for f in FIGURES)


def answer_schema(photos: int) -> dict[str, Any]:
    """The schema the model's answer must fit, for ``photos`` photos numbered from 0."""
    index = {"type": "integer", "minimum": 0, "maximum": max(0, photos - 1)}

    def fig(value: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": False, "required": ["value", "confidence", "photos"],
                "properties": {"value": value, "confidence": {"enum": [c.value for c in Confidence]},
                               "photos": {"type": "array", "items": index, "maxItems": photos}}}

    anchor = {"type": "object", "additionalProperties": False, "required": ["object", "assumedSizeM", "photo"],
              "properties": {"object": {"type": "string", "maxLength": 80},
                             "assumedSizeM": {"type": "number", "exclusiveMinimum": 0, "maximum": 100},
                             "photo": index}}
    props: dict[str, Any] = {f.key: fig(f.value_schema) for f in FIGURES}
    props["scaleAnchors"] = {"type": "array", "items": anchor, "maxItems": 20}
    return {"type": "object", "additionalProperties": False, "required": [*KEYS, "scaleAnchors"],
            "properties": props}


def _compass(deg: float | None) -> str:
    if deg is None:
        return "heading unknown"
    names = ("north", "north-east", "east", "south-east", "south", "south-west", "west", "north-west")
    return f"facing {deg:.0f}° ({names[int((deg + 22.5) % 360 // 45)]})"


def prompt(lat: float, lon: float, shown: list[Nearby]) -> str:
    lines = [f"You are shown {len(shown)} street photo(s) taken near latitude {lat:.6f}, longitude {lon:.6f}, "
             "numbered from 0 in the order given:"]
    for i, p in enumerate(shown):
        lines.append(f"- photo {i}: {p.distance_m:.0f} m from the point, {_compass(p.photo.heading)}, "
                     f"taken {p.photo.captured_at}")
    lines += ["", "Report what the photos show of the street, for each of:"]
    lines += [f"- {f.key}: {f.question}." for f in FIGURES]
    lines += ["", "For each, give value, confidence ('high', 'low' or 'unknown') and the photo numbers it rests on. "
              "When the photos do not show it, give value null and confidence 'unknown': never guess.",
              "For lengths in metres, judge scale from objects of known size and list each one you used in "
              "scaleAnchors with the size you assumed (for example a car about 1.8 m wide, a door about 2.0 m "
              "high, a kerb about 0.15 m high) and the photo it is in.",
              "Answer with the JSON object only."]
    return "\n".join(lines)


def _licenses(photos: list[Nearby]) -> str | None:
    return " + ".join(sorted({p.photo.license for p in photos})) or None


def newest(photos: list[Nearby]) -> str | None:
    """The newest capture time of the photos, compared as times and served in UTC with a Z (the
    provider's own offset was passed on: ``…+07:00`` beside the seen layer's ``…Z`` for one photo)."""
    def when(p: Nearby) -> datetime:
        t = datetime.fromisoformat(p.photo.captured_at.replace("Z", "+00:00"))
        return t if t.tzinfo else t.replace(tzinfo=timezone.utc)
    return utc_z(max(photos, key=when).photo.captured_at) if photos else None


def unknown_figures() -> dict[str, dict[str, Any]]:
    """Every figure unknown: no model, no photos, or an answer that could not be used."""
    return {f.key: figure(None, Confidence.UNKNOWN, unit=f.unit, basis=None, source=None, timestamp=None,
                          license=None) for f in FIGURES}


def served(content: dict[str, Any], shown: list[Nearby], model: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(figures, scale anchors) as served, from an answer that fits ``answer_schema``."""
    anchors = [{"object": a["object"], "assumedSizeM": a["assumedSizeM"], "photo": shown[a["photo"]].photo.id}
               for a in content["scaleAnchors"]]
    anchored = {a["photo"] for a in content["scaleAnchors"]}
    figures = {}
    for spec in FIGURES:
        raw = content[spec.key]
        cited = sorted(set(raw["photos"])) or list(range(len(shown)))
        photos = [shown[i] for i in cited]
        value, claimed = raw["value"], Confidence(raw["confidence"])
        confidence, note = claimed, None
        if value is None and claimed is not Confidence.UNKNOWN:
            confidence, note = Confidence.UNKNOWN, "the model gave no value"
        elif spec.metric and claimed is Confidence.HIGH and isinstance(value, (int, float)) \
                and not anchored & set(cited):
            confidence, note = Confidence.LOW, "low at most: no scale anchor lies in the photos it rests on"
        extra: dict[str, Any] = {}
        if note:
            extra["confidenceNote"] = f"{note} (the model said {claimed.value})"
        figures[spec.key] = figure(
            value, confidence, unit=spec.unit if isinstance(value, (int, float)) or value is None else None,
            basis=BASIS, source={"photos": [p.photo.id for p in photos], "model": model},
            timestamp=newest(photos), license=_licenses(photos), **extra)
    return figures, anchors
