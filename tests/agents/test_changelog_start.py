"""A long window changelog does not slow a start (issue 23, item 1), and expired
cells are deleted from it (commit 44dbf2e), on the embedded broker.

The changelog gets 50k records of expired window cells, stamped a day and
more ago, then 500 cells of the current window stamped now (keys and values
as Faust writes them, see ``guardrail/agents/window_cells.py``). The rates
view (once and following) and a worker's table recovery must start at the
first live record: they read exactly the 500, and the worker's log names the
offsets where they start. ``bench/worker/changelog_start.py`` times the same at 1M.
"""

import asyncio
import json
import math
import re
import time
import urllib.error
import urllib.request
import zlib

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from support.harness import StreamEnv, poll, produce
from support.topics import FAST_CLEANUP_WORKER, topic_records

from guardrail.agents.rates_view import RatesView, read_rates
from guardrail.kafka.changelog import read_topic
from guardrail.kafka.topics import ensure_topics, topic_plan
from guardrail.agents.window_cells import (
    WindowCells,
    changelog_topic,
    live_horizon_seconds,
)
from guardrail.config.settings import load_settings
from guardrail.stream.alerts import WindowCounts
from guardrail._event_time import utc_iso

pytestmark = [pytest.mark.kafka, pytest.mark.both_brokers,
              pytest.mark.slow, pytest.mark.timeout(180)]

WINDOW, EXPIRES = 300, 3600
EXPIRED, LIVE = 20_000, 500
PARTITIONS = 2
RECOVERY_LINE = re.compile(r"table recovery starts at the first changelog records of the "
                           r"live windows: (\{.*\})")


def _key(metric, version, start):
    window = f"{metric}|model=m,model_version=v{version},prompt_version=-"
    return orjson.dumps([window, [float(start), round(start + WINDOW - 0.1, 1)]])


def _value(total, unsafe):
    return orjson.dumps(WindowCounts(total=total, unsafe=unsafe, seen=total,
                                     marks={"live|in|0": total}).as_dict())


