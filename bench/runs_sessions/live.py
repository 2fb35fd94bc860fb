"""Helpers of the benchmarks that measure a live worker from the outside, one
fresh worker per figure (``agent_runs.py``, ``sessions.py``): a worker on fresh
topics, a results consumer stamping arrivals, an acks=all producer, paced
sends, latency percentiles, steady RSS and ``/metrics`` readings, a figures table.

    with worker(rig, "tp", input_format="otlp") as (env, proc):
        async with watching(env, linger_ms=5, warm=records) as (results, producer):
            await send_all(producer, env.topic("input"), records)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterable
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from bench.common import (BROKERS, JudgeProc, Stopwatch, broker_label, kill_workers, meta, new_env,
                          rss_mb, running_broker, start_process, write_json)
from tests.support.harness import poll

__all__ = ["PARTITIONS", "Records", "Rig", "Results", "Expect", "send_all", "watching", "drain",
           "worker", "metric_values", "tell_missing", "pct", "latencies", "paced", "steady_rss",
           "num", "print_figures", "broker_options", "run_figures"]

PARTITIONS = 2
Records = list[tuple[int, bytes]]  # (partition, record value)
Rig = tuple[str, str, Path]  # where workers run: bootstrap, the judge's API base, a folder


class Results:
    """Result records by case id as they arrive: (arrival epoch s, Kafka timestamp ms);
    a case id seen again is counted in ``repeats``, its first arrival kept. ``keep``
    (a record -> bool) also keeps every such record, repeats too, in ``kept`` as
    (record, arrival, Kafka timestamp)."""

    def __init__(self, keep: Callable[[dict[str, Any]], bool] | None = None) -> None:
        self.seen: dict[str, tuple[float, int]] = {}
        self.kept: list[tuple[dict[str, Any], float, int]] = []
        self.repeats = 0
        self.keep = keep

    async def watch(self, bootstrap: str, topic: str, stop: asyncio.Event) -> None:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    fetch_max_wait_ms=10)
        await consumer.start()
        try:
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=100)
                now = time.time()  # stamped at once: this is the arrival
                for message in (m for ms in batch.values() for m in ms):
                    self._note(json.loads(message.value), now, message.timestamp)
        finally:
            await consumer.stop()

    def _note(self, record: dict[str, Any], now: float, stamp: int) -> None:
        if self.keep is not None and self.keep(record):
            self.kept.append((record, now, stamp))
        case_id = record["case_id"]
        if case_id in self.seen:
            self.repeats += 1
        else:
            self.seen[case_id] = (now, stamp)

    async def wait(self, count: int, timeout: float) -> bool:
        return await self.until(lambda r: len(r.seen) >= count, timeout)

    async def until(self, done: Callable[[Results], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not done(self) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return done(self)


#: Results to wait for: a count (beside the warm-up's), or a test on what arrived.
Expect = int | Callable[[Results], bool]


async def _wait(results: Results, warm: int, expect: Expect, timeout: float) -> bool:
    if callable(expect):
        return await results.until(expect, timeout)
    return await results.wait(warm + expect, timeout)


async def send_all(producer: AIOKafkaProducer, topic: str, records: Records) -> None:
    futures = [await producer.send(topic, value, partition=p) for p, value in records]
    await asyncio.gather(*futures)


@asynccontextmanager
async def watching(env: Any, linger_ms: int, warm: Records,
                   keep: Callable[[dict[str, Any]], bool] | None = None) -> Any:
    """A results consumer and an acks=all producer, once the ``warm`` records
    (one result each) are judged."""
    results, stop = Results(keep), asyncio.Event()
    task = asyncio.ensure_future(results.watch(env.bootstrap, env.topic("results"), stop))
    producer = AIOKafkaProducer(bootstrap_servers=env.bootstrap, acks="all", linger_ms=linger_ms)
    await producer.start()
    try:
        await send_all(producer, env.topic("input"), warm)
        if not await results.wait(len(warm), 120):
            raise RuntimeError("the warm-up records were not judged")
        yield results, producer
    finally:
        await producer.stop()
        stop.set()
        await task


async def drain(env: Any, records: Records, expect: Expect, warm: Records,
                keep: Callable[[dict[str, Any]], bool] | None = None
                ) -> tuple[dict[str, Any], Results]:
    """A backlog's throughput: ``records`` sent at once, then ``expect`` waited for;
    records/s and results/s from the first send to the last result's Kafka
    timestamp; and the results (``keep``: whole records too)."""
    async with watching(env, linger_ms=5, warm=warm, keep=keep) as (results, producer):
        warm_ids, started = set(results.seen), time.time()
        await send_all(producer, env.topic("input"), records)
        produced = time.time() - started
        await _wait(results, len(warm_ids), expect, 300)
        await asyncio.sleep(1.0)  # time for an extra result to show
    stamps = [ts for case, (_, ts) in results.seen.items() if case not in warm_ids]
    elapsed = (max(stamps) / 1000 - started) if stamps else None
    return {"records": len(records), "results": len(stamps), "repeats": results.repeats,
            "started": started, "produce_s": round(produced, 2),
            "elapsed_s": elapsed and round(elapsed, 2),
            "records_per_s": elapsed and len(records) / elapsed,
            "results_per_s": elapsed and len(stamps) / elapsed}, results


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return response.read().decode()


def _healthy(port: int) -> bool:
    try:
        return json.loads(_get(port, "/health")).get("status") == "ok"
    except OSError:
        return False


def metric_values(port: int, names: Iterable[str]) -> dict[str, float]:
    """Samples of ``/metrics`` whose name (with its labels) is one of ``names``."""
    wanted = set(names)
    pairs = (line.partition(" ") for line in _get(port, "/metrics").splitlines())
    return {name: float(value) for name, _, value in pairs if name in wanted}


@contextmanager
def worker(rig: Rig, name: str, **settings: Any) -> Any:
    """A fresh worker on fresh topics, answering ``/health`` ok; killed afterwards."""
    bootstrap, api_base, folder = rig[0], rig[1], rig[2] / name
    folder.mkdir(parents=True)
    settings.setdefault("topic_partitions", PARTITIONS)
    env = new_env(bootstrap, api_base, folder, **settings)
    # BENCH_EXPERIMENT: a patch from bench/worker_exp.py for every worker of the run.
    proc = start_process(env, "guardrail", os.environ.get("BENCH_EXPERIMENT", ""))
    try:
        if not poll(lambda: proc.poll() is not None or _healthy(proc.web_port), 120) \
                or proc.poll() is not None:
            raise RuntimeError(f"worker not ready ({proc.poll()}):\n{env.logs()[-3000:]}")
        yield env, proc
    finally:
        kill_workers(env)


def tell_missing(env: Any, what: str, got: int, expected: int) -> None:
    """Results missing are a finding, not a crash: say so with the log's tail."""
    if got < expected:
        print(f"  !! {what}: {got}/{expected} results; worker log tail:\n"
              f"{env.logs()[-2000:]}", file=sys.stderr, flush=True)


