"""What the gate benchmarks share: a gate-mode worker's environment, a consumer
that notes when each record reaches a topic, and percentiles.

    env = gate_bench_env(bootstrap, judge.api_base, tmp, judge_concurrency=64)
    arrivals = {}   # case id -> (arrival time, the record)
    await note_arrivals(bootstrap, env.approved, arrivals, expect=1000, timeout=120)
"""

from __future__ import annotations

import argparse
import json
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import (BROKERS, broker_label, meta, new_env, note_arrivals, print_table,
                          running_broker, write_json)

__all__ = ["gate_bench_env", "note_arrivals", "percentile", "keyed_records", "broker_parser",
           "run_and_report"]


def gate_bench_env(bootstrap: str, api_base: str, tmp: Path, **settings: Any) -> Any:
    """A gate-mode worker environment with approved and held topics of its own
    (``env.approved``, ``env.held``), created with the worker's partitions."""
    tag = uuid.uuid4().hex[:8]
    approved, held = f"approved-{tag}", f"held-{tag}"
    env = new_env(bootstrap, api_base, tmp, extra_topics=(approved, held), gate="true",
                  approved_topic=approved, held_topic=held, **settings)
    env.approved, env.held = approved, held
    return env


def keyed_records(n: int, *, keys: int, prefix: str = "g", unsafe_every: int = 13
                  ) -> list[tuple[bytes, bytes, None]]:
    """``n`` case records keyed ``k0`` … in turn, outputs distinct across prefixes too
    (no judgment-cache hits),
    every ``unsafe_every``-th an insult the stand-in judge calls UNSAFE."""
    out = []
    for i in range(n):
        text = (f"you idiot, {prefix} {i}" if unsafe_every and i % unsafe_every == 0
                else f"Here is a helpful, polite answer {prefix}-{i} to your question.")
        value = json.dumps({"case_id": f"{prefix}-{i}", "output": text}).encode()
        out.append((f"k{i % keys}".encode(), value, None))
    return out


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def broker_parser(doc: str) -> argparse.ArgumentParser:
    """A script's options, starting with the two :func:`run_and_report` reads: the
    broker to start (``--broker``), or one to use instead (``--bootstrap``)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--broker", choices=BROKERS, default="embedded")
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    return parser


def run_and_report(name: str, args: Any, measure: Callable[..., dict[str, Any]],
                   rows: Callable[[dict[str, Any], str], list[dict[str, Any]]],
                   **options: Any) -> int:
    """Measure on ``args.broker`` (or ``args.bootstrap``), print the table and write
    ``bench/results/<name>-<broker>[-latest].json``."""
    info = meta()  # load and commit before the run
    with tempfile.TemporaryDirectory() as tmp, \
            running_broker(args.bootstrap, args.broker) as bootstrap:
        r = measure(bootstrap, Path(tmp), **options)
    table = rows(r, broker_label(args.broker))
    print_table(table, info)
    write_json(f"{name}-{args.broker}", {"meta": info, "run": r, "rows": table})
    return 0
