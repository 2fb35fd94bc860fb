"""The wings of the package and their layers, checked on the source.

The table in ``guardrail/__init__.py``'s docstring is the architecture: each wing
(a subpackage) on a layer, and the root's own modules on layer 0. These tests keep
the code to it: every wing is in the table, says what it is for and lists its
public names, imports only wings of lower layers (an exception is named, with its
reason, in the importing wing's docstring under "Upward imports:"), so the wings
form no cycle; the root holds only the wings' shared helpers.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict

from support.source_imports import PACKAGE, modules, strongly_connected

from guardrail.reference.architecture import layer_rows

#: Root helpers: private, small, for every wing (``errors`` is the one public module).
ROOT_HELPER_LINES = 150


def _docstring(path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def _layers() -> dict[str, int]:
    """Wing → layer, from the table; the root's modules → 0."""
    table = {row.wing: row.layer for row in layer_rows() if row.wing != "(root)"}
    for module in _root_modules():
        table[module] = 0
    return table


def _wings() -> set[str]:
    return {p.parent.name for p in PACKAGE.glob("*/__init__.py")}


def _root_modules() -> set[str]:
    return {p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}


def _wing_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "guardrail" else None


def _upward_named(wing: str) -> set[str]:
    """The ``guardrail.…`` modules a wing's docstring names under "Upward imports:"."""
    text = _docstring(PACKAGE / wing / "__init__.py")
    section = re.search(r"Upward imports?:(.*?)(?:\n\s*\n|\Z)", text, re.S)
    return set(re.findall(r"guardrail(?:\.\w+)+", section.group(1))) if section else set()


def _wing_edges() -> dict[tuple[str, str], set[str]]:
    """(importing wing, imported wing) → the imports that make the edge."""
    known = set(modules())
    edges: dict[tuple[str, str], set[str]] = defaultdict(set)
    for name, found in modules().items():
        source = _wing_of(name)
        if source is None or name == "guardrail":  # the root re-exports the public API
            continue
        for target in found:
            if target not in known:
                continue  # a name inside a module: the module itself is in ``found`` too
            wing = _wing_of(target)
            if wing is not None and wing != source and target != "guardrail":
                edges[source, wing].add(f"{name} -> {target}")
    return edges


def test_the_layer_table_names_every_wing_and_root_module_once():
    text = _docstring(PACKAGE / "__init__.py")
    named = [row.wing for row in layer_rows() if row.wing != "(root)"]
    assert sorted(named) == sorted(_wings()), "a wing missing from the table, or named twice"
    assert {m for m in _root_modules() if f"``{m}``" not in text} == set()


def test_the_root_holds_only_the_exceptions_and_small_private_helpers():
    for module in _root_modules() - {"errors"}:
        lines = len((PACKAGE / f"{module}.py").read_text(encoding="utf-8").splitlines())
        assert module.startswith("_") and lines <= ROOT_HELPER_LINES, (module, lines)


def test_every_wing_says_what_it_is_for_what_it_imports_and_its_public_names():
    missing = {}
    for wing in sorted(_wings()):
        init = PACKAGE / wing / "__init__.py"
        text = _docstring(init)
        tree = ast.parse(init.read_text(encoding="utf-8"))
        assigned = {t.id for node in tree.body if isinstance(node, ast.Assign)
                    for t in node.targets if isinstance(t, ast.Name)}
        lacks = [what for what, ok in (("a docstring of what it is for", len(text) > 200),
                                       ("what it imports", "import" in text),
                                       ("__all__", "__all__" in assigned)) if not ok]
        if lacks:
            missing[wing] = lacks
    assert missing == {}


def _violations(edges: dict[tuple[str, str], set[str]], layers: dict[str, int],
                named: dict[str, set[str]]) -> dict[str, list[str]]:
    """The imports that do not go down a layer and are not named by their wing."""
    wrong = {}
    for (source, target), found in sorted(edges.items()):
        if layers[target] < layers[source] or layers[source] == layers[target] == 0:
            continue  # down a layer, or between the root's own modules
        unnamed = {edge for edge in found
                   if edge.split(" -> ")[1] not in named.get(source, set())}
        if unnamed:
            wrong[f"{source} ({layers[source]}) -> {target} ({layers[target]})"] = sorted(unnamed)
    return wrong


def test_every_import_goes_down_the_layers_or_is_named_with_its_reason():
    named = {wing: _upward_named(wing) for wing in _wings()}
    assert _violations(_wing_edges(), _layers(), named) == {}


def test_the_wings_form_no_cycle():
    graph: dict[str, set[str]] = defaultdict(set)
    for source, target in _wing_edges():
        graph[source].add(target)
    cycles = [sorted(c) for c in strongly_connected(dict(graph)) if len(c) > 1]
    assert cycles == []


def test_the_rule_reads_the_real_imports_and_catches_an_upward_one():
    layers = _layers()
    assert layers["judging"] < layers["stream"] < layers["agents"] and layers["errors"] == 0
    assert ("stream", "judging") in _wing_edges()  # the edges are the package's own
    up = {("judging", "stream"): {"guardrail.judging.x -> guardrail.stream.envelope"},
          ("stream", "judging"): {"guardrail.stream.y -> guardrail.judging.models"}}
    assert list(_violations(up, layers, {})) == [
        f"judging ({layers['judging']}) -> stream ({layers['stream']})"]
    # Named in the importing wing's docstring, the same import passes.
    assert _violations(up, layers, {"judging": {"guardrail.stream.envelope"}}) == {}
    side = {("judges", "formats"): {"guardrail.judges.x -> guardrail.formats.base"}}
    assert layers["judges"] == layers["formats"] and _violations(side, layers, {}) != {}
