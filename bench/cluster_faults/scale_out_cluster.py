"""Scale-out on a three-node Apache Kafka cluster: 1, 2 and 4 workers of one
group on 8 input partitions, judge latency 100 ms, then a worker added and one
removed mid-stream with the windows checked exact.

    flock /tmp/guardrail-bench.lock python bench/cluster_faults/scale_out_cluster.py \\
        [--workers 1,2,4] [--concurrency 16] [--latency-ms 100] [--seconds 15] \\
        [--membership term,kill] [--phase-seconds 15]

One cluster (``ApacheKafkaCluster``, 3 combined KRaft nodes, replication 3,
``min.insync.replicas`` 2) serves the whole run; each figure gets a fresh app
id, topics (``topic_partitions`` 8) and judge process (``judge_proc.py``). The
workers start on an empty input topic; once the group is Stable with every
member (and idle for 4 s: the workers' idle CPU), a backlog is produced, and
the results' rate is counted over ``--seconds`` from 1 s after the last input
was acked (and at least 3 s after the first result), so the producer's CPU is
outside the span. Over the same
span ``/proc`` gives each worker's CPU seconds, the judge's, the three
brokers', this script's and the whole machine's (``cpu_sampler.py``); what
the machine spent beyond these is other jobs' (``others_cores``). The
judge-bound limit is workers × ``judge_concurrency`` / latency (one call per
message).

The membership change (``scale_membership.py``) runs after the scaling
figures, sized by the 2-worker rate.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (JudgeProc, Stopwatch, cases, collect, kill_workers, meta, new_env,
                          produce_values, start_process, steady_rate, write_json)
from bench.cpu_sampler import MACHINE, CpuSampler
from bench.cluster_faults.scale_membership import membership_runs, print_membership
from bench.cluster_faults.scale_out import wait_stable

from guardrail.kafka.apache import ApacheKafkaCluster, kafka_version

#: Seconds after the first result before the span may start (connections, warm-up).
SKIP = 3.0
BROKERS = 3
#: Seconds of an idle, Stable group before the backlog: the workers' idle CPU.
IDLE = 4.0


def broker_pids(cluster: ApacheKafkaCluster) -> dict[str, int]:
    return {f"broker-{n}": pid for n in cluster.nodes if (pid := cluster.pid(n)) is not None}


def span_cpu(sampler: CpuSampler, steady: dict[str, Any]) -> dict[str, float]:
    t0 = steady["start_ms"] / 1000
    return sampler.between(t0, t0 + steady["span_s"])


def idle_cores(cpu: dict[str, float], span: float) -> dict[str, float]:
    """Each worker's cores while the group is Stable and no input has come."""
    return {k: round(v / span, 3) for k, v in cpu.items() if k.startswith("worker-")}


def cpu_figures(cpu: dict[str, float], span: float, results: int) -> dict[str, Any]:
    """CPU of the span as cores (seconds per second) and per 1,000 results."""
    workers = {k: v for k, v in cpu.items() if k.startswith("worker-")}
    brokers = sum(v for k, v in cpu.items() if k.startswith("broker-"))
    fleet = sum(workers.values())
    per_1000 = (lambda s: round(s / results * 1000, 3)) if results else (lambda s: None)
    return {"worker_cores": {k: round(v / span, 3) for k, v in workers.items()},
            "workers_cores": round(fleet / span, 3),
            "worker_cpu_s_per_1000": per_1000(fleet),
            "brokers_cores": round(brokers / span, 3),
            "brokers_cpu_s_per_1000": per_1000(brokers),
            "judge_cores": round(cpu.get("judge", 0.0) / span, 3),
            "bench_cores": round(cpu.get("bench", 0.0) / span, 3),
            "machine_cores": round(cpu.get(MACHINE, 0.0) / span, 3),
            "others_cores": round((2 * cpu.get(MACHINE, 0.0) - sum(cpu.values())) / span, 3)}


def backlog_for(limit: float, seconds: float, most: int) -> int:
    """Enough input for the span at the judge-bound rate, plus slack for the
    producer's time and the warm-up; at most ``most``."""
    return min(most, int(limit * (seconds + SKIP + 12)))


