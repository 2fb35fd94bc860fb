"""Baselines for the pipeline ceiling: copy input → output, nothing else.

    python bench/worker/passthrough.py faust   # a bare Faust agent, guardrail's broker options
    python bench/worker/passthrough.py raw     # a plain aiokafka consume → produce loop

Both read the same ``GUARDRAIL_*`` environment as the worker (bootstrap,
``input_topic``, ``results_topic`` as the output, ``app_id``, ``web_port``) and
run until SIGTERM. Both are at least once like the worker: the raw loop
commits only after the broker acknowledged the copies.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Any

from guardrail.config.settings import Settings, load_settings


def faust_app(settings: Settings) -> Any:
    """The per-message Faust path: ``async for`` + ``send``, Faust acks and commits."""
    import faust

    from guardrail.agents.app import faust_options

    app = faust.App(f"{settings.kafka.app_id}-faust", **faust_options(settings))
    raw = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw",
           "value_serializer": "raw"}
    source = app.topic(settings.kafka.input_topic, **raw)
    output = app.topic(settings.kafka.results_topic, **raw)

    @app.agent(source, name="bench.passthrough", concurrency=1)
    async def copy(stream: Any) -> None:
        async for event in stream.events():
            await output.send(key=event.message.key, value=event.message.value)

    return app


def run_faust(settings: Settings) -> None:
    from faust import Worker

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    worker = Worker(faust_app(settings), loglevel="warning", loop=loop, redirect_stdouts=False)
    worker.execute_from_commandline()


async def _copy_batches(consumer: Any, producer: Any, output: str, stop: asyncio.Event) -> None:
    while not stop.is_set():
        batch = await consumer.getmany(timeout_ms=200, max_records=1000)
        futures = [await producer.send(output, m.value, key=m.key)
                   for messages in batch.values() for m in messages]
        if futures:
            await asyncio.gather(*futures)
            await consumer.commit()


async def run_raw(settings: Settings) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    from guardrail.kafka.clients import client_options

    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    consumer = AIOKafkaConsumer(settings.kafka.input_topic, group_id=f"{settings.kafka.app_id}-raw",
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                **client_options(settings.kafka))
    producer = AIOKafkaProducer(acks="all", linger_ms=5, **client_options(settings.kafka))
    await consumer.start()
    await producer.start()
    try:
        await _copy_batches(consumer, producer, settings.kafka.results_topic, stop)
    finally:
        await producer.stop()
        await consumer.stop()


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "faust"
    settings = load_settings()
    if mode == "faust":
        run_faust(settings)
    elif mode == "raw":
        asyncio.run(run_raw(settings))
    else:
        print(f"unknown mode {mode!r}: faust | raw", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
