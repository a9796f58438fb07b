"""The package graph of src/solforge: no cycle, and the bottom packages stay at the bottom.

The graph has an edge A -> B when a module of package A imports a module of package B (at any
depth, including imports inside functions). A cycle between packages means neither can be read,
tested or replaced without the other.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import solforge

SRC = Path(solforge.__file__).resolve().parent
# Packages that may import nothing of solforge but these (the formats, measurement, scores).
BOTTOM = {"errors": set(), "pysyntax": set(), "data": {"errors", "pysyntax"},
          "score": {"errors", "data"}, "measure": {"errors", "data"}}


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[0] in ("problems", "solutions"):  # package data, not code
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(("solforge", *parts)), path


def _imported(module: str, path: Path) -> Iterator[str]:
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _top(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "solforge" and len(parts) > 1 else None


@functools.cache
def package_graph() -> dict[str, set[str]]:
    """Top-level package (or module) of solforge -> those it imports."""
    known = {name for name, _ in _modules()}
    graph: dict[str, set[str]] = {}
    for module, path in _modules():
        source = _top(module)
        if source is None:
            continue
        targets = graph.setdefault(source, set())
        for name in _imported(module, path):
            target = _top(name)
            if name in known and target is not None and target != source:
                targets.add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for child in sorted(graph.get(node, ())):
            if state.get(child) == 1:
                return [*path[path.index(child):], child]
            if child not in state and (cycle := visit(child)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_one_and_only_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_package_graph_has_no_cycle():
    graph = package_graph()
    assert {"data", "measure", "harness", "hardware", "score"} <= set(graph)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or ())


def test_bottom_packages_import_only_what_lies_below_them():
    graph = package_graph()
    for package, allowed in BOTTOM.items():
        assert graph.get(package, set()) <= allowed, (package, graph[package] - allowed)


def test_solforge_parses_python_only_through_the_serialised_parser():
    """A bare `ast.parse` beside the thread pools can fail on valid source (see pysyntax)."""
    bare = []
    for module, path in _modules():
        if module == "solforge.pysyntax":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr in ("parse", "literal_eval")
                    and isinstance(node.value, ast.Name) and node.value.id == "ast"):
                bare.append(f"{module}:{node.lineno}")
    assert not bare
