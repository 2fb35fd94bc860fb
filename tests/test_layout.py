"""The package's module rules, checked on the source: the wings below the worker
import no Kafka client, test support stays out of the wheel, no module imports
itself back through others, no module grows past 400 lines. (How the wings stack
is ``tests/test_layers.py``'s.)"""

from __future__ import annotations

from support.source_imports import PACKAGE, modules, strongly_connected

KAFKA_CLIENTS = ("aiokafka", "faust", "mode")
MAX_LINES = 400
#: The wings that read and judge records, whoever moves them: no Kafka client.
PURE_WINGS = ("judging", "judges", "providers", "formats", "assembly", "review", "stream",
              "batch_api", "batch", "calibration", "config")


def test_the_wings_that_read_and_judge_records_import_no_kafka_client():
    pure = tuple(f"guardrail.{wing}" for wing in PURE_WINGS)
    offenders = {
        name: sorted(i for i in found if i.split(".")[0] in KAFKA_CLIENTS)
        for name, found in modules().items()
        if name.startswith(pure)
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_no_test_support_ships_in_the_package():
    names = {p.stem for p in PACKAGE.rglob("*.py")}
    assert not names & {"harness", "faults", "input_faults"}
    importers = {name for name, found in modules().items()
                 if any(i.split(".")[0] in ("pytest", "tests", "support") for i in found)}
    assert importers == set()


def test_no_import_circles():
    graph = {name: {i for i in found if i in modules()} - {name}
             for name, found in modules().items()}
    # A package imports its own submodules to re-export them; that is not a
    # circle back into it, so edges from a package to what lies inside it are left out.
    graph = {name: {t for t in targets if not t.startswith(name + ".")}
             for name, targets in graph.items()}
    circles = [c for c in strongly_connected(graph) if len(c) > 1]
    assert circles == []


def test_no_module_over_400_lines():
    sizes = {str(p.relative_to(PACKAGE.parent)): len(p.read_text(encoding="utf-8").splitlines())
             for p in PACKAGE.rglob("*.py")}
    assert {path: n for path, n in sizes.items() if n > MAX_LINES} == {}
