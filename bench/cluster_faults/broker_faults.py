"""Broker faults on a three-node Apache Kafka cluster: prints what survived.

    python bench/cluster_faults/broker_faults.py                       # every fault (~10 min)
    python bench/cluster_faults/broker_faults.py --only input_leader,two_down --cases 2000

Starts a three-node KRaft cluster (replication 3, min.insync.replicas 2) from
the fetched jars (``python -m guardrail.kafka.apache fetch``), and for each
fault runs one worker with the stand-in judge (50 ms a call) on a few thousand
cases: lost, doubled, windows exact, the worker alive and never restarted, and
how long results stopped. Writes bench/results/broker_faults-latest.json.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bench.common import meta, write_json  # noqa: E402
from guardrail.kafka.apache import ApacheKafkaCluster, unavailable_reason  # noqa: E402
from guardrail.local.rule_judge import JudgeServer  # noqa: E402
from tests.support.broker_faults import FAULTS, broker_fault_scenario  # noqa: E402


#: The workers' Kafka trouble interval: shorter than the faults, so each is reported.
TROUBLE_SECONDS = 10


def passed(f: dict[str, Any]) -> bool:
    """No loss, nothing unexpected, each message counted once, the worker alive
    throughout (one start), and with two nodes down no result while down."""
    return (f["finished"] and f["lost"] == 0 and f["unexpected"] == 0
            and f["window_counts_match"] and f["worker_alive"] and f["worker_starts"] == 1
            and f.get("results_while_down", 0) == 0 and _said_why(f))


def _said_why(f: dict[str, Any]) -> bool:
    """With two nodes down: a trouble report in the log and on /metrics, and
    its end once the cluster is back."""
    if f["scenario"] != "two_down":
        return True
    return (f["trouble_reports"] >= 1 and f["trouble_over"] >= 1
            and f["metrics_while_down"]["trouble"] == 1)


def shown(f: dict[str, Any]) -> str:
    down = f" results while down={f['results_while_down']}" if "results_while_down" in f else ""
    return (f"lost={f['lost']} dup={f['duplicates']} windows={f['window_total']}/"
            f"{f['unique_judged']} alive={f['worker_alive']} starts={f['worker_starts']}"
            f" stopped {f['longest_gap_s']}s, flowing again {f['flowing_again_s']}s after the"
            f" fault{down}; trouble reports={f['trouble_reports']} over={f['trouble_over']}"
            f" client ERROR lines={f['error_lines']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated faults: " + ",".join(FAULTS))
    parser.add_argument("--cases", type=int, default=4000)
    parser.add_argument("--latency", type=float, default=0.05, help="judge seconds per call")
    parser.add_argument("--workdir", help="keep the cluster's and workers' logs here")
    args = parser.parse_args()
    if reason := unavailable_reason():
        print(f"Apache Kafka unavailable: {reason}", file=sys.stderr)
        return 2
    info = meta()
    names = args.only.split(",") if args.only else list(FAULTS)
    report: dict[str, Any] = {}
    kept = contextlib.nullcontext(args.workdir) if args.workdir else None
    with kept or tempfile.TemporaryDirectory() as tmp, JudgeServer() as judge:
        cluster = ApacheKafkaCluster(workdir=Path(tmp) / "cluster", size=3).start()
        try:
            for name in names:
                started = time.monotonic()
                (Path(tmp) / name).mkdir(parents=True)
                figures = broker_fault_scenario(cluster, judge, Path(tmp) / name, fault=name,
                                                cases=args.cases, latency=args.latency,
                                                kafka_trouble_seconds=TROUBLE_SECONDS)
                logs = figures.pop("logs")
                (Path(tmp) / name / "worker.log").write_text(logs)
                figures["wall_seconds"] = round(time.monotonic() - started, 1)
                figures["passed"] = passed(figures)
                report[name] = figures
                print(f"{name:<15} {'PASS' if figures['passed'] else 'FAIL'}  "
                      f"{shown(figures)}  ({figures['wall_seconds']}s)", flush=True)
                if not figures["passed"]:
                    print(logs[-4000:], file=sys.stderr)
        finally:
            cluster.stop(timeout=5)
    print(json.dumps({k: {f: v for f, v in r.items() if not isinstance(v, dict)}
                      for k, r in report.items()}, indent=1))
    write_json("broker_faults", {"meta": info, "cases": args.cases, "latency": args.latency,
                                 "scenarios": report})
    return 0 if all(r["passed"] for r in report.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
