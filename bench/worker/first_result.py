"""Time to the first result after a restart with a lag (issue 39, item 6).

    python bench/worker/first_result.py [--broker embedded|apache] [--lag 5000] [--repeats 3]

A worker starts on an input topic that already holds ``--lag`` cases (a
restart after an outage, its group with nothing committed), with the
stand-in judge answering at once in its own process. Per start:

- ``ready_s``: seconds from ``Popen`` to Faust's ``Ready`` line;
- ``first_result_s``: seconds from ``Popen`` to the first result on the results
  topic (its Kafka timestamp);
- ``cpu_first_20s``: the worker's own CPU seconds (user + system) in its first
  20 s, read from ``/proc``;
- ``results_first_20s``: results written in those 20 s;
- ``all_results_s``: seconds from ``Popen`` to the last result of the lag;
- ``judge_calls`` against ``results`` once the whole lag is judged: a call
  sent twice (a timeout while the event loop was starved) shows as more calls.

Scenarios: ``current`` (prices from the bundled map, litellm never imported
with this judge) and ``litellm_at_start`` (``bench/worker_exp.py``: litellm
imported in a thread once the worker is up, as before). Each start gets fresh
topics and a fresh group. Results go to ``bench/results/first_result-*.json``.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (BROKERS, JudgeProc, broker_label, cases, collect,
                          kill_workers, meta, new_env, produce_values, running_broker,
                          start_process, write_json)

SCENARIOS = {"current": "", "litellm_at_start": "litellm_at_start"}
WINDOW_S = 20.0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _ready_s(log: Path, started_epoch: float) -> float | None:
    for line in log.read_text(errors="replace").splitlines():
        if "[^GuardrailWorker]: Ready" in line:
            stamp = time.mktime(time.strptime(line[1:20], "%Y-%m-%d %H:%M:%S"))
            return round(stamp + int(line[21:24]) / 1000 - started_epoch, 2)
    return None


def one_start(bootstrap: str, scenario: str, lag: int) -> dict[str, Any]:
    with JudgeProc() as judge, tempfile.TemporaryDirectory() as tmp:
        env = new_env(bootstrap, judge.api_base, Path(tmp))
        produce_values(bootstrap, env.topic("input"), cases(lag))
        started_epoch = time.time()
        worker = start_process(env, "guardrail", SCENARIOS[scenario])
        time.sleep(WINDOW_S)
        cpu = _cpu_seconds(worker.pid)
        stamps = collect(bootstrap, env.topic("results"), lag, timeout=300)
        kill_workers(env)
        ready = _ready_s(Path(tmp) / "worker-0.log", started_epoch)
    first = min(stamps) / 1000 - started_epoch if stamps else None
    within = sum(1 for s in stamps if s / 1000 - started_epoch <= WINDOW_S)
    return {"scenario": scenario, "ready_s": ready,
            "first_result_s": round(first, 2) if first is not None else None,
            "all_results_s": round(max(stamps) / 1000 - started_epoch, 2) if stamps else None,
            "cpu_first_20s": round(cpu, 2), "results_first_20s": within,
            "results": len(stamps), "judge_calls": judge.calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", choices=BROKERS, default="embedded")
    parser.add_argument("--bootstrap", default=None, help="a running broker instead")
    parser.add_argument("--lag", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    info = {**meta(), "broker": broker_label(args.broker), "lag": args.lag}
    runs: list[dict[str, Any]] = []
    with running_broker(args.bootstrap, args.broker) as bootstrap:
        for _ in range(args.repeats):  # interleaved: drift in the machine hits both
            for scenario in SCENARIOS:
                runs.append(one_start(bootstrap, scenario, args.lag))
                print(runs[-1], flush=True)
    print(f"\n{info['broker']}, lag {args.lag}, medians of {args.repeats} starts")
    print("| scenario | Ready (s) | first result (s) | lag judged (s) | CPU in first 20 s "
          "| results in first 20 s | judge calls / results |\n|---|---|---|---|---|---|---|")
    for scenario in SCENARIOS:
        mine = [r for r in runs if r["scenario"] == scenario]

        def median(key: str) -> Any:
            values = [r[key] for r in mine if r[key] is not None]
            return round(statistics.median(values), 2) if values else None
        calls = sum(r["judge_calls"] or 0 for r in mine)
        results = sum(r["results"] for r in mine)
        print(f"| {scenario} | {median('ready_s')} | {median('first_result_s')} | "
              f"{median('all_results_s')} | {median('cpu_first_20s')} | "
              f"{median('results_first_20s')} | {calls:,} / {results:,} |")
    path = write_json("first_result", {"info": info, "runs": runs})
    print(f"written: {path}")


if __name__ == "__main__":
    main()
