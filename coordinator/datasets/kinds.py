"""Dataset kinds: what ``sis ingest KIND PATH`` can load, each declared once by the
capability that serves it.

A kind is a name, a description, the license its data usually comes under, the file
suffixes it reads and an async loader. The loader gets a ``Load`` (``ingest.Load``):
the file, the version id its rows must carry, the database, and the calls that count
accepted and bad records and move the progress bar. The rest (recording the version,
the checksum, the extent, ready or failed) is done for every kind alike by
``ingest.run``, so a kind cannot forget it.

Kinds live beside the capability that uses them, in a module named
``dataset_kinds.py`` in its package (``coordinator/<capability>/dataset_kinds.py``);
``discover`` imports every such module, so adding a kind is that one module and no
table to extend. Kinds come with the issues that need them: ``pb2002`` (plates) is in
``coordinator/panels/dataset_kinds.py``, ``bathymetry`` (GEBCO grids) in
``coordinator/grids/dataset_kinds.py``.
"""
from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping

if TYPE_CHECKING:
    from coordinator.core.db import Database

Loader = Callable[[Any], Awaitable[None]]      # given an ``ingest.Load`` (ingest imports this module)
Discard = Callable[["Database", int], Awaitable[None]]

KINDS_MODULE = "dataset_kinds"
RESERVED_OPTIONS = ("license", "source", "database", "kind", "path")   # options ``sis ingest`` has already


@dataclass(frozen=True)
class DatasetKind:
    """One kind of ingestible file.

    ``load`` streams records from ``load.open()`` (or ``load.path``), writes them tagged
    with ``load.version_id`` and reports each through ``load.accepted`` or ``load.bad``;
    it raises to fail the load. ``discard``, when given, deletes the rows a failed load
    wrote (they are never served either way: readers take only ready versions).
    ``companions`` names the files that must come with the main one (a grid's
    type-identifier grid), each with its help line: ``sis ingest`` takes each as an
    option ``--NAME PATH`` and the loader finds them in ``load.companions``."""

    name: str
    description: str
    license: str
    suffixes: tuple[str, ...]
    load: Loader
    discard: Discard | None = None
    companions: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("-", "").replace("_", "").isalnum() or self.name != self.name.lower():
            raise ValueError(f"dataset kind name {self.name!r}: lower-case letters, digits, '-' and '_' only")
        if not self.suffixes or any(not s.startswith(".") or s != s.lower() for s in self.suffixes):
            raise ValueError(f"dataset kind {self.name}: suffixes are lower-case and start with '.'")
        if not self.license:
            raise ValueError(f"dataset kind {self.name}: a default license is required (rule 5)")
        for option in self.companions:
            if not option.isidentifier() or option != option.lower() or option in RESERVED_OPTIONS:
                raise ValueError(f"dataset kind {self.name}: companion {option!r} must be a lower-case name "
                                 f"other than {', '.join(RESERVED_OPTIONS)}")

    def takes(self, file_name: str) -> bool:
        """Whether the file's name ends with one of the kind's suffixes (``.geojsonl``,
        ``.osm.pbf``: compound suffixes count), ignoring case."""
        return file_name.lower().endswith(self.suffixes)


@dataclass
class KindRegistry:
    """The kinds known to this process, by name."""

    kinds: dict[str, DatasetKind] = field(default_factory=dict)
    _discovered: bool = False

    def register(self, kind: DatasetKind) -> DatasetKind:
        if kind.name in self.kinds and self.kinds[kind.name] is not kind:
            raise ValueError(f"dataset kind {kind.name!r} is declared twice")
        self.kinds[kind.name] = kind
        return kind

    def remove(self, name: str) -> None:
        self.kinds.pop(name, None)

    def get(self, name: str) -> DatasetKind | None:
        self.discover()
        return self.kinds.get(name)

    def names(self) -> list[str]:
        self.discover()
        return sorted(self.kinds)

    def companion_options(self) -> dict[str, list[tuple[str, str]]]:
        """Every companion option any kind declares, with the kinds that take it and their
        help lines (``sis ingest`` offers each as ``--NAME``)."""
        self.discover()
        out: dict[str, list[tuple[str, str]]] = {}
        for kind in self.kinds.values():
            for option, help_text in kind.companions.items():
                out.setdefault(option, []).append((kind.name, help_text))
        return out

    def discover(self) -> None:
        """Import every ``coordinator.<package>.dataset_kinds`` module once; each declares
        its kinds with ``dataset_kind`` as it is imported."""
        if self._discovered:
            return
        self._discovered = True
        import coordinator

        # Listed without importing the packages, so that looking for kinds loads only
        # the modules that declare some.
        for root in coordinator.__path__:
            for info in pkgutil.iter_modules([root]):
                if not info.ispkg:
                    continue
                inner = {m.name for m in pkgutil.iter_modules([str(Path(root) / info.name)])}
                if KINDS_MODULE in inner:
                    importlib.import_module(f"coordinator.{info.name}.{KINDS_MODULE}")


KINDS = KindRegistry()


def dataset_kind(name: str, *, description: str, license: str, suffixes: tuple[str, ...] | list[str],
                 discard: Discard | None = None, companions: Mapping[str, str] | None = None,
                 registry: KindRegistry | None = None) -> Callable[[Loader], Loader]:
    """Declare a kind with its loader, in one place::

        @dataset_kind("bathymetry", description="GEBCO grid tiles", license="GEBCO",
                      suffixes=(".nc",))
        async def load(load: Load) -> None:
            ...
    """

    def declare(loader: Loader) -> Loader:
        (registry or KINDS).register(DatasetKind(name=name, description=description, license=license,
                                                 suffixes=tuple(suffixes), load=loader, discard=discard,
                                                 companions=dict(companions or {})))
        return loader

    return declare
