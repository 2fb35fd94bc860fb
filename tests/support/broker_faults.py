"""Broker faults on a three-node cluster while a worker judges a stream.

Each scenario produces ``cases`` inputs, starts one worker with a judge of
``latency`` seconds, and once a quarter of the results are in, hurts the
cluster: kills the leader of an input or a results partition, kills the active
controller, pauses a broker past its session timeout, restarts every node in
turn, or takes two of three down. Then it waits for every result and returns
what a team paged for lost data asks: lost, doubled, windows exact, the worker
alive and never restarted, and how long results stopped flowing::

    figures = broker_fault_scenario(cluster, judge, workdir, fault="input_leader",
                                    cases=3000)
    assert figures["lost"] == 0 and figures["window_counts_match"]

``bench/cluster_faults/broker_faults.py`` runs them all and prints the table.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient

from guardrail.kafka.apache import ApacheKafkaCluster
from guardrail.local.rule_judge import JudgeServer

from .faults import _done, _judged, _metric_value, _setup, _window_figures, delivery_figures
from .harness import StreamEnv, TopicWatcher, poll

__all__ = ["FAULTS", "broker_fault_scenario", "flow_figures", "partition_leader"]

#: How long a killed node stays down before it is started again; the pause
#: outlasts the brokers' session with the controller (9 s) and the worker's
#: consumer session (6 s), so both fence the paused node.
DOWN_SECONDS = 10.0
PAUSE_SECONDS = 15.0


async def _leader(bootstrap: str, topic: str, partition: int) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return next(p["leader"] for p in described["partitions"] if p["partition"] == partition)


def partition_leader(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The node id that leads ``topic``'s ``partition`` now."""
    return asyncio.run(_leader(bootstrap, topic, partition))


def _kill_and_restart(cluster: ApacheKafkaCluster, node: int) -> dict[str, Any]:
    cluster.kill(node)
    time.sleep(DOWN_SECONDS)
    cluster.restart(node)
    return {"node": node, "down_seconds": DOWN_SECONDS}


def _pause(cluster: ApacheKafkaCluster, node: int) -> dict[str, Any]:
    cluster.pause(node)
    time.sleep(PAUSE_SECONDS)
    cluster.resume(node)
    return {"node": node, "paused_seconds": PAUSE_SECONDS}


async def _under_replicated(bootstrap: str) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    await admin.start()
    try:
        described = await admin.describe_topics(await admin.list_topics())
    finally:
        await admin.close()
    return sum(len(p["isr"]) < len(p["replicas"]) for t in described for p in t["partitions"])


def _rolling(cluster: ApacheKafkaCluster) -> dict[str, Any]:
    """Every node stopped cleanly and started again, one after another, as an
    upgrade does: the next only once every partition is fully in sync again."""
    waited = []
    for node in cluster.nodes:
        cluster.shutdown(node)
        cluster.restart(node)
        started = time.monotonic()
        poll(lambda: asyncio.run(_under_replicated(cluster.bootstrap)) == 0, timeout=120,
             interval=1)
        waited.append(round(time.monotonic() - started, 1))
    return {"nodes": list(cluster.nodes), "in_sync_after_s": waited}


def _two_down(cluster: ApacheKafkaCluster, watcher: TopicWatcher, web_port: int) -> dict[str, Any]:
    """Two of three nodes killed: no quorum, no in-sync pair. The worker must
    wait (no progress, nothing lost), say why (its Kafka trouble report, on
    /metrics too), then go on when one node returns."""
    survivor = cluster.active_controller() or 1
    down = [n for n in cluster.nodes if n != survivor][:2]
    for node in down:
        cluster.kill(node)
    time.sleep(5)  # what was in flight before the fault lands, or fails
    before = len(watcher.snapshot())
    time.sleep(2 * DOWN_SECONDS)
    during = len(watcher.snapshot()) - before
    metrics = {name: _metric_value(web_port, f"guardrail_kafka_{name}")
               for name in ("trouble", "unreachable_brokers")}
    cluster.restart(down[0])
    cluster.restart(down[1])
    return {"nodes": down, "results_while_down": during,
            "down_seconds": 2 * DOWN_SECONDS + 5, "metrics_while_down": metrics}


