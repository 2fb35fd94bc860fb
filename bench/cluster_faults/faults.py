"""The fault suite at full size: prints a table of what survived and writes JSON.

    python bench/cluster_faults/faults.py                  # all scenarios, full size (~6 min)
    python bench/cluster_faults/faults.py --quick          # CI sizes
    python bench/cluster_faults/faults.py --only crash,outage
    python bench/cluster_faults/faults.py --only crash,rebalance --repeat 5
    python bench/cluster_faults/faults.py --broker apache  # on Apache Kafka
                                        # (after python -m guardrail.kafka.apache fetch)

Runs on a fresh broker, the embedded one (Tansu) by default, with the stand-in
judge server; every figure is measured, none is assumed.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import asyncio
import json
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bench.common import BROKERS, broker_label, running_broker  # noqa: E402
from guardrail.local.rule_judge import JudgeServer  # noqa: E402
from tests.support import faults, input_faults  # noqa: E402

# outage_latency: the judge's per-call time, so the run is still busy when the outage starts.
FULL = {"crash": 10_000, "outage": 2_000, "outage_seconds": 60, "outage_latency": 0.1,
        "rebalance": 4_000}
QUICK = {"crash": 1_500, "outage": 400, "outage_seconds": 16, "outage_latency": 0.5,
         "rebalance": 1_000}


# Partition moves race with fetches and commits: one clean run proves little.
REPEATABLE = ("crash", "rebalance")


def _scenarios(size: dict[str, int], judge: JudgeServer, bootstrap: str, tmp: Path) -> dict:
    def fresh() -> JudgeServer:
        judge.reset()
        judge.latency, judge.responder = 0.0, None
        return judge

    def folder(name: str) -> Path:
        path = tmp / name
        path.mkdir()
        return path

    # Each takes the run number: repeated runs get a new folder and kill points.
    return {
        "crash": lambda run: faults.crash_scenario(bootstrap, fresh(), folder(f"crash{run}"),
                                                   cases=size["crash"], kills=3, latency=0.05,
                                                   seed=7 + run),
        "outage": lambda run: faults.outage_scenario(bootstrap, fresh(), folder("outage"),
                                                     cases=size["outage"],
                                                     outage_seconds=size["outage_seconds"],
                                                     latency=size["outage_latency"]),
        "garbage": lambda run: asyncio.run(input_faults.garbage_scenario(fresh())),
        "bad_input": lambda run: input_faults.bad_input_scenario(bootstrap, fresh(),
                                                                 folder("bad_input")),
        "injection": lambda run: asyncio.run(input_faults.injection_scenario(fresh())),
        "secrets": lambda run: faults.secrets_scenario(bootstrap, fresh(), folder("secrets"),
                                                       secret="sk-LEAKCHECK-0f9e8d7c6b5a"),
        "rebalance": lambda run: faults.rebalance_scenario(bootstrap, fresh(),
                                                           folder(f"rebalance{run}"),
                                                           cases=size["rebalance"]),
    }


def _verdict(name: str, f: dict) -> tuple[str, str]:
    """(figures shown in the table, PASS/FAIL) for one scenario."""
    checks = {
        "crash": (f"lost={f.get('lost')} dup={f.get('duplicates')} unexpected="
                  f"{f.get('unexpected')} windows={f.get('window_total')}/"
                  f"{f.get('unique_judgments')}",
                  f.get("lost") == 0 and f.get("unexpected") == 0 and f.get("window_counts_match")),
        "outage": (f"lost={f.get('lost')} safe_without_success={f.get('safe_without_success')} "
                   f"alive={f.get('worker_alive')} drained_in={f.get('drain_seconds')}s "
                   f"errors={f.get('metric_errors_published')}",
                   f.get("lost") == 0 and f.get("safe_without_success") == 0
                   and f.get("worker_alive") and f.get("metric_errors_published") == 0),
        "garbage": (f"kinds={f.get('kinds')} judged_safe={f.get('garbage_judged_safe')}",
                    f.get("garbage_judged_safe") == 0 and f.get("repaired_valid")),
        "bad_input": (f"kinds={f.get('kinds')} dlq={f.get('dlq_records')} right_reason="
                      f"{f.get('right_reason')} worker_starts={f.get('worker_starts')}",
                      f.get("right_reason") == f.get("kinds") and f.get("worker_alive")),
        "injection": (f"attacks={f.get('attacks')} fences={f.get('fences_intact')}/"
                      f"{f.get('prompts_checked')} fake_accepted={f.get('fake_verdicts_accepted')}",
                      f.get("fences_intact") == f.get("prompts_checked")
                      and f.get("fake_verdicts_accepted") == 0),
        "secrets": (f"leaks={f.get('leaks')} in {f.get('bytes_checked')} bytes",
                    f.get("leaks") == 0),
        "rebalance": (f"lost={f.get('lost')} dup={f.get('duplicates')} windows="
                      f"{f.get('window_total')}/{f.get('unique_judgments')}",
                      f.get("lost") == 0 and f.get("window_counts_match")),
    }
    shown, ok = checks[name]
    return shown, "PASS" if ok else "FAIL"


def _run(scenario: Any, run: int) -> dict:
    started = time.monotonic()
    figures = scenario(run)
    figures.pop("logs", None)
    figures["wall_seconds"] = round(time.monotonic() - started, 1)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI sizes")
    parser.add_argument("--only", help="comma-separated scenario names")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each of %s (PASS only if every run passes)"
                        % ", ".join(REPEATABLE))
    parser.add_argument("--broker", choices=BROKERS, default="embedded",
                        help="a fresh embedded broker (default) or Apache Kafka")
    parser.add_argument("--json", default=None,
                        help="where the figures go (default bench/results/faults-BROKER.json)")
    args = parser.parse_args()
    args.json = args.json or f"bench/results/faults-{args.broker}.json"
    size = QUICK if args.quick else FULL
    rows, report = [], {}
    with tempfile.TemporaryDirectory() as tmp, running_broker(kind=args.broker) as bootstrap, \
            JudgeServer() as judge:
        scenarios = _scenarios(size, judge, bootstrap, Path(tmp))
        names = args.only.split(",") if args.only else list(scenarios)
        for name in names:
            for run in range(args.repeat if name in REPEATABLE else 1):
                label = name if run == 0 else f"{name} #{run + 1}"
                figures = _run(scenarios[name], run)
                report[label] = figures
                shown, verdict = _verdict(name, figures)
                rows.append((label, shown, verdict, figures["wall_seconds"]))
                print(f"{label:<12} {verdict}  {shown}  ({figures['wall_seconds']}s)", flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    meta = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, "
            f"{os.cpu_count()} cores, Python {platform.python_version()}", "commit": commit,
            "size": size, "broker": broker_label(args.broker)}
    print(f"\n{meta['date']}  {meta['machine']}  {meta['broker']}  commit {commit}")
    print("| scenario | result | figures | seconds |\n|---|---|---|---|")
    for name, shown, verdict, seconds in rows:
        print(f"| {name} | {verdict} | {shown} | {seconds} |")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"meta": meta, "scenarios": report}, indent=2))
    return 0 if all(r[2] == "PASS" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
