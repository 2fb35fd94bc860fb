"""Agent runs (issue 30): spans through run assembly to a verdict, root end to
result, memory of open runs, plain chat spans with runs on and off.

    python bench/agent_runs.py [--broker embedded|apache] [--runs 2000]
        [--open-runs 10000] [--only throughput,settle,memory,plain]

A fresh worker per figure (``input_format=otlp``, 2 partitions, warmed by five
judged chat spans), the stand-in judge answering at once. A run is OTel GenAI
spans made by the SDK (``tests/support/run_traffic.py``), ``agent_run(tools=4)``:
an ``invoke_agent`` root, 4 x (a chat span calling a tool + the tool span) and
the answer's chat span = 10 spans, each its own OTLP record on a random
partition (no key, as the Collector's kafka exporter); texts differ per run.

1. throughput: ``--runs`` runs interleaved at random (``spread``: the root first
   in half the runs, last in the others); spans / (last result's Kafka timestamp
   - first record's send), settle 0.5 s (the sweep ticks every second); beside
   it the same records with ``agent_runs=false``, today's per-span path (each
   run's answer span judged alone, the other nine skipped).
2. root end -> result: ``--run-rate`` runs/s for ``--seconds``, each root sent
   once its run's other spans were acked; from the root's ack to the result's
   arrival here, at settle 5 s (default) and 1 s: the settle, up to 1 s until
   the sweep sees the run due, and a tick's trip through the run-spans topic.
3. memory: ``--open-runs`` runs held open (settle, idle 3,600 s) of 10 spans,
   ``agent_run(tools=5, with_root=False)`` less its answer (a run still
   working); VmRSS and the ``/metrics`` gauges once all are held, less the RSS
   before (after the warm-up and 200 open runs), per 10,000 runs.
4. plain chat spans (in no run) at ``--chat-rate``/s for ``--seconds``: produce
   -> result p50/p95, agent_runs on and off.

Prints figures (asserts nothing about time); raw ones: bench/results/agent_runs-BROKER-*.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
import urllib.request
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from common import (BROKERS, ROOT, JudgeProc, Stopwatch, broker_label, kill_workers, meta,
                    new_env, produce_values, rss_mb, running_broker, start_process, write_json)
from opentelemetry.trace import format_span_id
from tests.support.harness import poll

sys.path.insert(0, str(ROOT / "tests"))  # run_traffic imports its neighbours as support.*
from support.otel_traffic import otlp_proto  # noqa: E402
from support.run_traffic import SyntheticRun, agent_run, chat_span_record, spread  # noqa: E402

PARTITIONS = 2
FIGURES = ("throughput", "settle", "memory", "plain")
WARM_OPEN_RUNS = 200
GAUGES = ("guardrail_open_runs", "guardrail_open_run_spans", "guardrail_open_run_bytes")
Records = list[tuple[int, bytes]]  # (partition, OTLP record)
RNG = random.Random(5)  # the partition of each paced record
Rig = tuple[str, str, Path]  # where workers run: bootstrap, the judge's API base, a folder


class Results:
    """Result records by case id as they arrive: (arrival epoch s, Kafka timestamp ms);
    a case id seen again is counted in ``repeats``, its first arrival kept."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[float, int]] = {}
        self.repeats = 0

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
                    case_id = json.loads(message.value)["case_id"]
                    if case_id in self.seen:
                        self.repeats += 1
                    else:
                        self.seen[case_id] = (now, message.timestamp)
        finally:
            await consumer.stop()

    async def wait(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while len(self.seen) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return len(self.seen) >= count


async def send_all(producer: AIOKafkaProducer, topic: str, records: Records) -> None:
    futures = [await producer.send(topic, value, partition=p) for p, value in records]
    await asyncio.gather(*futures)


@asynccontextmanager
async def watching(env: Any, linger_ms: int) -> Any:
    """A results consumer and an acks=all producer, once five warm-up chat spans are judged."""
    results, stop = Results(), asyncio.Event()
    task = asyncio.ensure_future(results.watch(env.bootstrap, env.topic("results"), stop))
    producer = AIOKafkaProducer(bootstrap_servers=env.bootstrap, acks="all", linger_ms=linger_ms)
    await producer.start()
    try:
        warm = [chat_span_record(f"A warm-up answer {i}.")[0] for i in range(5)]
        await send_all(producer, env.topic("input"), [(RNG.randrange(PARTITIONS), v) for v in warm])
        if not await results.wait(5, 120):
            raise RuntimeError("the warm-up spans were not judged")
        yield results, producer
    finally:
        await producer.stop()
        stop.set()
        await task


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return response.read().decode()


def _healthy(port: int) -> bool:
    try:
        return json.loads(_get(port, "/health")).get("status") == "ok"
    except OSError:
        return False


def gauges(port: int) -> dict[str, float]:
    """The open-runs gauges from ``/metrics`` (the sweep refreshes them every second)."""
    pairs = (line.partition(" ") for line in _get(port, "/metrics").splitlines())
    return {name: float(value) for name, _, value in pairs if name in GAUGES}


@contextmanager
def worker(rig: Rig, name: str, **settings: Any) -> Any:
    """A fresh worker on fresh topics, answering ``/health`` ok; killed afterwards."""
    bootstrap, api_base, folder = rig[0], rig[1], rig[2] / name
    folder.mkdir(parents=True)
    env = new_env(bootstrap, api_base, folder, input_format="otlp", topic_partitions=PARTITIONS,
                  **settings)
    proc = start_process(env, "guardrail")
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


def runs_of(n: int, tag: str, tools: int = 4, with_root: bool = True) -> list[SyntheticRun]:
    """``n`` runs with texts of their own (no judgment-cache hits)."""
    return [agent_run(tools=tools, with_root=with_root, request=f"Summarise inbox {tag}-{i}.",
                      arguments={"folder": f"{tag}-{i}"}, result=f"{i % 7} new messages.",
                      answer=f"You have {i % 7} new messages in {tag}-{i}.") for i in range(n)]


# 1. Throughput --------------------------------------------------------------------------

async def _drain(env: Any, records: Records, expect: int) -> dict[str, Any]:
    async with watching(env, linger_ms=5) as (results, producer):
        warm_ids, started = set(results.seen), time.time()
        await send_all(producer, env.topic("input"), records)
        produced = time.time() - started
        await results.wait(len(warm_ids) + expect, 300)
        await asyncio.sleep(1.0)  # time for an extra result to show
    stamps = [ts for case, (_, ts) in results.seen.items() if case not in warm_ids]
    elapsed = (max(stamps) / 1000 - started) if stamps else None
    return {"records": len(records), "results": len(stamps), "repeats": results.repeats,
            "produce_s": round(produced, 2), "elapsed_s": elapsed and round(elapsed, 2),
            "spans_per_s": elapsed and len(records) / elapsed,
            "results_per_s": elapsed and len(stamps) / elapsed}


def throughput(rig: Rig, n: int) -> dict[str, Any]:
    records = spread(runs_of(n, "tp"), partitions=PARTITIONS, seed=7)
    out = {}
    for name, agent_runs in (("runs", True), ("per_span", False)):
        with worker(rig, f"tp-{name}", agent_runs=agent_runs,
                    run_settle_seconds=0.5) as (env, _):
            r = asyncio.run(_drain(env, records, n))
            tell_missing(env, f"throughput {name}: results", r["results"], n)
        out[name] = {**r, "runs": n}
    return out


# 2. Root end -> result ------------------------------------------------------------------

async def _paced(env: Any, rate: float, items: list[Any], send: Any,
                 timeout: float) -> tuple[dict[str, float], Results]:
    """``send(producer, topic, item, stamps)`` for each item, ``1 / rate`` s apart (each
    keeps its case id's start time in ``stamps``); then results, one per item or timeout."""
    stamps: dict[str, float] = {}
    topic = env.topic("input")
    async with watching(env, linger_ms=0) as (results, producer):
        start, tasks = time.monotonic(), []
        for i, item in enumerate(items):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(send(producer, topic, item, stamps)))
        await asyncio.gather(*tasks)
        await results.wait(5 + len(items), timeout)
    return stamps, results