def _faults(cluster: ApacheKafkaCluster, env: StreamEnv, watcher: TopicWatcher,
            web_port: int) -> dict[str, Callable[[], dict[str, Any]]]:
    bootstrap = cluster.bootstrap
    return {
        "input_leader": lambda: _kill_and_restart(
            cluster, partition_leader(bootstrap, env.topic("input"))),
        "results_leader": lambda: _kill_and_restart(
            cluster, partition_leader(bootstrap, env.topic("results"))),
        "controller": lambda: _kill_and_restart(cluster, cluster.active_controller() or 1),
        "pause": lambda: _pause(cluster, partition_leader(bootstrap, env.topic("input"))),
        "rolling": lambda: _rolling(cluster),
        "two_down": lambda: _two_down(cluster, watcher, web_port),
    }


#: The scenarios, in the order the bench runs them.
FAULTS = ("input_leader", "results_leader", "controller", "pause", "rolling", "two_down")


def flow_figures(stamps_ms: list[int], fault_at: float) -> dict[str, Any]:
    """How results flowed around a fault, from the results' timestamps (the
    producer's clock, the same machine's): the rate in the 5 s before it, the
    longest stop after it began, and the seconds from the fault until that stop
    ended (0 when results never stopped for a second)."""
    stamps = sorted(s / 1000 for s in stamps_ms)
    before = [s for s in stamps if fault_at - 5 <= s < fault_at]
    after = [s for s in stamps if s >= fault_at]
    gaps = [(b - a, b) for a, b in zip([fault_at, *after], after)]
    longest, ended = max(gaps, default=(0.0, fault_at))
    return {"rate_before": round(len(before) / 5, 1), "longest_gap_s": round(longest, 1),
            "flowing_again_s": round(ended - fault_at, 1) if longest >= 1 else 0.0}


def broker_fault_scenario(cluster: ApacheKafkaCluster, judge: JudgeServer, workdir: Path, *,
                          fault: str, cases: int, latency: float = 0.05,
                          timeout: float = 600, **settings: Any) -> dict[str, Any]:
    """One worker judges ``cases`` inputs; ``fault`` hits the cluster once a
    quarter of the results are in. Figures: delivery, windows, the worker's
    life, and the results' flow around the fault."""
    judge.reset()
    judge.latency, judge.responder = latency, None
    env, produced = _setup(cluster.bootstrap, judge, workdir, cases, **settings)
    with TopicWatcher(cluster.bootstrap, env.topic("results")) as results:
        worker = env.start_worker()
        results.wait_for(lambda r: len(r) >= cases // 4, timeout=timeout)
        fault_at = time.time()
        detail = _faults(cluster, env, results, worker.web_port)[fault]()  # type: ignore[attr-defined]
        healed_at = time.time()
        finished = results.wait_for(_done(set(produced)), timeout=timeout)
        time.sleep(2)  # let in-flight duplicates land before counting
        records, stamps = results.snapshot(), results.timestamps()
    alive = worker.poll() is None
    windows = _window_figures(env, worker.web_port, _judged(records))  # type: ignore[attr-defined]
    # A worker that reported trouble says it is over after a quiet interval.
    poll(lambda: _trouble_over(env.logs()), float(settings.get("kafka_trouble_seconds", 30)) * 2)
    env.stop_workers()
    logs = env.logs()
    return {"scenario": fault, **detail, **delivery_figures(produced, records), **windows,
            "finished": finished, "worker_alive": alive, "worker_starts": len(env.workers),
            "fault_seconds": round(healed_at - fault_at, 1),
            **flow_figures(stamps, fault_at), **_said(logs), "logs": logs}


def _trouble_over(logs: str) -> bool:
    """No trouble reported, or its end said after the last report."""
    return logs.rfind("the trouble is over") >= logs.rfind("Kafka trouble in the last")


def _said(logs: str) -> dict[str, int]:
    """What the worker's log said of the trouble: its reports, their end, and
    the client's own ERROR lines that still got through."""
    return {"trouble_reports": logs.count("Kafka trouble in the last"),
            "trouble_over": logs.count("the trouble is over"),
            "error_lines": logs.count("[ERROR]")}
