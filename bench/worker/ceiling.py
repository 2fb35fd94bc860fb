"""1. Pipeline ceiling: the judge answers instantly; how fast does the pipeline go?

    python bench/worker/ceiling.py [--messages 20000] [--profile] [--set judgment_bundles=false]

The guardrail worker against two baselines on the same kind of topics (same
partition count, same broker options): a bare Faust pass-through agent and a
raw aiokafka consume → produce loop (``bench/worker/passthrough.py``). Each reads a
backlog of ``--messages`` produced before it starts; the rate is taken from
the output records' Kafka timestamps, from 1 s after the first (warm-up) for
at most ``--seconds`` (or to the last); each process's CPU time (user +
system, all threads) over that span gives its CPU per output record. Targets:
guardrail >= 0.8x bare Faust's msgs/s at <= 1.5x its CPU per message.

guardrail does more per message than a copy: two judge HTTP calls through
litellm (bias, toxicity), one result and two judgment events out, and the
window agent consumes the judgment events. That is the point of the ratio.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import tempfile
from pathlib import Path
from typing import Any

from bench import profiling as prof
from bench.common import (BROKERS, CpuPerRecord, kill_workers, RESULTS, JudgeProc, Stopwatch,
                          broker_label, cases, collect, meta, new_env, print_table, produce_values,
                          row, running_broker, start_process, steady_rate, write_json)

KINDS = ("guardrail", "faust", "raw")


SKIP = 1.0
#: How long ``--profile`` samples each worker (``--profile-seconds``).
PROFILE_SECONDS = 10.0


def run_kind(kind: str, bootstrap: str, api_base: str, tmp: Path, n: int, *,
             seconds: float = 20.0, profile: bool = False, timeout: float = 300,
             experiment: str = "", **settings: Any) -> dict[str, Any]:
    """Backlog of ``n`` → start ``kind`` → rate from first to last output record."""
    folder = tmp / kind
    folder.mkdir(parents=True, exist_ok=True)
    env = new_env(bootstrap, api_base, folder, **settings)
    produce_values(bootstrap, env.topic("input"), cases(n, prefix=kind))
    clock = Stopwatch()
    experiment = experiment if kind == "guardrail" else ""
    proc = start_process(env, kind, experiment)
    profiling: list[Any] = []
    cpu = CpuPerRecord(proc.pid, SKIP)

    def progress(count: int) -> None:  # from the first results on: startup excluded
        cpu.sample(count)
        if profile and not profiling and count > 0:
            name = f"profile-ceiling-{kind}{'-' + experiment if experiment else ''}.txt"
            profiling.append(prof.start(proc.pid, PROFILE_SECONDS, RESULTS / name))

    try:
        stamps = collect(bootstrap, env.topic("results"), n, timeout, progress,
                         seconds=SKIP + seconds)
    finally:
        kill_workers(env)
    steady = steady_rate(stamps, SKIP, seconds)
    out = {"kind": kind, "backlog": n, "outputs_read": len(stamps), "msgs_per_s": steady["rate"],
           "measured_records": steady["records"], "measured_seconds": steady["span_s"],
           "wall_seconds": clock.seconds, "experiment": experiment,
           "cpu_ms_per_msg": cpu.ms_per_record}
    if profiling:
        out["profile"] = prof.finish(profiling[0])
    return out


def measure(bootstrap: str, api_base: str, tmp: Path, n: int, *, seconds: float = 20.0,
            profile: bool = False, kinds: tuple[str, ...] = KINDS, experiment: str = "",
            **settings: Any) -> dict[str, Any]:
    runs = {}
    for k in kinds:
        backlog = n * 3 if k == "raw" else n  # the raw loop drains 20k in about a second
        runs[k] = r = run_kind(k, bootstrap, api_base, tmp, backlog, seconds=seconds,
                               profile=profile and k != "raw", experiment=experiment, **settings)
        cpu = r["cpu_ms_per_msg"]
        print(f"  ceiling {k:<9} {r['msgs_per_s']:8.0f} msgs/s  "
              f"{'-' if cpu is None else f'{cpu:.3f}'} ms CPU/msg  ({r['measured_records']} "
              f"records in {r['measured_seconds']}s; {r['wall_seconds']}s wall)", flush=True)
    return runs


def rows(runs: dict[str, Any]) -> list[dict[str, Any]]:
    g, f, r = (runs.get(k, {}).get("msgs_per_s", 0.0) for k in KINDS)
    gc, fc = (runs.get(k, {}).get("cpu_ms_per_msg") for k in ("guardrail", "faust"))
    ratio = g / f if f and "guardrail" in runs else None
    cpu_ratio = gc / fc if gc and fc else None
    return [
        row("1 ceiling: guardrail / bare Faust", f"{g:.0f} vs {f:.0f} msgs/s", ">= 0.8x",
            ratio, None if ratio is None else ratio >= 0.8),
        row("1 ceiling: CPU per message, guardrail / bare Faust",
            f"{gc:.3f} vs {fc:.3f} ms" if cpu_ratio else "-", "<= 1.5x",
            cpu_ratio, None if cpu_ratio is None else cpu_ratio <= 1.5),
        row("1 ceiling: raw aiokafka loop (reference)", f"{r:.0f} msgs/s "
            f"(guardrail {g / r:.2f}x)" if r else "-", "-", None, None),
    ]


def main() -> int:
    global PROFILE_SECONDS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000, help="backlog size")
    parser.add_argument("--seconds", type=float, default=20.0, help="longest measured span")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--profile", action="store_true", help="py-spy the workers")
    parser.add_argument("--profile-seconds", type=float, default=PROFILE_SECONDS,
                        help="how long --profile samples each worker")
    parser.add_argument("--bootstrap", help="use this broker instead of a fresh one")
    parser.add_argument("--broker", choices=BROKERS, default="embedded",
                        help="the fresh broker: embedded (default) or Apache Kafka")
    parser.add_argument("--experiment", default="", help="patch from bench/worker_exp.py")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a worker setting for every kind, e.g. judgment_bundles=false")
    args = parser.parse_args()
    settings = dict(pair.split("=", 1) for pair in args.set)
    PROFILE_SECONDS = args.profile_seconds
    info = meta()  # load and commit before the run
    info["broker"] = args.bootstrap or broker_label(args.broker)
    info["settings"] = settings
    with tempfile.TemporaryDirectory() as tmp, \
            running_broker(args.bootstrap, args.broker) as bootstrap, JudgeProc(0) as judge:
        runs = measure(bootstrap, judge.api_base, Path(tmp), args.messages, seconds=args.seconds,
                       profile=args.profile, kinds=tuple(args.kinds.split(",")),
                       experiment=args.experiment, **settings)
    for r in runs.values():
        if r.get("profile"):
            prof.show(r["profile"], f"ceiling {r['kind']}")
    table = rows(runs)
    print_table(table, info)
    write_json(f"ceiling-{args.broker}", {"meta": info, "runs": runs, "rows": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
