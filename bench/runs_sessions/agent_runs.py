"""Agent runs (issue 30): spans through run assembly to a verdict, root end to
result, memory of open runs, plain chat spans with runs on and off.

    python bench/runs_sessions/agent_runs.py [--broker embedded|apache] [--runs 2000]
        [--open-runs 10000] [--only throughput,settle,memory,plain] [--profile]

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
   run's answer span judged alone, the other nine skipped); and each worker's
   own CPU per span over the drain (``/proc/PID/stat``). ``--profile`` records
   each of the two workers with py-spy (200 samples/s) over its whole drain
   and splits its CPU per span by part (``bench/profiling.py``'s ``RUN_PARTS``;
   raw stacks: bench/results/profile-agent_runs-*.txt).
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

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import asyncio
import random
import sys
import time
from typing import Any

from aiokafka import AIOKafkaProducer
from bench import profiling as prof
from bench.common import RESULTS, ROOT, produce_values, rss_mb
from bench.cpu_sampler import cpu_seconds
from bench.runs_sessions.live import (PARTITIONS, Records, Rig, broker_options, drain, latencies,
                                      metric_values, num, paced, run_figures, send_all, steady_rss,
                                      tell_missing, worker)
from opentelemetry.trace import format_span_id
from tests.support.harness import poll

sys.path.insert(0, str(ROOT / "tests"))  # run_traffic imports its neighbours as support.*
from support.otel_traffic import otlp_proto  # noqa: E402
from support.run_traffic import SyntheticRun, agent_run, chat_span_record, spread  # noqa: E402

OTLP = {"input_format": "otlp"}
FIGURES = ("throughput", "settle", "memory", "plain")
WARM_OPEN_RUNS = 200
GAUGES = ("guardrail_open_runs", "guardrail_open_run_spans", "guardrail_open_run_bytes")
RNG = random.Random(5)  # the partition of each paced record


def warm_spans() -> Records:
    """Five judged chat spans before each measurement (connections, first batches)."""
    return [(RNG.randrange(PARTITIONS), chat_span_record(f"A warm-up answer {i}.")[0])
            for i in range(5)]


def gauges(port: int) -> dict[str, float]:
    """The open-runs gauges from ``/metrics`` (the sweep refreshes them every second)."""
    return metric_values(port, GAUGES)


def runs_of(n: int, tag: str, tools: int = 4, with_root: bool = True) -> list[SyntheticRun]:
    """``n`` runs with texts of their own (no judgment-cache hits)."""
    return [agent_run(tools=tools, with_root=with_root, request=f"Summarise inbox {tag}-{i}.",
                      arguments={"folder": f"{tag}-{i}"}, result=f"{i % 7} new messages.",
                      answer=f"You have {i % 7} new messages in {tag}-{i}.") for i in range(n)]


# 1. Throughput --------------------------------------------------------------------------

def throughput(rig: Rig, n: int, profile: bool = False) -> dict[str, Any]:
    records = spread(runs_of(n, "tp"), partitions=PARTITIONS, seed=7)
    out = {}
    for name, agent_runs in (("runs", True), ("per_span", False)):
        with worker(rig, f"tp-{name}", **OTLP, agent_runs=agent_runs,
                    run_settle_seconds=0.5) as (env, proc):
            before = cpu_seconds(proc.pid) or 0.0
            profiling = (prof.start(proc.pid, 3600, RESULTS / f"profile-agent_runs-{name}.txt",
                                    rate=200) if profile else None)
            r, _ = asyncio.run(drain(env, records, n, warm_spans()))
            # The worker's own CPU over the drain (warm-up and the 1 s wait included).
            cpu = (cpu_seconds(proc.pid) or 0.0) - before
            profiled = profiling is not None and prof.stop(profiling)
            tell_missing(env, f"throughput {name}: results", r["results"], n)
        out[name] = {**r, "runs": n, "worker_cpu_s": round(cpu, 2),
                     "cpu_ms_per_span": round(cpu * 1000 / len(records), 3)}
        if profiled:
            out[name]["parts"] = prof.parts(profiling.out, prof.RUN_PARTS)
            prof.show_parts(out[name]["parts"], f"a span, {name} worker",
                            out[name]["cpu_ms_per_span"])
    return out


# 2. Root end -> result ------------------------------------------------------------------

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
        with worker(rig, f"settle-{settle}", **OTLP, run_settle_seconds=settle) as (env, _):
            acked, results = asyncio.run(paced(env, rate, runs, _send_run, settle + 90,
                                               warm=warm_spans()))
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


def wait_held(port: int, spans: int, timeout: float = 180) -> dict[str, float]:
    """The gauges once ``spans`` spans are held (or at the timeout)."""
    return poll(lambda: (g := gauges(port)).get("guardrail_open_run_spans", 0) >= spans and g,
                timeout, 0.5) or gauges(port)


def memory(rig: Rig, n: int) -> dict[str, Any]:
    warm, records = open_run_records(WARM_OPEN_RUNS, "warm"), open_run_records(n, "open")
    with worker(rig, "memory", **OTLP, run_settle_seconds=3600,
                run_idle_seconds=3600) as (env, proc):
        cold = rss_mb(proc.pid)
        asyncio.run(drain(env, warm, 0, warm_spans()))  # opened after the warm-up's judgments
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
        with worker(rig, f"plain-{name}", **OTLP, agent_runs=agent_runs) as (env, _):
            sent, results = asyncio.run(paced(env, rate, chats, _send_chat, 60,
                                              warm=warm_spans()))
            lat = latencies(env, f"plain chat, agent_runs {name}", sent, results)
        out[name] = {"agent_runs": agent_runs, "rate": rate, **lat}
    return out


# Table ----------------------------------------------------------------------------------

def rows(figs: dict[str, Any]) -> list[tuple[str, str]]:
    """(measure, figure) per row of the table."""
    out = []
    if tp := figs.get("throughput"):
        t, s = tp["runs"], tp["per_span"]
        ratio = (t["records_per_s"] or 0) / (s["records_per_s"] or float("nan"))
        out += [(f"spans/s through assembly to verdict, {t['runs']:,} runs x 10 spans "
                 "(settle 0.5 s)", f"{num(t['records_per_s'])} spans/s = "
                 f"{num(t['results_per_s'], 1)} runs/s ({t['results']:,} runs judged in "
                 f"{t['elapsed_s']} s); {num(ratio, 2)}x the per-span path"),
                ("the same spans, per-span path (agent_runs=false)",
                 f"{num(s['records_per_s'])} spans/s ({s['results']:,} answer spans judged in "
                 f"{s['elapsed_s']} s)"),
                ("worker CPU per span, runs path / per-span path",
                 f"{t['cpu_ms_per_span']} ms / {s['cpu_ms_per_span']} ms = "
                 f"{num(t['cpu_ms_per_span'] / (s['cpu_ms_per_span'] or float('nan')), 2)}x")]
    out += [(f"root end -> result, settle {r['settle_s']:g} s ({r['runs_per_s']:g} runs/s)",
             f"p50 {num(r['p50_ms'])} ms, p95 {num(r['p95_ms'])} ms ({r['results']}/"
             f"{r['sent']} runs)") for r in figs.get("settle", {}).values()]
    if m := figs.get("memory"):
        out.append((f"memory per 10,000 open runs of 10 spans ({m['runs']:,} held)",
                    f"{num(m['rss_mb_per_10k_runs'], 1)} MB RSS ({m['idle_rss_mb']} -> "
                    f"{m['held_rss_mb']} MB); spans held {num(m['span_mb_per_10k_runs'], 1)} MB;"
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
    parser.add_argument("--profile", action="store_true",
                        help="py-spy the throughput workers, their CPU per span by part")
    broker_options(parser, FIGURES)
    args = parser.parse_args()

    def steps(rig: Rig) -> dict[str, Any]:
        return {"throughput": lambda: throughput(rig, args.runs, args.profile),
                "settle": lambda: root_to_result(rig, args.run_rate, args.seconds),
                "memory": lambda: memory(rig, args.open_runs),
                "plain": lambda: plain_chat(rig, args.chat_rate, args.seconds)}

    return run_figures("agent_runs", args, FIGURES, steps, rows)


if __name__ == "__main__":
    raise SystemExit(main())
