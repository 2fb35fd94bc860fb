"""3. Latency: produce → result at half the measured max rate.

    python bench/worker/latency.py [--latency-ms 200] [--max-rate 40] [--seconds 30]

A paced producer sends at half ``--max-rate`` (in ``run.py``: the judge-bound
rate measured at the default concurrency) and keeps each message's send time;
a consumer in the same process (same clock, ``fetch_max_wait_ms`` 10) notes
when its result arrives. Reported: p50/p95/p99 of arrival - send, and the
part spent before the worker's producer stamped the result (its Kafka
timestamp). Target: p99 <= judge latency + 250 ms.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from bench.common import (JudgeProc, cases, kill_workers, meta, new_env, note_arrivals,
                          print_table, row, running_broker, start_process, write_json)


async def _paced(producer: AIOKafkaProducer, topic: str, values: list[Any], rate: float,
                 sent: dict[str, float]) -> None:
    start = time.monotonic()
    for i, (key, value, _) in enumerate(values):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        sent[key.decode()] = time.time()
        await producer.send(topic, value, key=key)  # enqueued; linger 0 sends at once


async def _run(bootstrap: str, topic_in: str, topic_out: str, rate: float, seconds: float
               ) -> tuple[dict[str, float], dict[str, tuple[float, Any]]]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    await producer.start()
    sent: dict[str, float] = {}
    arrivals: dict[str, tuple[float, Any]] = {}
    try:
        warm = cases(10, prefix="warm")
        for key, value, _ in warm:  # worker and consumer both ready before the clock runs
            await producer.send(topic_in, value, key=key)
        await note_arrivals(bootstrap, topic_out, arrivals, expect=10, timeout=120)
        values = cases(int(rate * seconds), prefix="lat")
        consumer = asyncio.ensure_future(
            note_arrivals(bootstrap, topic_out, arrivals, expect=10 + len(values),
                          timeout=seconds + 60))
        await _paced(producer, topic_in, values, rate, sent)
        await consumer
    finally:
        await producer.stop()
    return sent, arrivals


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def figures(sent: dict[str, float], arrivals: dict[str, tuple[float, Any]]) -> dict[str, Any]:
    total = [(arrivals[k][0] - t) * 1000 for k, t in sent.items() if k in arrivals]
    worker = [arrivals[k][1].timestamp - t * 1000 for k, t in sent.items() if k in arrivals]
    out: dict[str, Any] = {"sent": len(sent), "received": len(total)}
    if total:
        for p in (50, 95, 99):
            out[f"p{p}_ms"] = round(_pct(total, p), 1)
            out[f"worker_p{p}_ms"] = round(_pct(worker, p), 1)
        out["max_ms"] = round(max(total), 1)
    return out


def measure(bootstrap: str, tmp: Path, *, latency_ms: float = 200, max_rate: float = 40,
            seconds: float = 30, experiment: str = "", **settings: Any) -> dict[str, Any]:
    rate = max_rate / 2
    with JudgeProc(latency_ms) as judge:
        env = new_env(bootstrap, judge.api_base, tmp, **settings)
        start_process(env, "guardrail", experiment)
        try:
            sent, arrivals = asyncio.run(_run(bootstrap, env.topic("input"),
                                              env.topic("results"), rate, seconds))
        finally:
            kill_workers(env)
    out = {"latency_ms": latency_ms, "max_rate": max_rate, "rate": rate, "seconds": seconds,
           "experiment": experiment, "settings": settings, **figures(sent, arrivals)}
    print(f"  latency at {rate:.1f} msgs/s: p50 {out.get('p50_ms')} p95 {out.get('p95_ms')} "
          f"p99 {out.get('p99_ms')} ms ({out['received']}/{out['sent']})", flush=True)
    return out


def rows(r: dict[str, Any]) -> list[dict[str, Any]]:
    budget = r["latency_ms"] + 250
    p99 = r.get("p99_ms")
    ok = p99 is not None and p99 <= budget and r["received"] == r["sent"]
    return [row(f"3 latency at {r['rate']:.0f} msgs/s (judge {r['latency_ms']:.0f} ms)",
                f"p50 {r.get('p50_ms')} / p95 {r.get('p95_ms')} / p99 {p99} ms "
                f"(worker part p99 {r.get('worker_p99_ms')})",
                f"p99 <= {budget:.0f} ms", None if p99 is None else budget / p99, ok)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=200)
    parser.add_argument("--max-rate", type=float, default=40.0,
                        help="measured max msgs/s (default: the C=16 limit, 16/0.2/2)")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--experiment", default="", help="patch from bench/worker_exp.py")
    parser.add_argument("--batch-within", type=float, help="worker batch_within (s)")
    parser.add_argument("--bootstrap", help="use this broker instead of an embedded one")
    args = parser.parse_args()
    info = meta()  # load and commit before the run
    extra = {} if args.batch_within is None else {"batch_within": args.batch_within}
    with tempfile.TemporaryDirectory() as tmp, running_broker(args.bootstrap) as bootstrap:
        r = measure(bootstrap, Path(tmp), latency_ms=args.latency_ms, max_rate=args.max_rate,
                    seconds=args.seconds, experiment=args.experiment, **extra)
    table = rows(r)
    print_table(table, info)
    write_json("latency", {"meta": info, "run": r, "rows": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
