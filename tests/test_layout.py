"""The layout keeps its arrows pointing down: no module of the coordinator imports another
that imports it back (counting imports made inside functions and for type checking, which
hide a circle rather than remove it), and the core imports nothing above it."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "coordinator"


def modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every coordinator module ``name`` imports, wherever the import statement stands."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = [f"{target}.{a.name}" for a in node.names]
            # ``from package import submodule`` imports the submodule (its package is only
            # initialised on the way, as for any submodule); ``from module import name``, the module.
            targets = subs + ([target] if any(s not in known for s in subs) else [])
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t.startswith("coordinator") and t != name and t != "coordinator":
                found.add(t)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_no_module_imports_one_that_imports_it_back():
    g = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:          # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    assert circles == [], f"modules that import each other: {circles}"


def test_the_core_imports_nothing_above_it():
    up = {name: sorted(t for t in targets if not t.startswith("coordinator.core"))
          for name, targets in graph().items() if name.startswith("coordinator.core")}
    assert {k: v for k, v in up.items() if v} == {}


def test_no_two_parts_of_the_coordinator_import_each_other():
    """The parts (core, faces, each capability, the catalogue, services, cli) form layers:
    if one imports another, the other imports nothing of it (sweeps once reached up into
    nodes for identity while nodes imported sweeps; review borrowed from sweeps' leases)."""
    def part(module: str) -> str:
        return module.split(".")[1] if module.count(".") else module

    arrows = {(part(a), part(b)) for a, targets in graph().items() for b in targets if part(a) != part(b)}
    both = sorted({tuple(sorted(pair)) for pair in arrows if (pair[1], pair[0]) in arrows})
    assert both == [], f"parts that import each other: {both}"
