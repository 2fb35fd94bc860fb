"""What the gate adds to a record's way: produce → approved, against the judge's own latency.

    python bench/gate/latency.py [--broker embedded|apache] [--latency-ms 200]
        [--concurrency 64] [--rate R] [--seconds 30] [--transactional]
        [--gate-batch-within S] [--fetch-wait-ms MS] [--transaction-ms MS]

A paced producer sends records of 1,000 keys at ``--rate`` (default: half the
rate ``--concurrency`` judge calls in flight allow (one call per record, its metrics asked together;
the stand-in judge answers after exactly ``--latency-ms``)), keeping each record's
send time; a consumer in the same process (same clock) notes when each reaches
the approved topic (read ``read_committed`` with ``--transactional``, as its
consumers read it), and when its result reaches the results topic (the path
of a worker that only watches), after 10 s at that rate to warm up. Reported:
p50/p95/p99 of send → approved, what the gate adds over the judge (the same
minus ``--latency-ms``), and from the worker's ``/metrics`` the mean time of a
judge call as the worker sees it and the mean from a decision to its forward
(``guardrail_gate_order_wait_seconds``). Target: p99 ≤ the judge's p99 + 50 ms.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from arrivals import (broker_parser, gate_bench_env, keyed_records, note_arrivals, percentile,
                      run_and_report)

from bench.common import JudgeProc, kill_workers, row
from tests.support.gate_traffic import start_ready
from tests.support.harness import worker_page

#: One judge call per record: all its metrics in one call (``judge_calls: per_message``,
#: the default).
CALLS_PER_RECORD = 1
#: Seconds at the measured rate before the measured records are sent.
WARM_SECONDS = 10


async def _paced(bootstrap: str, topic: str, records: list[Any], rate: float,
                 sent: dict[str, float]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    await producer.start()
    try:
        start = time.monotonic()
        for i, (key, value, _) in enumerate(records):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            sent[json.loads(value)["case_id"]] = time.time()
            await producer.send(topic, value, key=key)
        await producer.flush()
    finally:
        await producer.stop()


async def _run(env: Any, records: list[Any], rate: float, timeout: float, *,
               committed_only: bool = False
               ) -> tuple[dict[str, float], dict[str, Any], dict[str, Any]]:
    sent: dict[str, float] = {}
    approved: dict[str, Any] = {}
    results: dict[str, Any] = {}
    n, prefix = len(records), json.loads(records[0][1])["case_id"].split("-")[0] + "-"
    # A transactional gate's forward arrives when its transaction commits: read as
    # a downstream consumer of it reads (read_committed), not as the log has it.
    isolation = "read_committed" if committed_only else "read_uncommitted"
    readers = asyncio.gather(*(
        note_arrivals(env.bootstrap, topic, into, expect=n, timeout=timeout, prefix=prefix,
                      isolation_level=level)
        for topic, into, level in ((env.approved, approved, isolation),
                                   (env.topic("results"), results, "read_uncommitted"))))
    await _paced(env.bootstrap, env.topic("input"), records, rate, sent)
    await readers
    if len(approved) < n:  # held instead? (the stand-in judge holds no polite answer)
        held: dict[str, Any] = {}
        await note_arrivals(env.bootstrap, env.held, held, expect=n - len(approved), timeout=5,
                            prefix=prefix)
        reasons = Counter(dict(m.headers).get("guardrail.hold_reason") for _, m in held.values())
        print(f"  {n - len(approved)} not approved; held: {dict(reasons)}", flush=True)
    return sent, approved, results


def _means(page: str) -> dict[str, float]:
    """Mean judge call and mean decision → forward (ms), from a ``/metrics`` page."""
    values = {}
    for line in page.splitlines():
        name, _, value = line.partition(" ")
        if name.endswith(("_sum", "_count")) and "{" not in name:
            values[name] = float(value)
    out = {}
    for label, series in (("judge_call_mean_ms", "guardrail_judge_latency_seconds"),
                          ("decision_to_forward_mean_ms", "guardrail_gate_order_wait_seconds")):
        count = values.get(f"{series}_count")
        if count:
            out[label] = round(values[f"{series}_sum"] / count * 1000, 1)
    return out


def _spread(sent: dict[str, float], arrived: dict[str, Any], judge_ms: float) -> dict[str, Any]:
    took = [(arrived[k][0] - t) * 1000 for k, t in sent.items() if k in arrived]
    out: dict[str, Any] = {"received": len(took)}
    if took:  # the worst per fifth of the run: a tail at the start or throughout?
        fifth = max(1, len(took) // 5)
        out["max_ms_by_fifth"] = [round(max(took[i:i + fifth]), 1)
                                  for i in range(0, fifth * 5, fifth)]
    for p in (50, 95, 99):
        if took:
            out[f"p{p}_ms"] = round(percentile(took, p), 1)
            out[f"added_p{p}_ms"] = round(percentile(took, p) - judge_ms, 1)
    return out


def measure(bootstrap: str, tmp: Path, *, latency_ms: float, concurrency: int, seconds: float,
            transactional: bool, gate_batch_within: float | None = None,
            fetch_wait_ms: int | None = None, rate: float | None = None,
            transaction_ms: int | None = None) -> dict[str, Any]:
    rate = rate or concurrency / (latency_ms / 1000) / CALLS_PER_RECORD / 2
    extra: dict[str, Any] = {}
    if gate_batch_within is not None:
        extra["gate_batch_within"] = gate_batch_within
    if fetch_wait_ms is not None:
        extra["gate_fetch_wait_ms"] = fetch_wait_ms
    if transactional:
        extra["gate_transactional"] = "true"
    if transaction_ms is not None:
        extra["gate_transaction_ms"] = transaction_ms
    with JudgeProc(latency_ms) as judge:
        env = gate_bench_env(bootstrap, judge.api_base, tmp, judge_concurrency=concurrency,
                             **extra)
        try:
            worker = start_ready(env, timeout=120)
            # Warm up at the measured rate (the judge's connection pool grows to the
            # calls in flight, new topics' leaders settle): the steady state is measured.
            warm = keyed_records(int(rate * WARM_SECONDS), keys=1000, prefix="warm",
                                 unsafe_every=0)
            asyncio.run(_run(env, warm, rate, 120, committed_only=transactional))
            records = keyed_records(int(rate * seconds), keys=1000, unsafe_every=0)
            sent, approved, results = asyncio.run(_run(env, records, rate, seconds + 90,
                                                       committed_only=transactional))
            seen = _means(worker_page(worker.web_port, "/metrics"))
        finally:
            kill_workers(env)
    out = {"latency_ms": latency_ms, "concurrency": concurrency, "rate": round(rate, 1),
           "seconds": seconds, "transactional": transactional, "sent": len(sent),
           "gate_batch_within": gate_batch_within, "fetch_wait_ms": fetch_wait_ms,
           "transaction_ms": transaction_ms, **seen,
           "approved": _spread(sent, approved, latency_ms),
           "results": _spread(sent, results, latency_ms)}
    a = out["approved"]
    print(f"  produce → approved at {rate:.0f} records/s: p50 {a.get('p50_ms')} p95 "
          f"{a.get('p95_ms')} p99 {a.get('p99_ms')} ms ({a['received']}/{len(sent)})", flush=True)
    return out


def rows(r: dict[str, Any], broker: str) -> list[dict[str, Any]]:
    a, w = r["approved"], r["results"]
    budget = r["latency_ms"] + 50
    p99 = a.get("p99_ms")
    ok = p99 is not None and p99 <= budget and a["received"] == r["sent"]
    txn = ", transactional" if r["transactional"] else ""
    txn += f", gate_batch_within {r['gate_batch_within']}" if r["gate_batch_within"] else ""
    txn += f", gate_fetch_wait_ms {r['fetch_wait_ms']}" if r["fetch_wait_ms"] else ""
    txn += f", gate_transaction_ms {r['transaction_ms']}" if r.get("transaction_ms") else ""
    return [row(f"gate latency, {broker}{txn} (judge {r['latency_ms']:.0f} ms, "
                f"{r['concurrency']} calls in flight, {r['rate']:.0f} records/s)",
                f"approved p50 {a.get('p50_ms')} / p95 {a.get('p95_ms')} / p99 {p99} ms "
                f"(added {a.get('added_p50_ms')} / {a.get('added_p95_ms')} / "
                f"{a.get('added_p99_ms')}); results p99 {w.get('p99_ms')} ms; judge call "
                f"{r.get('judge_call_mean_ms')} ms, decision → forward "
                f"{r.get('decision_to_forward_mean_ms')} ms (means)",
                f"p99 <= {budget:.0f} ms", None if not p99 else budget / p99, ok)]


def main() -> int:
    parser = broker_parser(__doc__)
    parser.add_argument("--latency-ms", type=float, default=200)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--transactional", action="store_true",
                        help="gate_transactional (Apache Kafka only)")
    parser.add_argument("--rate", type=float,
                        help="records/s (default: half what the calls in flight allow)")
    parser.add_argument("--gate-batch-within", type=float,
                        help="the worker's gate_batch_within (s; default: the worker's, 0.005)")
    parser.add_argument("--fetch-wait-ms", type=int,
                        help="the worker's gate_fetch_wait_ms (default: the worker's, 10)")
    parser.add_argument("--transaction-ms", type=int,
                        help="the worker's gate_transaction_ms (default: the worker's, 10)")
    args = parser.parse_args()
    return run_and_report("gate-latency", args, measure, rows, latency_ms=args.latency_ms,
                          concurrency=args.concurrency, seconds=args.seconds,
                          transactional=args.transactional,
                          gate_batch_within=args.gate_batch_within,
                          fetch_wait_ms=args.fetch_wait_ms, rate=args.rate,
                          transaction_ms=args.transaction_ms)

if __name__ == "__main__":
    raise SystemExit(main())