async def _send_run(producer: AIOKafkaProducer, topic: str, run: SyntheticRun,
                    acked: dict[str, float]) -> None:
    """The run's other spans, acked; then its root, whose ack time is kept."""
    root = [s for s in run.spans if format_span_id(s.context.span_id) == run.root_span_id]
    rest = [s for s in run.spans if s not in root]
    await send_all(producer, topic, [(RNG.randrange(PARTITIONS), otlp_proto([s])) for s in rest])
    await send_all(producer, topic, [(RNG.randrange(PARTITIONS), otlp_proto(root))])
    acked[f"{run.trace_id}:{run.root_span_id}"] = time.time()


def root_to_result(rig: Rig, rate: float, seconds: float) -> dict[str, Any]:
    out = {}
    for settle in (5.0, 1.0):
        runs = runs_of(int(rate * seconds), f"settle{settle}")
        with worker(rig, f"settle-{settle}", run_settle_seconds=settle) as (env, _):
            acked, results = asyncio.run(_paced(env, rate, runs, _send_run, settle + 90))
            lat = latencies(env, f"settle {settle}", acked, results)
        out[f"settle_{settle:g}"] = {"settle_s": settle, "runs_per_s": rate, **lat}
    return out


# 3. Memory of open runs -----------------------------------------------------------------

