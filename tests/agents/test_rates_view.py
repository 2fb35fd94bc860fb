"""guardrail.agents.rates_view on the embedded broker: reading a window changelog
once to its real end, following it, never creating it; and the runtime's
start and stop of the view."""

import asyncio
import logging
import uuid
from types import SimpleNamespace

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from guardrail.agents.runtime import WorkerRuntime
from guardrail.agents.rates_view import RatesView, read_rates
from guardrail.kafka.changelog import ChangelogReader, RatesUnavailable
from guardrail.kafka.topics import partition_counts
from guardrail.agents.window_cells import WindowCells, changelog_topic
from guardrail.config.settings import load_settings
from guardrail.stream.alerts import AlertDispatcher
from guardrail.stream.telemetry import Telemetry
from support.harness import produce

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

START = 1795429200.0  # a window of the captured changelog (see test_window_cells.py)


def _key(metric, model, start=START):
    return (f'["{metric}|model={model},model_version=v1,prompt_version=-",'
            f'[{start},{start + 299.9}]]').encode()


def _value(total, unsafe=0):
    return f'{{"total":{total},"unsafe":{unsafe},"errors":0,"examples":[],"marks":{{}}}}'.encode()


def _settings(bootstrap, app_id):
    # Expiry far enough that the fixed test window is current.
    return load_settings(environ={}, bootstrap_servers=bootstrap, app_id=app_id,
                         window_seconds=300, window_expires_seconds=10 ** 9)


async def _create(bootstrap, topic, partitions=2):
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


async def _exists(bootstrap, topic):
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return (await partition_counts(admin, [topic])).get(topic) is not None
    finally:
        await admin.close()


