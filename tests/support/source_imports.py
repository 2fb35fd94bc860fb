"""What each module of the package imports, read from its source (no import runs),
for the layout and layer rules (``tests/test_layout.py``, ``tests/test_layers.py``)::

    modules()["guardrail.stream.processing"]   # {"guardrail.judging.evaluate", "asyncio", ...}
    strongly_connected({"a": {"b"}, "b": {"a"}})   # [["b", "a"]]
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from .paths import ROOT

__all__ = ["PACKAGE", "module_name", "imports", "modules", "strongly_connected"]

PACKAGE = ROOT / "guardrail"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in the file (also inside functions
    and ``TYPE_CHECKING`` blocks: a circle through those is still a circle); for
    ``from m import n``, both ``m`` and ``m.n`` (``n`` may be a module)."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


@functools.cache
def modules() -> dict[str, frozenset[str]]:
    """Every module of the package → what it imports."""
    return {module_name(p): frozenset(imports(p)) for p in sorted(PACKAGE.rglob("*.py"))}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iteratively (the graph is small; recursion would do too)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
    return components
