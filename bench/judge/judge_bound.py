"""2. Judge-bound throughput: a slow judge, C calls in flight; how close to C / latency?

    python bench/judge/judge_bound.py [--latency-ms 200] [--concurrency 16,128] [--seconds 20]
                                [--judge-calls per_message|per_metric]

Each worker gets a backlog and ``judge_concurrency`` C; the judge (its own
process) answers after ``--latency-ms``. The limit is C / latency judge calls
per second, i.e. C / latency / calls-per-message messages per second (one
call per message by default; two, one per default metric, with
``--judge-calls per_metric``). msgs/s come from the result records'
timestamps; judge calls/s are counted by the judge process per wall-clock
second over the same span. Target: >= 0.9 of the limit.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import tempfile
from pathlib import Path
from typing import Any

from bench.common import (kill_workers, JudgeProc, Stopwatch, cases, collect, meta, new_env,
                          print_table, produce_values, row, running_broker, start_process,
                          steady_rate, write_json)

#: Judge calls per message with the default metrics (bias + toxicity).
CALLS_PER_MESSAGE = {"per_message": 1, "per_metric": 2}
SKIP = 2.0
#: Results come a batch at a time; a longer silence starts a new burst.
BURST_GAP_MS = 100


def run_one(bootstrap: str, tmp: Path, *, latency_ms: float, concurrency: int,
            seconds: float, experiment: str = "", judge_calls: str = "per_message",
            **settings: Any) -> dict[str, Any]:
    per_message = CALLS_PER_MESSAGE[judge_calls]
    limit_calls = concurrency / (latency_ms / 1000)
    backlog = int(limit_calls / per_message * (seconds + SKIP + 10))  # never runs dry
    folder = tmp / f"c{concurrency}"
    folder.mkdir(parents=True, exist_ok=True)
    clock = Stopwatch()
    with JudgeProc(latency_ms) as judge:
        env = new_env(bootstrap, judge.api_base, folder, judge_concurrency=concurrency,
                      judge_calls=judge_calls, **settings)
        produce_values(bootstrap, env.topic("input"), cases(backlog, prefix=f"c{concurrency}"))
        start_process(env, "guardrail", experiment)
        try:
            stamps = collect(bootstrap, env.topic("results"), backlog, 300,
                             seconds=SKIP + seconds)
        finally:
            kill_workers(env)
    steady = steady_rate(stamps, SKIP, seconds, burst_gap_ms=BURST_GAP_MS)
    t0 = steady.get("start_ms", 0)  # the judge's calls over the span the results were counted
    calls = judge.calls_per_s(t0, t0 + steady["span_s"] * 1000)
    return {"latency_ms": latency_ms, "concurrency": concurrency, "experiment": experiment,
            "judge_calls": judge_calls, "limit_calls_per_s": limit_calls,
            "limit_msgs_per_s": limit_calls / per_message,
            "msgs_per_s": steady["rate"], "judge_calls_per_s": calls,
            "measured_records": steady["records"], "measured_seconds": steady["span_s"],
            "backlog": backlog, "wall_seconds": clock.seconds}


def measure(bootstrap: str, tmp: Path, *, latency_ms: float = 200,
            concurrencies: tuple[int, ...] = (16, 128), seconds: float = 20,
            experiment: str = "", judge_calls: str = "per_message") -> list[dict[str, Any]]:
    runs = []
    for c in concurrencies:
        r = run_one(bootstrap, tmp, latency_ms=latency_ms, concurrency=c, seconds=seconds,
                    experiment=experiment, judge_calls=judge_calls)
        print(f"  judge-bound C={c:<4} {r['msgs_per_s']:7.1f} msgs/s, "
              f"{r['judge_calls_per_s'] or 0:7.1f} calls/s of {r['limit_calls_per_s']:.0f} "
              f"({r['wall_seconds']}s wall)", flush=True)
        runs.append(r)
    return runs


def rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in runs:
        ratio = r["msgs_per_s"] / r["limit_msgs_per_s"]
        calls = r["judge_calls_per_s"]
        out.append(row(f"2 judge-bound C={r['concurrency']}, {r['latency_ms']:.0f} ms, "
                       f"{r.get('judge_calls', 'per_metric')}",
                       f"{r['msgs_per_s']:.1f} msgs/s, "
                       f"{'?' if calls is None else f'{calls:.0f}'} calls/s "
                       f"(limit {r['limit_calls_per_s']:.0f} calls/s)",
                       ">= 0.9x limit", ratio, ratio >= 0.9))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=200)
    parser.add_argument("--concurrency", default="16,128")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--experiment", default="", help="patch from bench/worker_exp.py")
    parser.add_argument("--bootstrap", help="use this broker instead of an embedded one")
    parser.add_argument("--judge-calls", choices=tuple(CALLS_PER_MESSAGE), default="per_message")
    args = parser.parse_args()
    info = meta()  # load and commit before the run
    with tempfile.TemporaryDirectory() as tmp, running_broker(args.bootstrap) as bootstrap:
        runs = measure(bootstrap, Path(tmp), latency_ms=args.latency_ms, seconds=args.seconds,
                       concurrencies=tuple(int(c) for c in args.concurrency.split(",")),
                       experiment=args.experiment, judge_calls=args.judge_calls)
    table = rows(runs)
    print_table(table, info)
    write_json("judge_bound", {"meta": info, "runs": runs, "rows": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
