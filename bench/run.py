"""All six benchmarks of issue 5 in one run: one table, one JSON file.

    python bench/run.py                       # ~7-9 min on 2 cores
    python bench/run.py --only ceiling,tokens
    python bench/run.py --experiment litellm   # compare: the judge through litellm
    python bench/run.py --profile             # py-spy the ceiling workers too

One embedded broker (Tansu) for the whole run, unique topics per measurement,
the stand-in judge in its own process. The latency run paces at half the
judge-bound rate measured just before it (default concurrency). Writes
bench/results/run-<stamp>.json (and run-latest.json).
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import tempfile
from pathlib import Path
from typing import Any

from bench import profiling as prof
from bench.cluster_faults import scale_out
from bench.common import JudgeProc, Stopwatch, meta, print_table, running_broker, write_json
from bench.judge import judge_bound, tokens
from bench.worker import ceiling, latency, memory

MEASURES = ("ceiling", "judge_bound", "latency", "tokens", "memory", "scale_out")


def _ceiling(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    with JudgeProc(0) as judge:
        runs = ceiling.measure(ctx["bootstrap"], judge.api_base, ctx["tmp"] / "ceiling",
                               ctx["args"].ceiling_messages, seconds=20,
                               profile=ctx["args"].profile, experiment=ctx["experiment"])
    for r in runs.values():
        if r.get("profile"):
            prof.show(r["profile"], f"ceiling {r['kind']}")
    ctx["report"]["ceiling"] = runs
    return ceiling.rows(runs)


def _judge_bound(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    runs = judge_bound.measure(ctx["bootstrap"], ctx["tmp"] / "judge", latency_ms=200,
                               concurrencies=(16, 128), seconds=15,
                               experiment=ctx["experiment"])
    ctx["report"]["judge_bound"] = runs
    ctx["max_rate"] = runs[0]["msgs_per_s"]
    return judge_bound.rows(runs)


def _latency(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    max_rate = ctx.get("max_rate") or 16 / 0.2  # one judge call per message
    r = latency.measure(ctx["bootstrap"], ctx["tmp"] / "latency", latency_ms=200,
                        max_rate=max_rate, seconds=20, experiment=ctx["experiment"])
    ctx["report"]["latency"] = r
    return latency.rows(r)


def _tokens(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    runs = tokens.measure(("per_message", "per_metric"))
    tokens.show(runs)
    ctx["report"]["tokens"] = runs
    return tokens.rows(runs)


def _memory(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    r = memory.measure(ctx["bootstrap"], ctx["tmp"] / "memory", n=ctx["args"].memory_messages,
                       pool=ctx["args"].memory_pool, experiment=ctx["experiment"])
    ctx["report"]["memory"] = r
    return memory.rows(r)


def _scale_out(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    r = scale_out.measure(ctx["bootstrap"], ctx["tmp"] / "scale", latency_ms=200,
                          concurrency=16, seconds=15, experiment=ctx["experiment"])
    ctx["report"]["scale_out"] = r
    return scale_out.rows(r)


STEPS = {"ceiling": _ceiling, "judge_bound": _judge_bound, "latency": _latency,
         "tokens": _tokens, "memory": _memory, "scale_out": _scale_out}


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(MEASURES)}")
    parser.add_argument("--experiment", default="",
                        help="patch(es) from bench/worker_exp.py applied to every worker")
    parser.add_argument("--profile", action="store_true", help="py-spy the ceiling workers")
    parser.add_argument("--ceiling-messages", type=int, default=20_000)
    parser.add_argument("--memory-messages", type=int, default=100_000)
    parser.add_argument("--memory-pool", type=int, default=1000,
                        help="distinct outputs in the memory run (0: all distinct)")
    parser.add_argument("--bootstrap", help="use this broker instead of an embedded one")
    return parser.parse_args()


def main() -> int:
    args = _args()
    names = args.only.split(",") if args.only else list(MEASURES)
    info = {**meta(), "experiment": args.experiment}
    clock = Stopwatch()
    table: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, running_broker(args.bootstrap) as bootstrap:
        ctx: dict[str, Any] = {"bootstrap": bootstrap, "tmp": Path(tmp), "args": args,
                               "experiment": args.experiment, "report": {}}
        for name in names:
            (ctx["tmp"] / name).mkdir(exist_ok=True)
            step = Stopwatch()
            print(f"== {name}", flush=True)
            table += STEPS[name](ctx)
            print(f"   ({step.seconds}s)", flush=True)
    info["wall_seconds"] = clock.seconds
    print_table(table, info)
    print(f"\nwall time {info['wall_seconds']}s"
          + (f"; experiment {args.experiment}" if args.experiment else ""))
    path = write_json("run", {"meta": info, "rows": table, **ctx["report"]})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
