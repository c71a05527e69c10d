"""DESIGN.md's layering, checked on the source.

* Packages: features <- models <- predictor <- serving. Each may import only itself and the packages
  below it; `predictor serve` lives in `serving.cli` and reaches the command line through the
  `predictor.commands` entry point, never through an import statement.
* Inside `predictor/`: capacity < policy < engine < store < queue < {adapters, sim, nodeinfo} < tune < cli.
  A subpackage imports only subpackages earlier in that order (siblings of one rank not each other).
  ``tune`` ranks above ``sim`` and ``adapters``: it searches policies by replaying them (sim) and writes
  the chosen one out through the Slurm and Kueue generators (adapters).
* No import cycle between modules, counting every import: at module level, inside functions and
  under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["features", "models", "predictor", "serving"]
PREDICTOR_ORDER = {"capacity": 0, "policy": 1, "engine": 2, "store": 3, "queue": 4, "adapters": 5, "sim": 5,
                   "nodeinfo": 5, "tune": 6, "cli": 7}


@cache
def _modules() -> dict[str, Path]:
    found = {}
    for layer in LAYERS:
        for path in (ROOT / layer).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _resolve(name: str) -> str | None:
    """The module of ours that a dotted name (module, or module.attribute) refers to."""
    mods = _modules()
    while name:
        if name in mods:
            return name
        name = name.rpartition(".")[0]
    return None


@cache
def _edges() -> dict[str, frozenset[str]]:
    edges = {}
    for mod, path in _modules().items():
        package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
                # "from pkg import sub" depends on pkg.sub; "from mod import name" on mod
                names = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            out.update(r for r in map(_resolve, names) if r is not None and r != mod)
        edges[mod] = frozenset(out)
    return edges


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_no_upward_imports(layer: str) -> None:
    forbidden = set(LAYERS[LAYERS.index(layer) + 1 :])
    offenders = []
    for path in sorted((ROOT / layer).rglob("*.py")):
        bad = _imports(path) & forbidden
        if bad:
            offenders.append(f"{path.relative_to(ROOT)} imports {', '.join(sorted(bad))}")
    assert not offenders, "upward imports break DESIGN.md's layering:\n" + "\n".join(offenders)


def test_predictor_subpackages_import_in_order() -> None:
    offenders = []
    for mod, outs in sorted(_edges().items()):
        parts = mod.split(".")
        if parts[0] != "predictor" or len(parts) < 2 or parts[1] in ("__main__",):
            continue
        assert parts[1] in PREDICTOR_ORDER, f"predictor.{parts[1]} has no place in DESIGN.md's order"
        for target in sorted(outs):
            tparts = target.split(".")
            if tparts[0] != "predictor" or len(tparts) < 2 or tparts[1] == parts[1]:
                continue
            if PREDICTOR_ORDER[tparts[1]] >= PREDICTOR_ORDER[parts[1]]:
                offenders.append(f"{mod} imports {target}")
    assert not offenders, "imports against DESIGN.md's order inside predictor/:\n" + "\n".join(offenders)


def _cycles(edges: dict[str, frozenset[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_import_cycles() -> None:
    cycles = _cycles(_edges())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycles({"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset()}) == [
        ["a", "b", "c"]]
