"""The contract's honesty rules as types.

Every tool builds its answer from these, so that confidence, caveats, health
and licenses cannot be forgotten one tool at a time:

- ``figure``: a value with a confidence; ``unknown`` never carries a number.
- ``Health``: which sources were asked and which answered; a degraded answer
  (``sourcesUsable < sourcesQueried``) is never cached.
- ``Answer``: the body a tool returns, with ``caveats`` first.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Confidence(str, enum.Enum):
    HIGH = "high"
    LOW = "low"
    UNKNOWN = "unknown"


class License(str, enum.Enum):
    ODBL = "ODbL-1.0"
    CDLA_PERMISSIVE = "CDLA-Permissive-2.0"
    CC0 = "CC0-1.0"
    CC_BY_4 = "CC-BY-4.0"
    CC_BY_SA_4 = "CC-BY-SA-4.0"
    ODC_BY = "ODC-By-1.0"
    PUBLIC_DOMAIN = "public-domain"
    PROJECT = "SIS-derived"

    @property
    def share_alike(self) -> bool:
        return self in (License.ODBL, License.CC_BY_SA_4)


def figure(value: Any, confidence: Confidence, **extra: Any) -> dict[str, Any]:
    """A figure as served. ``unknown`` forces ``value`` to null: unknown is not zero."""
    if confidence is Confidence.UNKNOWN:
        value = None
    elif value is None:
        raise ValueError("a figure with no value must have confidence 'unknown'")
    return {"value": value, "confidence": confidence.value, **extra}


@dataclass
class SourceReport:
    name: str
    license: str
    ok: bool
    error: str | None = None
    records: int | None = None
    demo: bool = False
    dataset: dict[str, Any] | None = None     # the ingested dataset version it read (datasets.versions)
    # Not loaded on this service (a dataset no ``sis ingest`` brought in): unusable, but no retry fills
    # it, so the degraded caveat must not tell the caller to retry for it.
    absent: bool = False

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "ok": self.ok, "license": self.license}
        if self.error is not None:
            out["error"] = self.error
        if self.records is not None:
            out["records"] = self.records
        if self.demo:
            out["demo"] = True
        if self.dataset is not None:
            out["dataset"] = self.dataset
        return out


@dataclass
class Health:
    sources: list[SourceReport] = field(default_factory=list)

    def add(self, report: SourceReport) -> None:
        self.sources.append(report)

    @property
    def queried(self) -> int:
        return len(self.sources)

    @property
    def usable(self) -> int:
        return sum(1 for s in self.sources if s.ok)

    @property
    def degraded(self) -> bool:
        return self.usable < self.queried

    @property
    def demo(self) -> bool:
        return any(s.demo for s in self.sources)

    def as_json(self) -> dict[str, Any]:
        return {
            "sourcesQueried": self.queried,
            "sourcesUsable": self.usable,
            "degraded": self.degraded,
            "sources": [s.as_json() for s in self.sources],
        }


DEGRADED_CAVEAT = ("Degraded: {bad} of {total} sources did not answer ({names}); this answer is "
                   "incomplete, served uncached; retry later for a full read.")
ABSENT_CAVEAT = ("Degraded: {bad} of {total} sources are not loaded on this service ({names}); what they "
                 "would tell is unknown here, and a retry does not change that until an operator loads them.")
DEMO_CAVEAT = ("Demo data: sources answered from bundled recorded samples, not the live "
               "upstreams; nothing here describes the world today.")


@dataclass
class Answer:
    """What a tool returns: the body fields, its caveats and the health of its sources.

    ``cacheable`` is the tool's own judgement; a degraded answer is never cached
    whatever the tool says.
    """

    data: dict[str, Any]
    caveats: list[str] = field(default_factory=list)
    health: Health | None = None
    cacheable: bool = True
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    demo: bool = False        # served by a --demo coordinator: its first caveat says so, whatever the sources
    # Shared by copies made with dataclasses.replace (which only add headers), so a
    # cached answer's body is encoded once however often it is served.
    _memo: dict[str, bytes] = field(default_factory=dict, repr=False, compare=False)

    @property
    def degraded(self) -> bool:
        return self.health is not None and self.health.degraded

    def with_headers(self, headers: dict[str, str]) -> "Answer":
        """A copy with these headers first and its own after, sharing the encoded body (a
        cached answer is served to many callers, each with their own rate-limit headers)."""
        return Answer(self.data, self.caveats, self.health, self.cacheable, self.status,
                      {**headers, **self.headers}, self.demo, self._memo)

    @property
    def may_cache(self) -> bool:
        return self.cacheable and not self.degraded and self.status == 200

    def encoded(self, dumps: Any) -> bytes:
        """The body as JSON bytes, encoded once: a cached answer is served many times."""
        encoded = self._memo.get("body")
        if encoded is None:
            encoded = dumps(self.body())
            if isinstance(encoded, str):
                encoded = encoded.encode()
            self._memo["body"] = encoded
        return encoded

    def etag(self, dumps: Any) -> str:
        """A strong ETag of the encoded body, computed once per answer like the encoding."""
        tag = self._memo.get("etag")
        if tag is None:
            import hashlib
            tag = self._memo["etag"] = '"' + hashlib.sha1(self.encoded(dumps)).hexdigest() + '"'
        return tag

    def body(self) -> dict[str, Any]:
        caveats = list(self.caveats)
        if self.health is not None:
            if self.health.degraded:
                total = self.health.queried
                failed = [s.name for s in self.health.sources if not s.ok and not s.absent]
                absent = [s.name for s in self.health.sources if not s.ok and s.absent]
                if absent:
                    caveats.insert(0, ABSENT_CAVEAT.format(bad=len(absent), total=total, names=", ".join(absent)))
                if failed:
                    caveats.insert(0, DEGRADED_CAVEAT.format(bad=len(failed), total=total, names=", ".join(failed)))
        if self.demo or self.health is not None and self.health.demo:
            caveats.insert(0, DEMO_CAVEAT)
        out: dict[str, Any] = {"caveats": caveats}
        out.update(self.data)
        if self.health is not None:
            out["health"] = self.health.as_json()
        return out
