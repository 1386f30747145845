"""Which place categories a brief counts as health and as education lifelines.

Overture's categories are a free taxonomy (``hospital``, ``pharmacy``, ``elementary_school``,
``college_university``, ...): a category is a health place when one of its words is a health
word, an education place when one is an education word. The word lists are this project's
choice, written here once so the brief and docs/briefs.md cannot disagree.
"""
from __future__ import annotations

HEALTH_WORDS = frozenset({"hospital", "clinic", "medical", "health", "pharmacy", "doctor", "dentist",
                          "emergency", "puskesmas", "maternity", "physician"})
EDUCATION_WORDS = frozenset({"school", "university", "college", "kindergarten", "preschool", "education",
                             "academy", "madrasa", "pesantren"})


def kind_of(category: str) -> str | None:
    words = set(category.lower().replace("-", "_").split("_"))
    if words & HEALTH_WORDS:
        return "health"
    if words & EDUCATION_WORDS:
        return "education"
    return None


def split(by_category: dict[str, int]) -> dict[str, dict[str, int]]:
    """{"health": {category: n}, "education": {category: n}}."""
    out: dict[str, dict[str, int]] = {"health": {}, "education": {}}
    for cat, n in by_category.items():
        k = kind_of(cat)
        if k is not None:
            out[k][cat] = n
    return out
