"""The broker's own produce → fetch latency as its log grows, with no worker.

    python bench/gate/broker_growth.py [--broker embedded|apache] [--rate 160] [--seconds 150]

A paced producer (no linger) writes records of 400 bytes, 100 keys, to a topic of
two partitions while a group-less consumer (10 ms fetch wait) reads them; reported
per fifth of the run: p50 / p99 / max of send → fetched. A broker whose latency grows
with what it holds shows it here, apart from anything guardrail does: the gate
latency bench's tail on the embedded broker grows toward the end of its run.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from arrivals import broker_parser, percentile, run_and_report

from bench.common import row
from guardrail.kafka.settings import KafkaSettings
from guardrail.kafka.topics import ensure_topics


async def _send_and_read(bootstrap: str, rate: float, seconds: float) -> list[float]:
    topic, n = f"growth-{uuid.uuid4().hex[:8]}", int(rate * seconds)
    await ensure_topics(KafkaSettings(bootstrap_servers=bootstrap), {topic: 2})
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", fetch_max_wait_ms=10)
    await producer.start()
    await consumer.start()
    sent: dict[int, float] = {}
    took: list[float] = [0.0] * n
    seen = 0

    async def read() -> None:
        nonlocal seen
        while seen < n:
            batch = await consumer.getmany(timeout_ms=100)
            now = time.monotonic()
            for records in batch.values():
                for record in records:
                    i = int(record.value.split(b" ", 1)[0])
                    took[i] = (now - sent[i]) * 1000
                    seen += 1

    reader = asyncio.ensure_future(read())
    try:
        start = time.monotonic()
        for i in range(n):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            sent[i] = time.monotonic()
            await producer.send(topic, b"%d " % i + b"x" * 400, key=b"k%d" % (i % 100))
        await asyncio.wait_for(reader, 120)
    finally:
        reader.cancel()
        await producer.stop()
        await consumer.stop()
    return took


def measure(bootstrap: str, tmp: Path, *, rate: float, seconds: float) -> dict[str, Any]:
    took = asyncio.run(_send_and_read(bootstrap, rate, seconds))
    fifth = len(took) // 5
    parts = [took[k * fifth:(k + 1) * fifth] for k in range(5)]
    return {"rate": rate, "seconds": seconds, "records": len(took),
            "fifths": [{"p50_ms": round(percentile(p, 50), 1),
                        "p99_ms": round(percentile(p, 99), 1), "max_ms": round(max(p), 1)}
                       for p in parts]}


def rows(r: dict[str, Any], broker: str) -> list[dict[str, Any]]:
    figure = "; ".join(f"{f['p50_ms']} / {f['p99_ms']} / {f['max_ms']}" for f in r["fifths"])
    return [row(f"broker produce → fetch, {broker} ({r['rate']:.0f} records/s for "
                f"{r['seconds']:.0f} s), p50 / p99 / max ms per fifth of the run",
                figure, "none (a property of the broker)", None, None)]


def main() -> int:
    parser = broker_parser(__doc__)
    parser.add_argument("--rate", type=float, default=160)
    parser.add_argument("--seconds", type=float, default=150)
    args = parser.parse_args()
    return run_and_report("broker-growth", args, measure, rows, rate=args.rate,
                          seconds=args.seconds)


if __name__ == "__main__":
    raise SystemExit(main())
