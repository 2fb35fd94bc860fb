"""The package's layout rules, checked on the source: the judging core knows no
Kafka client, the stream contract knows none either, test support stays out of
the wheel, no module imports itself back through others, no module grows past
400 lines. (README "Layout" describes the wings these rules keep apart.)"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "guardrail"
KAFKA_CLIENTS = ("aiokafka", "faust", "mode")
MAX_LINES = 400


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in the file (also inside functions
    and ``TYPE_CHECKING`` blocks: a circle through those is still a circle)."""
    module = _module_name(path)
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
def _modules() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def _root_modules() -> set[str]:
    """The modules at ``guardrail/*.py`` (the judging core and the file runs)."""
    return {_module_name(p) for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}


def test_root_modules_the_stream_contract_formats_and_review_import_no_kafka_client():
    pure = ("guardrail.stream", "guardrail.formats", "guardrail.review")
    offenders = {
        name: sorted(i for i in imports if i.split(".")[0] in KAFKA_CLIENTS)
        for name, imports in _modules().items()
        if (name in _root_modules() or name.startswith(pure))
        and name != "guardrail.review.labels_topic"  # reads the labels topic (README Layout)
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_judging_core_does_not_reach_into_the_streaming_wings():
    wings = ("guardrail.stream", "guardrail.kafka", "guardrail.agents", "guardrail.demo",
             "guardrail.cli", "guardrail.local", "guardrail.testing")
    offenders = {name: sorted(i for i in imports if i.startswith(wings))
                 for name, imports in _modules().items() if name in _root_modules()}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_no_test_support_ships_in_the_package():
    names = {p.stem for p in PACKAGE.rglob("*.py")}
    assert not names & {"harness", "faults", "input_faults"}
    importers = {name for name, imports in _modules().items()
                 if any(i.split(".")[0] in ("pytest", "tests") for i in imports)}
    assert importers == set()


def test_no_import_circles():
    graph = {name: {i for i in imports if i in _modules()} - {name}
             for name, imports in _modules().items()}
    # A package imports its own submodules to re-export them; that is not a
    # circle back into it, so edges from a package to what lies inside it are left out.
    graph = {name: {t for t in targets if not t.startswith(name + ".")}
             for name, targets in graph.items()}
    circles = [c for c in _strongly_connected(graph) if len(c) > 1]
    assert circles == []


def test_no_module_over_400_lines():
    sizes = {str(p.relative_to(PACKAGE.parent)): len(p.read_text(encoding="utf-8").splitlines())
             for p in PACKAGE.rglob("*.py")}
    assert {path: n for path, n in sizes.items() if n > MAX_LINES} == {}


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
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
                    work.append((child, iter(sorted(graph[child]))))
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
