"""6. Scale out: two workers in one consumer group vs one, judge-bound.

    python bench/cluster_faults/scale_out.py [--latency-ms 200] [--concurrency 16] [--seconds 15]

The workers start on an empty input topic; once the group is Stable with
every member (admin DescribeGroups), a backlog is produced and the results'
rate is measured from 3 s after the first result. One judge process serves
both workers. Target: 2 workers >= 1.8x one.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (CoordinatorLoadInProgressError,
                             GroupCoordinatorNotAvailableError)

from bench.common import (JudgeProc, Stopwatch, cases, collect, kill_workers, meta, new_env,
                          print_table, produce_values, row, running_broker, start_process,
                          steady_rate, write_json)

SKIP = 3.0
#: Judge calls per message: one by default (``judge_calls=per_message``).
CALLS_PER_MESSAGE = 1


async def _group(bootstrap: str, group: str) -> tuple[str, int]:
    """The group's state and member count; ``Unknown`` while no coordinator
    answers (Apache Kafka creates ``__consumer_offsets`` at the first group)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        for response in await admin.describe_consumer_groups([group]):
            for g in response.to_object()["groups"]:
                return g["state"], len(g["members"])
    except (GroupCoordinatorNotAvailableError, CoordinatorLoadInProgressError):
        pass
    finally:
        await admin.close()
    return "Unknown", 0


def wait_stable(bootstrap: str, group: str, members: int, timeout: float = 60) -> float:
    """Seconds until the group is Stable with ``members`` members (raises on timeout)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        state, count = asyncio.run(_group(bootstrap, group))
        if state == "Stable" and count == members:
            return round(time.monotonic() - started, 1)
        time.sleep(0.5)
    raise RuntimeError(f"group {group} not Stable with {members} members in {timeout}s")


def run_workers(bootstrap: str, tmp: Path, workers: int, *, latency_ms: float,
                concurrency: int, seconds: float, experiment: str = "") -> dict[str, Any]:
    limit_msgs = workers * concurrency / (latency_ms / 1000) / CALLS_PER_MESSAGE
    backlog = int(limit_msgs * (seconds + SKIP + 10))
    folder = tmp / f"w{workers}"
    folder.mkdir(parents=True, exist_ok=True)
    clock = Stopwatch()
    with JudgeProc(latency_ms) as judge:
        env = new_env(bootstrap, judge.api_base, folder, judge_concurrency=concurrency)
        try:
            for _ in range(workers):
                start_process(env, "guardrail", experiment)
            joined = wait_stable(bootstrap, env.env["GUARDRAIL_APP_ID"], workers)
            produce_values(bootstrap, env.topic("input"), cases(backlog, prefix=f"w{workers}"))
            stamps = collect(bootstrap, env.topic("results"), backlog, 300,
                             seconds=SKIP + seconds)
        finally:
            kill_workers(env)
    steady = steady_rate(stamps, SKIP, seconds)
    return {"workers": workers, "msgs_per_s": steady["rate"], "limit_msgs_per_s": limit_msgs,
            "measured_records": steady["records"], "measured_seconds": steady["span_s"],
            "group_stable_after_s": joined, "wall_seconds": clock.seconds}


def measure(bootstrap: str, tmp: Path, *, latency_ms: float = 200, concurrency: int = 16,
            seconds: float = 15, experiment: str = "") -> dict[str, Any]:
    runs = [run_workers(bootstrap, tmp, w, latency_ms=latency_ms, concurrency=concurrency,
                        seconds=seconds, experiment=experiment) for w in (1, 2)]
    for r in runs:
        print(f"  scale-out {r['workers']} worker(s): {r['msgs_per_s']:.1f} msgs/s "
              f"(limit {r['limit_msgs_per_s']:.0f}; {r['wall_seconds']}s wall)", flush=True)
    speedup = runs[1]["msgs_per_s"] / runs[0]["msgs_per_s"] if runs[0]["msgs_per_s"] else 0.0
    return {"latency_ms": latency_ms, "concurrency": concurrency, "experiment": experiment,
            "runs": runs, "speedup": speedup}


def rows(r: dict[str, Any]) -> list[dict[str, Any]]:
    one, two = (x["msgs_per_s"] for x in r["runs"])
    return [row(f"6 scale-out 2 vs 1 worker (C={r['concurrency']}, {r['latency_ms']:.0f} ms)",
                f"{two:.1f} vs {one:.1f} msgs/s = {r['speedup']:.2f}x", ">= 1.8x",
                r["speedup"] / 1.8, r["speedup"] >= 1.8)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--experiment", default="", help="patch from bench/worker_exp.py")
    parser.add_argument("--bootstrap", help="use this broker instead of an embedded one")
    args = parser.parse_args()
    info = meta()  # load and commit before the run
    with tempfile.TemporaryDirectory() as tmp, running_broker(args.bootstrap) as bootstrap:
        r = measure(bootstrap, Path(tmp), latency_ms=args.latency_ms,
                    concurrency=args.concurrency, seconds=args.seconds,
                    experiment=args.experiment)
    table = rows(r)
    print_table(table, info)
    write_json("scale_out", {"meta": info, "run": r, "rows": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