def _records(now):
    """(partition, key, value, timestamp ms) in time order per partition:
    EXPIRED records of old windows over a day ending 3 h ago (the horizon is
    window + expires + 120 s = 67 min), then LIVE cells of the current window."""
    first, step = now - 3 * 3600 - 86400, 86400 / EXPIRED
    out = []
    for i in range(EXPIRED):
        ts = first + i * step
        key = _key("toxicity" if i % 2 else "bias", (i // 2) % 1000,
                   math.floor(ts / WINDOW) * WINDOW)
        out.append((zlib.crc32(key) % PARTITIONS, key, _value(3, i % 2), int(ts * 1000)))
    current = math.floor(now / WINDOW) * WINDOW
    for i in range(LIVE):
        key = _key("toxicity" if i % 2 else "bias", i // 2, current)
        out.append((zlib.crc32(key) % PARTITIONS, key, _value(5, int(i % 3 == 0)), int(now * 1000)))
    return out


async def _produce_batches(bootstrap, topic, records):
    """Whole record batches per partition, every one acked."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                max_batch_size=1 << 20, max_request_size=8 << 20)
    await producer.start()
    try:
        batches, futures = {}, []
        for partition, key, value, ts in records:
            batch = batches.setdefault(partition, producer.create_batch())
            if batch.append(key=key, value=value, timestamp=ts) is None:
                futures.append(await producer.send_batch(batch, topic, partition=partition))
                batch = batches[partition] = producer.create_batch()
                batch.append(key=key, value=value, timestamp=ts)
        for partition, batch in batches.items():
            futures.append(await producer.send_batch(batch, topic, partition=partition))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


@pytest.fixture(scope="module")
def long_changelog(kafka_bootstrap, thread_judge, tmp_path_factory):
    """A worker env whose changelog already holds EXPIRED + LIVE records; yields
    (env, settings, first live offset per partition, the current window's start)."""
    env = StreamEnv(kafka_bootstrap, thread_judge.api_base, tmp_path_factory.mktemp("long"),
                    window_seconds=WINDOW, window_expires_seconds=EXPIRES,
                    topic_partitions=PARTITIONS)
    settings = load_settings(environ=env.env)
    topic = changelog_topic(settings.kafka.app_id)
    asyncio.run(ensure_topics(settings.kafka, {**topic_plan(settings.kafka), topic: PARTITIONS},
                              compacted=frozenset({topic})))
    now = time.time()
    records = _records(now)
    asyncio.run(_produce_batches(kafka_bootstrap, topic, records))
    first_live = {p: sum(1 for r in records[:EXPIRED] if r[0] == p) for p in range(PARTITIONS)}
    yield env, settings, first_live, utc_iso(math.floor(now / WINDOW) * WINDOW * 1000)
    env.stop_workers()


def _current_cells(rows, window_start):
    return [r for r in rows if r["window_start"] == window_start]


async def test_the_view_reads_only_the_live_windows_once(long_changelog):
    _, settings, _, window_start = long_changelog
    assert live_horizon_seconds(WINDOW, EXPIRES) == WINDOW + EXPIRES + 120
    cells = await read_rates(settings)
    rows = cells.rows()
    assert len(rows) == LIVE and len(_current_cells(rows, window_start)) == LIVE
    assert cells.records == LIVE  # not one expired record read
    assert cells.malformed == 0

    # Read from the beginning (the code before the horizon): the same rows,
    # a hundred times the records.
    everything = WindowCells(window_seconds=WINDOW, expires_seconds=EXPIRES)
    read = await read_topic(settings.kafka, changelog_topic(settings.kafka.app_id), everything,
                            fetch_wait_ms=settings.worker.consumer_fetch_wait_ms)
    assert read == everything.records == EXPIRED + LIVE
    assert everything.rows() == rows


async def test_the_following_view_starts_at_the_live_windows(long_changelog):
    _, settings, _, window_start = long_changelog
    view = RatesView(settings)
    await view.start()
    try:
        deadline = time.monotonic() + 30
        while not view.caught_up and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert view.caught_up
        assert len(_current_cells(view.rows(), window_start)) == len(view.rows()) == LIVE
        assert view.cells.records == LIVE
    finally:
        await view.stop()


def _get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return json.loads(response.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None


def _wait(predicate, timeout):
    return poll(predicate, timeout, interval=0.25)


def test_a_worker_recovers_its_table_from_the_live_windows(long_changelog):
    env, settings, first_live, window_start = long_changelog
    worker = env.start_worker()
    port = worker.web_port

    def complete():
        answer = _get(port, "/rates")
        return answer if answer and answer["caught_up"] and len(answer["rates"]) == LIVE \
            else None

    group = _wait(complete, timeout=60)
    assert group, env.logs()[-3000:]
    assert len(_current_cells(group["rates"], window_start)) == LIVE

    topic = changelog_topic(settings.kafka.app_id)
    line = _wait(lambda: RECOVERY_LINE.search(env.logs()), timeout=30)
    assert line, env.logs()[-3000:]
    starts = json.loads(line.group(1).replace("'", '"'))
    # Exactly where the live records begin: after every expired one.
    assert starts == {f"{topic}[{p}]": first_live[p] for p in range(PARTITIONS)}
    assert all(offset > 0 for offset in starts.values())

    # The table holds the live cells only: Faust never drops a recovered cell
    # (recovery sets no expiry), so one recovered from the beginning would list
    # all 50k expired ones here too.
    assert _wait(lambda: "Worker ready" in env.logs(), timeout=30)
    local = _get(port, "/rates?scope=local")
    assert local is not None
    assert len(local["rates"]) == LIVE
    assert len(_current_cells(local["rates"], window_start)) == LIVE
    env.stop_workers()
    assert worker.returncode == 0, env.logs()[-3000:]


def _changelog(bootstrap, topic):
    return topic_records(bootstrap, topic, PARTITIONS)


def test_expired_window_cells_get_tombstones(kafka_bootstrap, thread_judge, tmp_path):
    thread_judge.reset()
    env = StreamEnv(kafka_bootstrap, thread_judge.api_base, tmp_path, window_seconds=1,
                    window_expires_seconds=2, topic_partitions=PARTITIONS)
    settings = load_settings(environ=env.env)
    topic = changelog_topic(settings.kafka.app_id)
    # The changelog too, before anything reads it: a consumer's metadata
    # request would have the broker create it with its default partition count.
    asyncio.run(ensure_topics(settings.kafka, {**topic_plan(settings.kafka), topic: PARTITIONS},
                              compacted=frozenset({topic})))
    env.start_worker(command=FAST_CLEANUP_WORKER)
    try:
        messages = [(f"t-{i}".encode(), json.dumps({
            "case_id": f"t-{i}", "output": "you idiot" if i % 3 == 0 else f"fine answer {i}",
            "metadata": {"model": "m", "model_version": f"v{i % 2}"}}).encode(), None)
            for i in range(8)]
        asyncio.run(produce(kafka_bootstrap, env.topic("input"), messages))

        def deleted():
            records = asyncio.run(_changelog(kafka_bootstrap, topic))
            written = {r.key: json.loads(r.value) for r in records if r.value is not None}
            last = {r.key: r.value for r in records}  # the newest record of each key
            counted = sum(cell["total"] for cell in written.values())  # each cell's newest
            done = counted == 2 * len(messages) and all(last[k] is None for k in written)
            return (set(written), records) if done else None

        found = _wait(deleted, timeout=90)
        assert found, (asyncio.run(_changelog(kafka_bootstrap, topic)), env.logs()[-3000:])
        written, _ = found
        time.sleep(3)  # three more cleanups: a cell is deleted once, not at every one
        records = asyncio.run(_changelog(kafka_bootstrap, topic))
        # 8 inputs x 2 metrics over both model versions: at least 4 cells.
        assert len(written) >= 4
        tombstones = [r for r in records if r.value is None]
        assert {r.key for r in tombstones} == written
        assert len(tombstones) == len(written)  # one each, no more
        assert "tombstones written" in env.logs()
    finally:
        env.stop_workers()
    assert all(w.returncode == 0 for w in env.workers), env.logs()[-3000:]


def test_cells_recovered_from_the_changelog_expire_too(kafka_bootstrap, thread_judge, tmp_path):
    """Faust tracks expiry only for cells written live: a worker restarted on a
    changelog must still drop (and tombstone) the recovered cells once expired."""
    thread_judge.reset()
    env = StreamEnv(kafka_bootstrap, thread_judge.api_base, tmp_path, window_seconds=1,
                    window_expires_seconds=2, topic_partitions=PARTITIONS)
    settings = load_settings(environ=env.env)
    topic = changelog_topic(settings.kafka.app_id)
    asyncio.run(ensure_topics(settings.kafka, {**topic_plan(settings.kafka), topic: PARTITIONS},
                              compacted=frozenset({topic})))
    first = env.start_worker()  # the real cleanup interval: nothing expires before the kill
    try:
        asyncio.run(produce(kafka_bootstrap, env.topic("input"), [
            (f"r-{i}".encode(), json.dumps({"case_id": f"r-{i}", "output": f"fine {i}",
                                            "metadata": {"model": "m"}}).encode(), None)
            for i in range(4)]))
        assert _wait(lambda: any(r.value is not None for r in
                                 asyncio.run(_changelog(kafka_bootstrap, topic))), 60)
        first.kill()
        first.wait(10)
        time.sleep(4)  # the cells' windows have expired (1 s windows, expires 2 s)
        env.start_worker(command=FAST_CLEANUP_WORKER)

        def tombstoned():
            last = {r.key: r.value for r in asyncio.run(_changelog(kafka_bootstrap, topic))}
            return bool(last) and all(value is None for value in last.values())

        assert _wait(tombstoned, 60), env.logs()[-3000:]
    finally:
        env.stop_workers()