def _records(n_models, writes, partition_of=lambda i: i % 2):
    """``writes`` counts for each of ``n_models`` cells, the last one the newest."""
    return [(_key("toxicity", f"m{i}"), _value(w, unsafe=w // 2), partition_of(i))
            for w in range(1, writes + 1) for i in range(n_models)]


async def _produce_to(bootstrap, topic, records):
    """(key, value, partition) records, all in flight together (one batch each)."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, acks="all")
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key, partition=partition)
                   for key, value, partition in records]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def test_read_once_reaches_the_real_end_of_every_partition(kafka_bootstrap):
    app_id = f"rates-{uuid.uuid4().hex[:8]}"
    topic = changelog_topic(app_id)
    await _create(kafka_bootstrap, topic)
    records = _records(n_models=10, writes=30)  # 300 records in a few batches
    await _produce_to(kafka_bootstrap, topic, records)
    cells = await read_rates(_settings(kafka_bootstrap, app_id), timeout=60)
    assert cells.records == len(records) and cells.malformed == 0
    rows = cells.rows()
    assert len(rows) == 10 and {(r["total"], r["unsafe"]) for r in rows} == {(30, 15)}


async def test_reading_stops_at_the_real_end_not_the_listed_one(kafka_bootstrap):
    """The embedded broker lists a partition's end as the start of its last
    record batch + 1; a reader going by that would stop inside the batch."""
    topic = f"batched-{uuid.uuid4().hex[:8]}"
    await _create(kafka_bootstrap, topic, partitions=1)
    await _produce_to(kafka_bootstrap, topic, _records(5, 4, partition_of=lambda i: 0))
    settings = _settings(kafka_bootstrap, "unused")
    cells = WindowCells(window_seconds=300, expires_seconds=10 ** 9)
    reader = ChangelogReader(settings.kafka, topic, cells, fetch_wait_ms=100, poll_records=1)
    assert await reader.open()
    try:
        while not await reader.caught_up():
            await reader.poll(200)
    finally:
        await reader.close()
    assert cells.records == 20
    assert {r["total"] for r in cells.rows()} == {4}


async def test_tombstones_delete_and_foreign_records_are_counted_not_fatal(kafka_bootstrap):
    app_id = f"rates-{uuid.uuid4().hex[:8]}"
    topic = changelog_topic(app_id)
    await _create(kafka_bootstrap, topic, partitions=1)
    await produce(kafka_bootstrap, topic, [
        (_key("toxicity", "a"), _value(3, 1), None), (_key("bias", "a"), _value(3), None),
        (b"not a window key", b"{}", None), (_key("toxicity", "a"), None, None)])
    cells = await read_rates(_settings(kafka_bootstrap, app_id), timeout=60)
    assert [(r["metric"], r["total"]) for r in cells.rows()] == [("bias", 3)]
    assert cells.malformed == 1 and "offset 2: key is not JSON" in cells.last_error


async def test_a_missing_changelog_is_an_error_and_is_not_created(kafka_bootstrap):
    app_id = f"absent-{uuid.uuid4().hex[:8]}"
    with pytest.raises(RatesUnavailable, match=f"no topic '{app_id}-window-counts-changelog'"):
        await read_rates(_settings(kafka_bootstrap, app_id), timeout=10)
    assert not await _exists(kafka_bootstrap, changelog_topic(app_id))


async def _until(predicate, timeout=60):
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.2)


async def test_the_view_waits_for_its_topic_then_follows_it(kafka_bootstrap, caplog):
    app_id = f"follow-{uuid.uuid4().hex[:8]}"
    topic = changelog_topic(app_id)
    view = RatesView(_settings(kafka_bootstrap, app_id))
    caplog.set_level(logging.INFO, logger="guardrail.rates")
    await view.start()
    try:
        await _until(lambda: f"no topic '{topic}' yet" in caplog.text)  # its first look ...
        assert view.status()["caught_up"] is False and view.rows() == []
        assert not await _exists(kafka_bootstrap, topic)  # ... and does not create it
        await _create(kafka_bootstrap, topic)
        await _produce_to(kafka_bootstrap, topic, _records(4, 3))
        await _until(lambda: view.status()["caught_up"] and len(view.rows()) == 4)
        assert {r["total"] for r in view.rows()} == {3}
        await _produce_to(kafka_bootstrap, topic, [(_key("toxicity", "m0"), _value(9), 0)])
        await _until(lambda: {r["total"] for r in view.rows()} == {3, 9})
    finally:
        await view.stop()
    assert view._task is None and view.reader._consumer is None
    await view.stop()  # idempotent


class _View:
    def __init__(self, events):
        self.events = events

    async def start(self):
        self.events.append("view started")

    async def stop(self):
        self.events.append("view stopped")


async def test_the_runtime_starts_the_view_and_stops_it_first_on_close():
    events = []

    class App:
        async def flush_producer(self):
            events.append("producer flushed")

    class Evaluator:
        async def aclose(self):
            events.append("evaluator closed")

    async def no_registry():  # the message judge's registry client: none here
        pass

    runtime = WorkerRuntime(
        app=App(), settings=load_settings(environ={}), telemetry=Telemetry(),
        message_judge=SimpleNamespace(evaluator=Evaluator(), exporter=None,
                                      close_registry=no_registry),
        dispatcher=AlertDispatcher(webhook_url=None, timeout=1, send_to_topic=None),
        rates_view=_View(events))
    await runtime.start()
    await runtime.close()
    assert events == ["view started", "view stopped", "evaluator closed", "producer flushed"]


async def test_a_follower_whose_read_swallows_a_cancellation_still_stops():
    # A client call can swallow one cancellation; the follower read on after its
    # stop and the worker's stop hung (SIGTERM as the worker started).
    from guardrail.kafka.changelog import TopicFollower

    follower = TopicFollower(load_settings(environ={}).kafka, "redteam-labels", sink=None,
                             fetch_wait_ms=100)
    swallowed = []

    async def read_on():
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed.append(True)

    follower._task = task = asyncio.ensure_future(read_on())
    await asyncio.sleep(0)
    await asyncio.wait_for(follower.stop(), 10)
    assert swallowed and task.cancelled()