def run_workers(cluster: ApacheKafkaCluster, tmp: Path, workers: int, args: argparse.Namespace,
                ) -> dict[str, Any]:
    limit = workers * args.concurrency / (args.latency_ms / 1000)
    backlog = backlog_for(limit, args.seconds, args.max_backlog)
    folder = tmp / f"w{workers}"
    folder.mkdir(parents=True, exist_ok=True)
    clock = Stopwatch()
    with JudgeProc(args.latency_ms) as judge, \
            CpuSampler({"judge": judge.proc.pid, "bench": os.getpid(),
                        **broker_pids(cluster)}) as sampler:
        env = new_env(cluster.bootstrap, judge.api_base, folder, topic_partitions=args.partitions,
                      judge_concurrency=args.concurrency)
        try:
            for n in range(1, workers + 1):
                sampler.add(f"worker-{n}", start_process(env, "guardrail").pid)
            joined = wait_stable(cluster.bootstrap, env.env["GUARDRAIL_APP_ID"], workers, 120)
            idle_from = time.time()
            time.sleep(IDLE)
            produced_at = time.time()
            produce_values(cluster.bootstrap, env.topic("input"),
                           cases(backlog, prefix=f"w{workers}"))
            acked_at = time.time()
            stamps = collect(cluster.bootstrap, env.topic("results"), backlog, 300,
                             seconds=acked_at - produced_at + 1 + args.seconds + SKIP)
        finally:
            kill_workers(env)
    first = min(stamps) / 1000 if stamps else acked_at
    steady = steady_rate(stamps, max(SKIP, acked_at + 1 - first), args.seconds)
    return {"workers": workers, "msgs_per_s": round(steady["rate"], 1),
            "limit_msgs_per_s": limit, "backlog": backlog,
            "produce_seconds": round(acked_at - produced_at, 1),
            "measured_records": steady["records"], "measured_seconds": steady["span_s"],
            "backlog_ran_out": steady["span_s"] < args.seconds - 0.5,
            "group_stable_after_s": joined, "wall_seconds": clock.seconds,
            "load_1m": round(os.getloadavg()[0], 1),
            "idle_worker_cores": idle_cores(sampler.between(idle_from, produced_at), IDLE),
            **cpu_figures(span_cpu(sampler, steady), steady["span_s"], steady["records"])}


def scaling(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Each run's rate over the one-worker run's."""
    base = next((r["msgs_per_s"] for r in runs if r["workers"] == 1), 0.0)
    return {f"{r['workers']}/1": round(r["msgs_per_s"] / base, 2) for r in runs if base}


def print_runs(runs: list[dict[str, Any]], factors: dict[str, float]) -> None:
    print("\n| workers | results/s | judge limit | scaling | cores per worker | workers' "
          "cores | worker CPU s per 1,000 | brokers' cores | judge cores | machine cores "
          "(others) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        per_worker = " / ".join(f"{v:.2f}" for v in r["worker_cores"].values())
        print(f"| {r['workers']} | {r['msgs_per_s']:.1f} | {r['limit_msgs_per_s']:.0f} | "
              f"{factors.get(str(r['workers']) + '/1', 0):.2f}x | {per_worker} | "
              f"{r['workers_cores']:.2f} | {r['worker_cpu_s_per_1000']} | "
              f"{r['brokers_cores']:.2f} | {r['judge_cores']:.2f} | {r['machine_cores']:.2f} "
              f"({r['others_cores']:.2f}) |")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2,4", help="worker counts, comma-separated")
    parser.add_argument("--latency-ms", type=float, default=100)
    parser.add_argument("--concurrency", type=int, default=16, help="judge_concurrency each")
    parser.add_argument("--seconds", type=float, default=15, help="measured span per figure")
    parser.add_argument("--partitions", type=int, default=8, help="of every topic")
    parser.add_argument("--max-backlog", type=int, default=30_000)
    parser.add_argument("--membership", default="term",
                        help="membership changes in turn: term, kill, comma-separated (repeats "
                        "allowed), or none")
    parser.add_argument("--phase-seconds", type=float, default=15,
                        help="membership: seconds before the join and between join and leave")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    info = {**meta(), "broker": f"Apache Kafka {kafka_version()}, {BROKERS} nodes",
            "partitions": args.partitions, "latency_ms": args.latency_ms,
            "concurrency": args.concurrency}
    runs: list[dict[str, Any]] = []
    changes: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="scale-out-cluster-") as tmp, \
            ApacheKafkaCluster(workdir=Path(tmp) / "cluster", size=BROKERS) as cluster:
        for workers in (int(w) for w in args.workers.split(",")):
            runs.append(run_workers(cluster, Path(tmp), workers, args))
            print(f"  {workers} worker(s): {runs[-1]['msgs_per_s']} results/s "
                  f"({runs[-1]['wall_seconds']} s wall)", flush=True)
        rate = next((r["msgs_per_s"] for r in runs if r["workers"] == 2), 0.0)
        changes = membership_runs(cluster, Path(tmp), args, rate)
    factors = scaling(runs)
    print(f"\n{info['date']}  {info['machine']}  {info['broker']}  commit {info['commit']}  "
          f"load {info['load_at_start']}  judge {args.latency_ms:.0f} ms, "
          f"C = {args.concurrency} per worker, {args.partitions} input partitions")
    print_runs(runs, factors)
    print_membership(changes)
    write_json("scale_out_cluster", {"meta": info, "runs": runs, "scaling": factors,
                                     "membership": changes})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