def open_run_records(n: int, tag: str) -> Records:
    """``n`` runs still working: 5 tool rounds, no answer span and no root (10 spans)."""
    rng = random.Random(tag)
    return [(rng.randrange(PARTITIONS), otlp_proto([span]))
            for run in runs_of(n, tag, tools=5, with_root=False)
            for span in run.spans[:-1]]  # the answer span ends last: not there yet


def steady_rss(pid: int) -> float:
    """The median of three VmRSS readings a second apart."""
    values = []
    for _ in range(3):
        time.sleep(1.0)
        values.append(rss_mb(pid) or 0.0)
    return round(sorted(values)[1], 1)


def wait_held(port: int, spans: int, timeout: float = 180) -> dict[str, float]:
    """The gauges once ``spans`` spans are held (or at the timeout)."""
    return poll(lambda: (g := gauges(port)).get("guardrail_open_run_spans", 0) >= spans and g,
                timeout, 0.5) or gauges(port)


def memory(rig: Rig, n: int) -> dict[str, Any]:
    warm, records = open_run_records(WARM_OPEN_RUNS, "warm"), open_run_records(n, "open")
    with worker(rig, "memory", run_settle_seconds=3600, run_idle_seconds=3600) as (env, proc):
        cold = rss_mb(proc.pid)
        asyncio.run(_drain(env, warm, 0))  # opened after the warm-up spans were judged
        base = wait_held(proc.web_port, len(warm))
        idle, started = steady_rss(proc.pid), time.time()
        produce_values(env.bootstrap, env.topic("input"), [(None, v, None) for _, v in records])
        produced = time.time() - started  # no key, no partition: aiokafka spreads them
        held = wait_held(proc.web_port, len(warm) + len(records))
        absorbed, busy = time.time() - started, steady_rss(proc.pid)
        tell_missing(env, "memory: spans held", int(held.get("guardrail_open_run_spans", 0)),
                     len(warm) + len(records))
    runs = held.get("guardrail_open_runs", 0) - base.get("guardrail_open_runs", 0)
    span_mb = (held.get("guardrail_open_run_bytes", 0)
               - base.get("guardrail_open_run_bytes", 0)) / 1e6
    per_10k = 10_000 / runs if runs else 0.0
    return {"runs": n, "spans": len(records), "warm_runs": WARM_OPEN_RUNS, "cold_rss_mb": cold,
            "idle_rss_mb": idle, "held_rss_mb": busy, "base_gauges": base, "gauges": held,
            "produce_s": round(produced, 1), "absorbed_s": round(absorbed, 1), "runs_held": runs,
            "rss_mb_per_10k_runs": round((busy - idle) * per_10k, 1),
            "span_mb_per_10k_runs": round(span_mb * per_10k, 1)}


# 4. Plain chat spans, agent runs on and off --------------------------------------------

async def _send_chat(producer: AIOKafkaProducer, topic: str, chat: tuple[bytes, str],
                     sent: dict[str, float]) -> None:
    value, case_id = chat
    sent[case_id] = time.time()  # the send time, as latency.py
    await producer.send(topic, value, partition=RNG.randrange(PARTITIONS))


def plain_chat(rig: Rig, rate: float, seconds: float) -> dict[str, Any]:
    out = {}
    for name, agent_runs in (("on", True), ("off", False)):
        chats = [chat_span_record(f"Plain answer {name} {i}: the capital of France is Paris.")
                 for i in range(int(rate * seconds))]
        with worker(rig, f"plain-{name}", agent_runs=agent_runs) as (env, _):
            sent, results = asyncio.run(_paced(env, rate, chats, _send_chat, 60))
            lat = latencies(env, f"plain chat, agent_runs {name}", sent, results)
        out[name] = {"agent_runs": agent_runs, "rate": rate, **lat}
    return out