def pct(values: list[float], p: float) -> float | None:
    ordered = sorted(values)
    at = min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))
    return round(ordered[at], 1) if ordered else None


def latencies(env: Any, what: str, since: dict[str, float], results: Results) -> dict[str, Any]:
    """ms from ``since`` (epoch s by case id) to arrival, and to the Kafka timestamp
    (the worker's producer stamps it: the worker's share)."""
    got = [(results.seen[c], t) for c, t in since.items() if c in results.seen]
    tell_missing(env, what, len(got), len(since))
    total = [(arrived - t) * 1000 for (arrived, _), t in got]
    return {"sent": len(since), "results": len(got), "repeats": results.repeats,
            "p50_ms": pct(total, 50), "p95_ms": pct(total, 95), "max_ms": pct(total, 100),
            "worker_p95_ms": pct([stamp - t * 1000 for (_, stamp), t in got], 95)}


async def paced(env: Any, rate: float, items: list[Any], send: Any, timeout: float, *,
                warm: Records, expect: Expect | None = None,
                keep: Callable[[dict[str, Any]], bool] | None = None
                ) -> tuple[dict[str, float], Results]:
    """``send(producer, topic, item, stamps)`` for each item, ``1 / rate`` s apart (each
    keeps its case id's start time in ``stamps``); then ``expect`` (default one result
    per item) or timeout."""
    stamps: dict[str, float] = {}
    topic = env.topic("input")
    async with watching(env, linger_ms=0, warm=warm, keep=keep) as (results, producer):
        start, tasks = time.monotonic(), []
        for i, item in enumerate(items):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(send(producer, topic, item, stamps)))
        await asyncio.gather(*tasks)
        await _wait(results, len(warm), len(items) if expect is None else expect, timeout)
    return stamps, results


def steady_rss(pid: int) -> float:
    """The median of three VmRSS readings a second apart."""
    values = []
    for _ in range(3):
        time.sleep(1.0)
        values.append(rss_mb(pid) or 0.0)
    return round(sorted(values)[1], 1)


def num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None or value != value else f"{value:,.{digits}f}"  # None, NaN


def print_figures(info: dict[str, Any], table: list[tuple[str, str]]) -> None:
    """The run's header line and its (measure, figure) rows as a Markdown table."""
    print(f"\n{info['date']}  {info['machine']}  {info['broker']}  commit {info['commit']}  "
          f"load {info['load_at_start']}  ({info['wall_s']} s)\n| measure | figure |\n|---|---|")
    print("\n".join(f"| {measure} | {figure} |" for measure, figure in table))


def broker_options(parser: argparse.ArgumentParser, figures: tuple[str, ...]) -> None:
    """``--only`` (some of ``figures``), ``--bootstrap`` and ``--broker``."""
    parser.add_argument("--only", default=",".join(figures))
    parser.add_argument("--bootstrap", help="use this broker instead of a fresh one")
    parser.add_argument("--broker", choices=BROKERS, default="embedded",
                        help="the fresh broker: embedded (default) or Apache Kafka")


def run_figures(name: str, args: argparse.Namespace, figures: tuple[str, ...],
                steps: Callable[[Rig], dict[str, Callable[[], Any]]],
                rows: Callable[[dict[str, Any]], list[tuple[str, str]]]) -> int:
    """The figures ``--only`` names, in ``figures``' order, on one broker with one
    instant judge; each one's rows printed when done, then the table; the raw
    figures to ``bench/results/<name>-<broker>-*.json``."""
    info, only, clock = meta(), args.only.split(","), Stopwatch()  # load and commit first
    info["broker"] = args.bootstrap or broker_label(args.broker)
    with tempfile.TemporaryDirectory() as folder, \
            running_broker(args.bootstrap, args.broker) as bootstrap, JudgeProc(0) as judge:
        todo = steps((bootstrap, judge.api_base, Path(folder)))
        figs = {}
        for figure in (f for f in figures if f in only):
            figs[figure] = todo[figure]()
            print("\n".join(f"  {m}: {f}" for m, f in rows({figure: figs[figure]})), flush=True)
    info["wall_s"] = clock.seconds
    table = rows(figs)
    print_figures(info, table)
    write_json(f"{name}-{args.broker}", {"meta": info, "figures": figs, "rows": table})
    return 0
