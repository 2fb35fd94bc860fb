"""Replay throughput: ``guardrail replay`` of a backlog, first pass and cached pass.

    flock /tmp/guardrail-bench.lock python bench/replay_batch/replay.py \\
        [--messages 30000] [--broker apache]
    ... --no-worker          # skip the worker's run on the same input (ceiling.py's)
    ... --profile            # cProfile each pass (bench/results/profile-replay-*.txt)
    ... --cached-passes 3    # the cached pass three times (its spread; A/B of two versions)
    ... --processes 2        # replay --processes 2 (the partitions dealt to two processes)

A backlog of ``--messages`` distinct cases (no cache hits among them), the
stand-in judge answering at once in its own process. ``guardrail replay
--from 0`` runs twice into fresh results topics with one cache file: the first
pass judges every case, the second finds every judgment in the cache and calls
no judge. Each pass's rate is taken from its results' Kafka timestamps, from
1 s after the first (as for the worker, :func:`common.steady_rate`); the wall
time of the command (start-up included) is given beside it. The worker's rate
on the same kind of input is ceiling.py's measurement, run here too.

Targets (issue 39): first pass >= the worker's rate; cached pass >= 10,000 msgs/s.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import json
import pstats
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.worker import ceiling
from bench.common import (BROKERS, PY, RESULTS, JudgeProc, broker_label, cases, collect, meta,
                          new_env, print_table, produce_values, row, running_broker, steady_rate,
                          write_json)

CACHED_TARGET = 10_000.0


def run_pass(env: Any, name: str, n: int, *, profile: bool, timeout: float,
             processes: int = 1) -> dict[str, Any]:
    """One ``guardrail replay --from 0`` into its own results topic; its rates."""
    topic = f"{env.topic('results')}-{name}"
    command = [shutil.which("guardrail") or "guardrail", "replay", "--from", "0",
               "--results-topic", topic, "--processes", str(processes)]
    if profile:
        out = RESULTS / f"profile-replay-{name}.pstats"
        RESULTS.mkdir(parents=True, exist_ok=True)
        command = [PY, "-m", "cProfile", "-o", str(out), *command]
    started, cpu = time.monotonic(), _children_cpu()
    proc = subprocess.run(command, env=env.env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    wall, cpu = time.monotonic() - started, _children_cpu() - cpu
    if proc.returncode != 0:
        raise RuntimeError(f"replay {name} failed: {proc.stderr[-2000:]}")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    stamps = collect(env.bootstrap, topic, n, timeout)
    steady = steady_rate(stamps, 1.0)
    out_run = {"pass": name, "command": " ".join(command[-6:]), "msgs_per_s": steady["rate"],
               "measured_records": steady["records"], "measured_seconds": steady["span_s"],
               "wall_seconds": round(wall, 1), "wall_msgs_per_s": round(n / wall, 1),
               # The command's own CPU (start-up included), not the broker's.
               "cpu_seconds": round(cpu, 2), "cpu_ms_per_msg": round(cpu * 1000 / n, 3),
               "results": summary["results"], "judged": summary["judged"],
               "cached": summary["cached"], "errors": summary["errors"],
               "progress_tail": proc.stderr.strip().splitlines()[-3:]}
    if profile:
        _show_profile(RESULTS / f"profile-replay-{name}.pstats")
    return out_run


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _show_profile(path: Path) -> None:
    text = RESULTS / (path.stem + ".txt")
    with text.open("w") as stream:
        stats = pstats.Stats(str(path), stream=stream).sort_stats("tottime")
        stats.print_stats(40)
        stats.sort_stats("cumulative").print_stats(60)
    print(f"  profile: {text}")


def measure(bootstrap: str, api_base: str, tmp: Path, n: int, *, profile: bool = False,
            cached_passes: int = 1, timeout: float = 900, processes: int = 1) -> dict[str, Any]:
    env = new_env(bootstrap, api_base, tmp / "replay",
                  cache_path=tmp / "replay" / "judgments.sqlite")
    produce_values(bootstrap, env.topic("input"), cases(n, prefix="replay"))
    runs = {}
    extra = [f"cached{k}" for k in range(2, cached_passes + 1)]
    for name in ("first", "cached", *extra):
        runs[name] = r = run_pass(env, name, n, profile=profile, timeout=timeout,
                                  processes=processes)
        print(f"  replay {name:<8} {r['msgs_per_s']:8.0f} msgs/s  ({r['measured_records']} "
              f"records in {r['measured_seconds']}s; {r['wall_seconds']}s wall, "
              f"{r['cpu_ms_per_msg']} ms CPU/msg, "
              f"judged {r['judged']}, cached {r['cached']})", flush=True)
    return runs


def rows(runs: dict[str, Any], worker: float | None) -> list[dict[str, Any]]:
    first, cached = runs["first"]["msgs_per_s"], runs["cached"]["msgs_per_s"]
    ratio = first / worker if worker else None
    return [
        row("replay, first pass, instant judge / the worker's rate",
            f"{first:.0f} vs {worker:.0f} msgs/s" if worker else f"{first:.0f} msgs/s",
            ">= 1.0x the worker", ratio, None if ratio is None else ratio >= 1.0),
        row("replay, cached pass (no judge call)", f"{cached:.0f} msgs/s",
            f">= {CACHED_TARGET:,.0f} msgs/s", cached / CACHED_TARGET, cached >= CACHED_TARGET),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=30_000, help="backlog size")
    parser.add_argument("--broker", choices=BROKERS, default="embedded")
    parser.add_argument("--bootstrap", help="use this broker instead of a fresh one")
    parser.add_argument("--no-worker", action="store_true", help="skip the worker's run")
    parser.add_argument("--profile", action="store_true", help="cProfile each replay pass")
    parser.add_argument("--cached-passes", type=int, default=1,
                        help="cached passes to run (the table reports the first)")
    parser.add_argument("--processes", type=int, default=1, help="replay --processes")
    args = parser.parse_args()
    info = meta()
    info["broker"] = args.bootstrap or broker_label(args.broker)
    with tempfile.TemporaryDirectory() as tmp, \
            running_broker(args.bootstrap, args.broker) as bootstrap, JudgeProc(0) as judge:
        runs = measure(bootstrap, judge.api_base, Path(tmp), args.messages, profile=args.profile,
                       cached_passes=args.cached_passes, processes=args.processes)
        worker = None
        if not args.no_worker:
            runs["worker"] = w = ceiling.run_kind("guardrail", bootstrap, judge.api_base,
                                                  Path(tmp), args.messages)
            worker = w["msgs_per_s"]
            print(f"  worker         {worker:8.0f} msgs/s  ({w['measured_records']} records "
                  f"in {w['measured_seconds']}s)", flush=True)
    table = rows(runs, worker)
    print_table(table, info)
    write_json(f"replay-{args.broker}", {"meta": info, "runs": runs, "rows": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