# Table ----------------------------------------------------------------------------------

def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None or value != value else f"{value:,.{digits}f}"  # None, NaN


def rows(figs: dict[str, Any]) -> list[tuple[str, str]]:
    """(measure, figure) per row of the table."""
    out = []
    if tp := figs.get("throughput"):
        t, s = tp["runs"], tp["per_span"]
        ratio = (t["spans_per_s"] or 0) / (s["spans_per_s"] or float("nan"))
        out += [(f"spans/s through assembly to verdict, {t['runs']:,} runs x 10 spans "
                 "(settle 0.5 s)", f"{_num(t['spans_per_s'])} spans/s = "
                 f"{_num(t['results_per_s'], 1)} runs/s ({t['results']:,} runs judged in "
                 f"{t['elapsed_s']} s); {_num(ratio, 2)}x the per-span path"),
                ("the same spans, per-span path (agent_runs=false)",
                 f"{_num(s['spans_per_s'])} spans/s ({s['results']:,} answer spans judged in "
                 f"{s['elapsed_s']} s)")]
    out += [(f"root end -> result, settle {r['settle_s']:g} s ({r['runs_per_s']:g} runs/s)",
             f"p50 {_num(r['p50_ms'])} ms, p95 {_num(r['p95_ms'])} ms ({r['results']}/"
             f"{r['sent']} runs)") for r in figs.get("settle", {}).values()]
    if m := figs.get("memory"):
        out.append((f"memory per 10,000 open runs of 10 spans ({m['runs']:,} held)",
                    f"{_num(m['rss_mb_per_10k_runs'], 1)} MB RSS ({m['idle_rss_mb']} -> "
                    f"{m['held_rss_mb']} MB); spans held {_num(m['span_mb_per_10k_runs'], 1)} MB;"
                    f" {m['spans']:,} spans held in {m['absorbed_s']} s"))
    if pl := figs.get("plain"):
        on, off = pl["on"], pl["off"]
        out.append((f"plain chat span, produce -> result at {on['rate']:g}/s",
                    f"agent_runs on: p50 {on['p50_ms']} / p95 {on['p95_ms']} ms; off: p50 "
                    f"{off['p50_ms']} / p95 {off['p95_ms']} ms"))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000, help="runs of the throughput figure")
    parser.add_argument("--open-runs", type=int, default=10_000, help="runs held open")
    parser.add_argument("--run-rate", type=float, default=10.0, help="runs/s, root -> result")
    parser.add_argument("--chat-rate", type=float, default=50.0, help="plain chat spans/s")
    parser.add_argument("--seconds", type=float, default=15.0, help="length of paced runs")
    parser.add_argument("--only", default=",".join(FIGURES))
    parser.add_argument("--bootstrap", help="use this broker instead of a fresh one")
    parser.add_argument("--broker", choices=BROKERS, default="embedded",
                        help="the fresh broker: embedded (default) or Apache Kafka")
    args = parser.parse_args()
    info, only, clock = meta(), args.only.split(","), Stopwatch()  # load and commit first
    info["broker"] = args.bootstrap or broker_label(args.broker)
    with tempfile.TemporaryDirectory() as folder, \
            running_broker(args.bootstrap, args.broker) as bootstrap, JudgeProc(0) as judge:
        rig = (bootstrap, judge.api_base, Path(folder))
        steps = {"throughput": lambda: throughput(rig, args.runs),
                 "settle": lambda: root_to_result(rig, args.run_rate, args.seconds),
                 "memory": lambda: memory(rig, args.open_runs),
                 "plain": lambda: plain_chat(rig, args.chat_rate, args.seconds)}
        figs = {}
        for name in (n for n in FIGURES if n in only):
            figs[name] = steps[name]()
            print("\n".join(f"  {m}: {f}" for m, f in rows({name: figs[name]})), flush=True)
    info["wall_s"] = clock.seconds
    table = rows(figs)
    print(f"\n{info['date']}  {info['machine']}  {info['broker']}  commit {info['commit']}  "
          f"load {info['load_at_start']}  ({info['wall_s']} s)\n| measure | figure |\n|---|---|")
    print("\n".join(f"| {measure} | {figure} |" for measure, figure in table))
    write_json(f"agent_runs-{args.broker}", {"meta": info, "figures": figs, "rows": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
