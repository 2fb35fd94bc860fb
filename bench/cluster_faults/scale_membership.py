"""A worker added and one removed mid-stream, on the cluster of
``scale_out_cluster.py`` (which runs this after its scaling figures).

Two workers of a fresh group judge a backlog on ``--partitions`` (8); ``phase``
seconds after the backlog is acked a third worker starts, ``phase`` seconds
after the group is Stable with three members one of the first two is removed
(``term``: SIGTERM, a clean leave; ``kill``: SIGKILL, the group notices when
its session times out). Then every input must have a result and the windows
must count each message exactly once: the fault scenarios' check
(``tests/support/faults.py``: the judgment events on the topic, unique per
source position and metric, against the group's ``/rates`` totals). Results
are counted from a fresh read of the whole results topic at the end; the
worker logs are kept under ``bench/results/`` when an input has no result or
the windows disagree. That check compares the windows with the judgment events
on the topic, so an input with neither a result nor an event passes it;
``windows_cover_inputs`` compares the windows with the inputs, and
``lost_per_partition`` says where the lost inputs were.

Settle time: from the worker's start (or the signal) until the group is
Stable with the new membership (admin DescribeGroups, polled every 0.5 s).
The rate around each change comes from the results' Kafka timestamps: the
rate over 10 s before it, the lowest whole-second count and the longest gap
between results until 2 s after the group settled, and the rate over 10 s
after that.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import shutil
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

from aiokafka.partitioner import murmur2
from bench.common import RESULTS, JudgeProc, cases, kill_workers, new_env, produce_values
from bench.cluster_faults.scale_out import wait_stable

from guardrail.kafka.apache import ApacheKafkaCluster
from tests.support.faults import _window_figures, _window_totals, delivery_figures
from tests.support.harness import StreamEnv, TopicWatcher, consume_messages

__all__ = ["membership_change", "membership_runs", "print_membership"]

SIGNALS = {"term": signal.SIGTERM, "kill": signal.SIGKILL}
#: Seconds of results before and after a change that its rates are taken over.
AROUND = 10.0
#: Metrics judged per message (bias + toxicity): judgment events per result.
METRICS = 2


def membership_runs(cluster: ApacheKafkaCluster, tmp: Path, args: argparse.Namespace,
                    rate: float) -> list[dict[str, Any]]:
    """One membership change per variant named in ``args.membership``."""
    variants = [v for v in args.membership.split(",") if v and v != "none"]
    runs = []
    for number, how in enumerate(variants, 1):
        runs.append(membership_change(cluster, tmp / f"members-{number}-{how}", args, rate, how))
        print(f"  membership ({how}): lost {runs[-1]['lost']}, windows exact "
              f"{runs[-1]['window_counts_match']}", flush=True)
    return runs


def _stamp_and_key(message: Any) -> tuple[int, str]:
    return message.timestamp, message.key.decode()


def membership_change(cluster: ApacheKafkaCluster, folder: Path, args: argparse.Namespace,
                      rate: float, how: str) -> dict[str, Any]:
    """Two workers, a third joins, one of the first two leaves (``how``)."""
    folder.mkdir(parents=True, exist_ok=True)
    backlog = int(max(rate, 50.0) * args.phase_seconds * 4)
    values = cases(backlog, prefix=f"m-{how}")
    produced = [key.decode() for key, _, _ in values]
    with JudgeProc(args.latency_ms) as judge:
        env = new_env(cluster.bootstrap, judge.api_base, folder,
                      topic_partitions=args.partitions, judge_concurrency=args.concurrency)
        try:
            stamps, changes, finished = _drive(env, values, args.phase_seconds, SIGNALS[how])
            keys = _result_keys(env, len(stamps))
            windows = _windows(env, len(set(keys)))
        finally:
            kill_workers(env)
    figures = {"variant": how, "backlog": backlog, "finished": finished,
               "watched_results": len(stamps), **delivery_figures(
                   produced, [{"case_id": k} for k in keys]),
               **lost_places(set(produced) - set(keys), args.partitions), **windows,
               "windows_cover_inputs": windows["window_total"] == METRICS * len(produced),
               "join": {"settle_s": changes["join_s"],
                        **around(stamps, changes["joined_at"], changes["join_s"])},
               "leave": {"settle_s": changes["leave_s"],
                         **around(stamps, changes["left_at"], changes["leave_s"])}}
    if figures["lost"] or not windows["window_counts_match"]:
        figures["logs_kept"] = str(_keep_logs(folder, how))
    return figures


def lost_places(lost: set[str], partitions: int) -> dict[str, Any]:
    """The first 20 lost case ids in produce order and the input partitions of
    all of them (the producer's default partitioner: murmur2 of the key)."""
    order = sorted(lost, key=lambda case: int(case.rsplit("-", 1)[1]))
    places = Counter((murmur2(case.encode()) & 0x7FFFFFFF) % partitions for case in lost)
    return {"lost_ids": order[:20], "lost_per_partition": dict(sorted(places.items()))}


def _drive(env: StreamEnv, values: list[tuple[bytes, bytes, int | None]], phase: float,
           leave: signal.Signals) -> tuple[list[int], dict[str, float], bool]:
    """Two workers, the backlog, the change; the results' Kafka timestamps in
    order, when the changes happened and whether every input got a result."""
    env.start_worker()
    env.start_worker()
    wait_stable(env.bootstrap, env.env["GUARDRAIL_APP_ID"], 2, 120)
    with TopicWatcher(env.bootstrap, env.topic("results"), parse=_stamp_and_key) as results:
        produce_values(env.bootstrap, env.topic("input"), values)
        changes = _change(env, phase, leave)
        finished = results.wait_for(lambda r: len({k for _, k in r}) >= len(values), 300)
        time.sleep(2)  # let in-flight duplicates land before counting
        records = results.snapshot()
    return sorted(t for t, _ in records), changes, finished


def _result_keys(env: StreamEnv, least: int) -> list[str]:
    """Every result's case_id, read again from the start by a fresh consumer."""
    messages = asyncio.run(consume_messages(env.bootstrap, env.topic("results"), expect=least,
                                            timeout=60, settle=2))
    return [m.key.decode() for m in messages]


def _windows(env: StreamEnv, cases_with_result: int) -> dict[str, Any]:
    """The fault scenarios' window check through the first worker; when it
    fails, the group's totals once more after up to 60 s (a late view or a
    real miscount)."""
    port = env.workers[0].web_port  # type: ignore[attr-defined]
    windows = _window_figures(env, port, METRICS * cases_with_result)
    if not windows["window_counts_match"]:
        windows["window_total_60s_later"] = _window_totals(
            port, expect=windows["unique_judged"], timeout=60)
    return windows


def _keep_logs(folder: Path, how: str) -> Path:
    kept = RESULTS / f"scale_membership-{how}-{time.strftime('%Y%m%d-%H%M%S')}"
    kept.mkdir(parents=True, exist_ok=True)
    for log in folder.glob("worker-*.log"):
        shutil.copy(log, kept / log.name)
    return kept


def _change(env: StreamEnv, phase: float, leave: signal.Signals) -> dict[str, float]:
    """Add a worker after ``phase`` s, remove the second one ``phase`` s after
    the group settled; when each happened and how long the group took to settle."""
    group = env.env["GUARDRAIL_APP_ID"]
    time.sleep(phase)
    joined_at = time.time()
    env.start_worker()
    join_s = wait_stable(env.bootstrap, group, 3, 120)
    time.sleep(phase)
    left_at = time.time()
    env.workers[1].send_signal(leave)
    leave_s = wait_stable(env.bootstrap, group, 2, 120)
    env.workers[1].wait(60)
    return {"joined_at": joined_at, "join_s": join_s, "left_at": left_at, "leave_s": leave_s}


def around(stamps_ms: list[int], at: float, settle_s: float) -> dict[str, Any]:
    """Results/s over ``AROUND`` s before ``at`` (epoch s) and after the group
    settled (+2 s); the lowest whole-second count and the longest gap between
    results (s) from ``at`` until then."""
    t0, t1 = at * 1000, (at + settle_s + 2) * 1000
    inside = [t for t in stamps_ms if t0 <= t <= t1]
    seconds = range(int(t0 // 1000), int(t1 // 1000))
    per_second = [sum(1 for t in inside if s * 1000 <= t < (s + 1) * 1000) for s in seconds]
    edges = [t0, *inside, t1]
    return {"rate_before": _rate(stamps_ms, t0 - AROUND * 1000, t0),
            "lowest_second": min(per_second, default=None),
            "longest_gap_s": round(max(b - a for a, b in itertools.pairwise(edges)) / 1000, 2),
            "rate_after": _rate(stamps_ms, t1, t1 + AROUND * 1000)}


def _rate(stamps_ms: list[int], t0: float, t1: float) -> float:
    return round(sum(1 for t in stamps_ms if t0 <= t < t1) / ((t1 - t0) / 1000), 1)


def print_membership(runs: list[dict[str, Any]]) -> None:
    if not runs:
        return
    print("\n| membership change | inputs | lost | duplicate results | windows exact "
          "(total / judged, seen / unique) | settle | results/s before → lowest 1 s → after "
          "| longest gap |")
    print("|---|---|---|---|---|---|---|---|")
    for r in runs:
        exact = (f"{r['window_counts_match']} ({r['window_total']} / {r['unique_judged']}, "
                 f"{r['window_seen']} / {r['unique_judgments']})")
        if "window_total_60s_later" in r:
            exact += f"; total {r['window_total_60s_later']} up to 60 s later"
        exact += "" if r["windows_cover_inputs"] else "; short of the inputs"
        lost = f"{r['lost']}" + (f" (per partition {r['lost_per_partition']})" if r["lost"]
                                 else "")
        for step, what in (("join", "3rd worker joins"), ("leave", f"one leaves ({r['variant']})")):
            c = r[step]
            print(f"| {what} | {r['produced']} | {lost} | {r['duplicates']} | {exact} | "
                  f"{c['settle_s']} s | {c['rate_before']} → {c['lowest_second']} → "
                  f"{c['rate_after']} | {c['longest_gap_s']} s |")
