"""Faust transport corrections: the fetch wait setting, recovery end offsets
read from a real fetch (Tansu under-reports ListOffsets), records delivered in
offset order from where the seek put them, and commits only of what was
processed (guardrail/agents/consumer.py)."""

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from faust.transport.consumer import Consumer as FaustConsumer
from faust.types import TP
from faust.types.tuples import Message

from guardrail.agents import lost_records
from guardrail.agents.transport import GuardrailFaustApp, committed_ends, fetched_highwaters
from guardrail.kafka.settings import KafkaSettings
from guardrail.kafka.topics import ensure_topics
from guardrail.config.settings import load_settings


def _offline_consumer(app_id):
    """The worker consumer of an app that never connects; every topic acked."""
    app = GuardrailFaustApp(app_id, broker="kafka://127.0.0.1:9")
    app.topics.acks_enabled_for = lambda topic: True
    return app.consumer


def _message(tp, offset, generation=0):
    return Message(tp.topic, tp.partition, offset, 0.0, 0, [], b"k", b"v", None,
                   generation_id=generation, tp=tp)


async def test_the_worker_consumer_waits_as_configured():
    app = GuardrailFaustApp("fetch-wait-check", broker="kafka://127.0.0.1:9", fetch_wait_ms=42)
    thread = app.consumer._thread
    consumer = thread._create_worker_consumer(app.transport)
    assert consumer._fetch_max_wait_ms == 42
    plain = GuardrailFaustApp("fetch-wait-default", broker="kafka://127.0.0.1:9")
    assert plain.consumer._thread._create_worker_consumer(plain.transport
                                                          )._fetch_max_wait_ms == 1500


async def test_a_gate_mode_worker_fetches_and_writes_without_waiting_for_more():
    # In gate mode every record's way to the approved topic is latency: its input
    # fetch waits gate_fetch_wait_ms, and its gate writes, awaited one after the
    # other, do not linger; a watching worker keeps its fetch wait and batching.
    from guardrail.agents.app import build_app

    def built(**settings):
        return build_app(load_settings(environ={}, judge_model="openai/test-judge",
                                       judge_api_key="k", consumer_fetch_wait_ms=80,
                                       **settings))

    gating = built(gate=True, gate_fetch_wait_ms=7, gate_transactional=True,
                   gate_transaction_ms=20)
    watching = built()
    try:
        for runtime, wait_ms, linger in ((gating, 7, 0.0), (watching, 80, 0.005)):
            app = runtime.app
            consumer = app.consumer._thread._create_worker_consumer(app.transport)
            assert (consumer._fetch_max_wait_ms, app.conf.producer_linger) == (wait_ms, linger)
        assert gating.state["gate"].writer.commit_seconds == 0.02
    finally:
        for runtime in (gating, watching):
            await runtime.message_judge.evaluator.aclose()


async def test_acks_of_an_earlier_generation_never_reach_the_commit_bookkeeping():
    consumer = _offline_consumer("stale-ack-check")
    consumer.app.consumer_generation_id = 7
    tp = TP("input", 0)
    stale, fresh = _message(tp, 100, 6), _message(tp, 100, 7)
    consumer._committed_offset[tp] = 100
    assert consumer.ack(stale) is False and stale.acked
    assert list(consumer._acked[tp]) == []  # nothing the commit could move past
    assert consumer.ack(fresh) is True and list(consumer._acked[tp]) == [100]


@pytest.mark.kafka
async def test_recovery_reads_to_the_real_end_of_a_batched_changelog(kafka_bootstrap):
    topic = f"changelog-check-{asyncio.get_running_loop().time():.0f}"
    await ensure_topics(load_settings(environ={}, bootstrap_servers=kafka_bootstrap).kafka,
                        {topic: 1})
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=50)
    await producer.start()
    try:
        for _ in range(3):  # three batches of ten records
            for i in range(10):
                await producer.send(topic, b"v%d" % i, key=b"k%d" % i)
            await producer.flush()
    finally:
        await producer.stop()
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap)
    await consumer.start()
    try:
        reported = (await consumer.end_offsets([tp]))[tp]
    finally:
        await consumer.stop()
    assert 0 < reported <= 30  # Tansu: 21 (the last batch's base offset + 1)
    fetched = await fetched_highwaters({"bootstrap_servers": kafka_bootstrap}, {tp: reported})
    assert fetched == {tp: 30}
    # An empty partition is not probed; an unreachable broker leaves the reported ends.
    assert await fetched_highwaters({"bootstrap_servers": kafka_bootstrap}, {tp: 0}) == {}
    assert await fetched_highwaters({"bootstrap_servers": "127.0.0.1:9"}, {tp: reported},
                                    timeout=2) == {}


def _jump_check_consumer(monkeypatch, fetches):
    """A worker consumer whose fetches return ``fetches`` (lists of offsets of
    one partition) in turn, run through Faust's own drain loop."""
    consumer, tp = _offline_consumer("jump-check"), TP("judgments", 0)
    stopped = asyncio.Event()
    fetcher = type("Fetcher", (), {"_stopped": stopped})()
    seeks, processed = [], []

    async def fetch(self, timeout):  # stands in for Faust's fetch from aiokafka
        await self._wait_next_records(0)
        if not fetches:
            stopped.set()
            return
        for offset in fetches.pop(0):
            yield tp, _message(tp, offset)

    async def seek_in_thread(tp_, offset):
        seeks.append(offset)

    async def on_message(message):
        processed.append(message.offset)

    async def no_records(timeout):
        return {}, None

    monkeypatch.setattr(FaustConsumer, "getmany", fetch)
    monkeypatch.setattr(FaustConsumer, "_wait_next_records", lambda self, t: no_records(t))
    monkeypatch.setattr(consumer._thread, "seek_in_thread", seek_in_thread, raising=False)
    consumer.callback = on_message
    consumer._sought = {tp}  # already sought to its committed offset (see the hold tests)
    consumer.app.consumer_generation_id = 0

    async def faust_assigned(self, assigned, generation_id=0):  # tables, recovery: not here
        return None

    monkeypatch.setattr(FaustConsumer, "on_partitions_assigned", faust_assigned)
    return consumer, tp, fetcher, seeks, processed


async def test_records_fetched_before_a_seek_never_make_faust_skip_offsets(monkeypatch):
    # After a rebalance the partition is sought back to its committed offset,
    # 3219, while a run fetched from further on (3405..) is still arriving.
    consumer, tp, fetcher, seeks, processed = _jump_check_consumer(
        monkeypatch, [[3405, 3406], [3219, 3220, 3221]])
    consumer._next[tp] = consumer._base[tp] = 3219
    await consumer._drain_messages(fetcher)
    assert processed == [3219, 3220, 3221]  # nothing skipped, nothing out of order
    assert not consumer._gap[tp]  # no offset counted as done without processing
    assert seeks == [3219]  # read again from the position, in the consumer thread


async def test_a_real_gap_is_passed_on_once_checked(monkeypatch):
    # Offsets 12..14 do not exist (compaction, transaction markers): the fetch
    # after the seek back to 12 shows the same jump, so it is real.
    consumer, tp, fetcher, seeks, processed = _jump_check_consumer(
        monkeypatch, [[10, 11], [15, 16], [15, 16]])
    consumer._next[tp] = consumer._base[tp] = 10
    await consumer._drain_messages(fetcher)
    assert processed == [10, 11, 15, 16]  # nothing twice: read again from the next one
    assert [(i.begin, i.end) for i in consumer._gap[tp]] == [(12, 15)]
    assert seeks == [12]


async def test_records_from_before_a_seek_back_are_dropped_not_delivered_twice(monkeypatch):
    consumer, tp, fetcher, seeks, processed = _jump_check_consumer(
        monkeypatch, [[10, 11, 12], [11, 12, 13]])
    consumer._next[tp] = consumer._base[tp] = 10
    await consumer._drain_messages(fetcher)
    assert processed == [10, 11, 12, 13] and seeks == []


async def test_a_check_made_before_a_new_seek_counts_for_nothing_after_it(monkeypatch):
    # A jump from 11 is checked; then a rebalance seeks to 11 again, and records
    # fetched before that seek can jump from 11 once more: checked again.
    fetches = [[10, 11], [15, 16]]
    consumer, tp, fetcher, seeks, processed = _jump_check_consumer(monkeypatch, fetches)
    consumer._next[tp] = consumer._base[tp] = 10
    await consumer._drain_messages(fetcher)
    assert seeks == [12]
    monkeypatch.setattr(consumer, "seek_to_committed", lambda: asyncio.sleep(0, {tp: 12}))
    await consumer.perform_seek()
    fetches.append([15, 16])
    fetcher._stopped.clear()
    await consumer._drain_messages(fetcher)
    assert seeks == [12, 12] and processed == [10, 11] and not consumer._gap[tp]


async def test_a_new_partition_is_read_only_from_where_the_seek_put_it(monkeypatch):
    # Newly assigned; before Faust seeks it to its committed offset (2276) the
    # consumer thread already fetched from 2344: nothing of that is processed
    # (later reading 2276.. would come after records further on).
    fetches = [[2344, 2345]]
    consumer, tp, fetcher, seeks, processed = _jump_check_consumer(monkeypatch, fetches)
    await consumer.on_partitions_assigned(set(), 1)
    await consumer._drain_messages(fetcher)
    assert processed == [] and seeks == []
    monkeypatch.setattr(consumer, "seek_to_committed", lambda: asyncio.sleep(0, {tp: 2276}))
    await consumer.perform_seek()
    consumer.resume_flow()  # as Faust's recovery does, once sought
    assert seeks == [2276]  # the held records are read again from the committed offset
    fetches.append([2276, 2277])
    fetcher._stopped.clear()
    await consumer._drain_messages(fetcher)
    assert processed == [2276, 2277] and not consumer._gap[tp]


async def test_records_delivered_before_the_flow_resumes_are_read_again_after_it(monkeypatch):
    # Faust resumes its flow after the seek and empties every stream's buffer as
    # it does: a record delivered in between was lost (the gate then forwarded a
    # later record of its key first). Held back, and read again once resumed.
    fetches = [[2276, 2277]]
    consumer, tp, fetcher, seeks, processed = _jump_check_consumer(monkeypatch, fetches)
    await consumer.on_partitions_assigned(set(), 1)
    monkeypatch.setattr(consumer, "seek_to_committed", lambda: asyncio.sleep(0, {tp: 2276}))
    await consumer.perform_seek()
    await consumer._drain_messages(fetcher)  # sought, the flow not resumed yet
    assert processed == [] and seeks == []
    consumer.resume_flow()
    await asyncio.gather(*consumer._seeks)  # the held records' seek, in the consumer thread
    assert seeks == [2276]
    fetches.append([2276, 2277])
    fetcher._stopped.clear()
    await consumer._drain_messages(fetcher)
    assert processed == [2276, 2277] and not consumer._gap[tp]


async def test_a_partition_without_a_committed_offset_is_read_from_its_first_held_record(
        monkeypatch):
    fetches = [[0, 1, 2]]
    consumer, tp, fetcher, seeks, processed = _jump_check_consumer(monkeypatch, fetches)
    await consumer.on_partitions_assigned(set(), 1)
    await consumer._drain_messages(fetcher)
    monkeypatch.setattr(consumer, "seek_to_committed", lambda: asyncio.sleep(0, {tp: None}))
    monkeypatch.setattr(consumer, "earliest_offsets", lambda *tps: asyncio.sleep(0, {tp: 0}))
    await consumer.perform_seek()
    assert processed == [] and seeks == [0] and consumer._base[tp] == 0


async def test_a_partition_without_a_committed_offset_is_sought_to_its_first_offset(
        monkeypatch):
    # Faust dropped records 0..84 it had fetched (the partition was paused or
    # changed hands meanwhile): the client's position is 85, the end, and no
    # committed offset says where to start. Nothing later arrives to show the
    # jump (the producers are done), so the partition is sought to its first
    # offset at once; the client seeks nowhere for a committed offset of 0 either.
    fetches = [[0, 1]]
    consumer, tp, fetcher, seeks, processed = _jump_check_consumer(monkeypatch, fetches)
    other = TP("judgments", 1)
    await consumer.on_partitions_assigned(set(), 1)
    monkeypatch.setattr(consumer, "seek_to_committed",
                        lambda: asyncio.sleep(0, {tp: None, other: 0}))
    monkeypatch.setattr(consumer, "earliest_offsets", lambda *tps: asyncio.sleep(0, {tp: 0}))
    await consumer.perform_seek()
    consumer.resume_flow()  # as Faust's recovery does, once sought
    assert sorted(seeks) == [0, 0] and consumer._next[tp] == 0 and consumer._base[tp] == 0
    assert consumer._next[other] == consumer._base[other] == 0
    await consumer._drain_messages(fetcher)
    assert processed == [0, 1]
    consumer.processed([_message(tp, 0, 1), _message(tp, 1, 1)])
    consumer.app.consumer_generation_id = 1
    assert [consumer.ack(_message(tp, o, 1)) for o in (0, 1)] == [True, True]
    assert consumer._new_offset(tp) == 2


async def test_a_first_record_past_the_start_is_read_again_from_the_start(monkeypatch):
    # Records fetched before the seek to the first offset can still arrive after
    # it: 77 is a jump, read again from 0.
    fetches = [[77, 78], [0, 1]]
    consumer, tp, fetcher, seeks, processed = _jump_check_consumer(monkeypatch, fetches)
    await consumer.on_partitions_assigned(set(), 1)
    monkeypatch.setattr(consumer, "seek_to_committed", lambda: asyncio.sleep(0, {tp: None}))
    monkeypatch.setattr(consumer, "earliest_offsets", lambda *tps: asyncio.sleep(0, {tp: 0}))
    await consumer.perform_seek()
    consumer.resume_flow()  # as Faust's recovery does, once sought
    await consumer._drain_messages(fetcher)
    assert processed == [0, 1] and seeks == [0, 0]


async def test_a_partition_given_back_is_read_from_what_its_revoke_phase_did_not_process(
        monkeypatch):
    # Judged and acked during the revoke phase, not committed before the
    # rejoin: 260..270 are committed now, and read again from 271, not 260.
    consumer, tp, fetcher, seeks, processed = _jump_check_consumer(monkeypatch, [[271, 272]])
    consumer.app.acked_when_processed.add(tp.topic)
    consumer.app.consumer_generation_id = 3
    consumer._base[tp] = 260
    _processed_in(consumer, tp, 3, *range(260, 271))
    await consumer.on_partitions_assigned({tp}, 4)
    consumer.app.consumer_generation_id = 4
    monkeypatch.setattr(consumer, "seek_to_committed", lambda: asyncio.sleep(0, {tp: 260}))
    await consumer.perform_seek()
    consumer.resume_flow()  # as Faust's recovery does, once sought
    assert seeks == [271] and consumer._base[tp] == 260
    assert consumer._new_offset(tp) == 271
    await consumer._drain_messages(fetcher)
    assert processed == [271, 272]


async def test_a_seek_interrupted_by_a_new_assignment_releases_nothing(monkeypatch):
    fetches = [[2344]]
    consumer, tp, fetcher, seeks, processed = _jump_check_consumer(monkeypatch, fetches)
    await consumer.on_partitions_assigned(set(), 1)
    await consumer._drain_messages(fetcher)

    async def seek_then_rebalance():
        await consumer.on_partitions_assigned(set(), 2)  # arrives while seeking
        return {tp: 2276}

    monkeypatch.setattr(consumer, "seek_to_committed", seek_then_rebalance)
    await consumer.perform_seek()
    assert seeks == [] and tp not in consumer._sought  # the next recovery seeks again


async def test_a_seek_back_for_a_partition_revoked_meanwhile_is_left_out():
    seeks = []

    class Aiokafka:  # the consumer thread's client, just after a revocation
        def assignment(self):
            return {TopicPartition("input", 1)}

        def seek(self, tp, offset):
            seeks.append((tp, offset))

    thread = GuardrailFaustApp("seek-check", broker="kafka://127.0.0.1:9").consumer._thread
    thread._consumer = Aiokafka()
    await thread._seek_now(TopicPartition("input", 0), 5)  # aiokafka would raise
    await thread._seek_now(TopicPartition("input", 1), 7)
    assert seeks == [(TopicPartition("input", 1), 7)]


def _chain_consumer(app_id, base=100):
    """An offline consumer whose partition's commit chain starts at ``base``,
    on a topic acked by hand (only records marked processed count)."""
    consumer, tp = _offline_consumer(app_id), TP("input", 0)
    consumer.app.consumer_generation_id = 1
    consumer.app.acked_when_processed.add("input")
    consumer._base[tp] = consumer._committed_offset[tp] = base
    return consumer, tp


def _reading(consumer, tp, *, at):
    """Put ``tp`` in reading, its next offset ``at``; return the offsets it is
    sought back to (recorded, not sought)."""
    seeks = []

    async def seek_in_thread(tp_, offset):
        seeks.append(offset)

    consumer._thread.seek_in_thread = seek_in_thread
    consumer._sought, consumer._next[tp] = {tp}, at
    return seeks


def _processed(consumer, tp, *offsets):
    return _processed_in(consumer, tp, 1, *offsets)


def _processed_in(consumer, tp, generation, *offsets):
    messages = [_message(tp, offset, generation) for offset in offsets]
    consumer.processed(messages)
    return [consumer.ack(m) for m in messages]


def test_a_commit_never_starts_past_an_offset_not_done():
    # Faust's own check let a run start one past the committed offset.
    consumer, tp = _chain_consumer("chain-head")
    _processed(consumer, tp, 101, 102)
    assert consumer._new_offset(tp) is None  # 100 is still being processed
    _processed(consumer, tp, 100)
    assert consumer._new_offset(tp) == 103 and consumer._base[tp] == 103


def test_records_faust_skipped_and_acked_are_never_committed():
    # Flow stopped for a rebalance: Faust's stream skips a record and acks it.
    consumer, tp = _chain_consumer("skip-ack")
    assert _processed(consumer, tp, 100) == [True]
    skipped = _message(tp, 101, 1)
    assert consumer.ack(skipped) is False and skipped.acked
    _processed(consumer, tp, 102)
    assert consumer._new_offset(tp) == 101  # the next owner starts at the skipped one


def test_a_record_skipped_while_reading_is_read_again_from_its_offset():
    # Read up to 105; Faust's stream skipped 102 and acked it unprocessed.
    consumer, tp = _chain_consumer("skip-read-again")
    seeks = _reading(consumer, tp, at=106)

    async def skip():
        assert consumer.ack(_message(tp, 102, 1)) is False
        await asyncio.sleep(0)

    asyncio.run(skip())
    assert consumer._next[tp] == 102 and seeks == [102]


def test_acks_of_a_revoke_phase_continue_the_chain_and_stop_at_the_first_not_done():
    consumer, tp = _chain_consumer("revoke-phase")
    _processed(consumer, tp, 100, 101)
    commits = []

    async def revoke_phase(partitions):  # the app's: agents finish, Faust commits
        _processed(consumer, tp, 103)  # 102 still being processed
        commits.append(consumer._new_offset(tp))

    async def revoke():
        consumer._active_partitions = set()
        consumer._on_partitions_revoked = revoke_phase
        await consumer.on_partitions_revoked({tp})

    asyncio.run(revoke())  # Faust forgets the committed offset and the acks first
    assert commits == [102]  # Faust's would have been 104


def test_a_real_gap_counts_as_done_and_the_record_after_it_does_not():
    consumer, tp = _chain_consumer("gap-check", base=10)
    consumer._gap[tp].addi(12, 15)  # checked: 12..14 do not exist
    _processed(consumer, tp, 10, 11, 16)  # 15 still being processed
    assert consumer._new_offset(tp) == 15


def test_a_record_lost_on_its_way_to_the_agent_is_read_again_and_only_it(monkeypatch):
    # 100..102 delivered; 101 and 102 were processed, 100 never reached the
    # agent (dropped by Faust's drain or stream, no ack): the commit waits on
    # it. After LOST_AFTER_SECONDS it is read again, and 101, 102 are passed over.
    from guardrail.agents import consumer as consumer_module

    consumer, tp = _chain_consumer("lost-on-the-way")
    seeks = _reading(consumer, tp, at=103)
    now = [1000.0]
    monkeypatch.setattr(lost_records.time, "monotonic", lambda: now[0])

    async def lost_then_read_again():
        _processed(consumer, tp, 101, 102)
        assert consumer._new_offset(tp) is None and seeks == []
        now[0] += consumer_module.LOST_AFTER_SECONDS - 1
        assert consumer._new_offset(tp) is None and seeks == []  # may still be on its way
        now[0] += 1
        assert consumer._new_offset(tp) is None
        await asyncio.sleep(0)
        assert seeks == [100] and consumer._next[tp] == 100
        verdicts = [await consumer._place(tp, offset, 9) for offset in (100, 101, 102, 103)]
        assert [v is consumer_module._DELIVER for v in verdicts] == [True, False, False, True]
        _processed(consumer, tp, 100, 103)
        assert consumer._new_offset(tp) == 104

    asyncio.run(lost_then_read_again())


def test_a_commit_waiting_on_a_record_not_yet_delivered_reads_nothing_again(monkeypatch):
    from guardrail.agents import consumer as consumer_module

    consumer, tp = _chain_consumer("not-yet-delivered")
    consumer._sought, consumer._next[tp] = {tp}, 100  # 100 still to come from the broker
    now = [1000.0]
    monkeypatch.setattr(lost_records.time, "monotonic", lambda: now[0])
    _processed(consumer, tp, 101)
    for _ in range(3):
        assert consumer._new_offset(tp) is None
        now[0] += consumer_module.LOST_AFTER_SECONDS
    assert consumer._next[tp] == 100 and not consumer._seeks


def _waits(consumer, tp, now, rounds):
    """``_new_offset`` at ``rounds`` moments LOST_AFTER_SECONDS apart, from the
    commit loop's own listing of partitions; the offsets it was sought back to."""
    from guardrail.agents import consumer as consumer_module

    async def commit_rounds():
        for _ in range(rounds):
            assert tp in set(consumer._filter_tps_with_pending_acks())
            assert consumer._new_offset(tp) is None
            await asyncio.sleep(0)
            now[0] += consumer_module.LOST_AFTER_SECONDS

    asyncio.run(commit_rounds())


def test_the_last_record_delivered_lost_on_its_way_is_read_again(monkeypatch):
    # 100 delivered, the last of a burst, dropped on its way (no ack, no stream
    # holds it, no queue): no later ack proves it lost, yet it is read again.
    consumer, tp = _chain_consumer("lost-last")
    seeks = _reading(consumer, tp, at=101)
    now = [1000.0]
    monkeypatch.setattr(lost_records.time, "monotonic", lambda: now[0])
    _waits(consumer, tp, now, rounds=2)
    assert seeks == [100] and consumer._next[tp] == 100


def test_the_last_record_delivered_is_not_read_again_while_a_stream_or_queue_holds_it(
        monkeypatch):
    from types import SimpleNamespace

    now = [1000.0]
    monkeypatch.setattr(lost_records.time, "monotonic", lambda: now[0])
    held = _chain_consumer("held-by-stream")  # the agent took it: judging it, slowly
    seeks = _reading(*held, at=101)
    message = _message(held[1], 100, 1)
    held[0].track_message(message)
    _waits(*held, now, rounds=3)
    assert seeks == []
    queued = _chain_consumer("held-in-queue")  # waiting in its agent's channel
    seeks = _reading(*queued, at=101)
    queue = asyncio.Queue(maxsize=10)
    queue.put_nowait(SimpleNamespace(message=_message(queued[1], 100, 1)))
    queued[0].app.topics._tp_index[queued[1]] = [SimpleNamespace(_queue=queue)]
    _waits(*queued, now, rounds=3)
    assert seeks == []
    full = _chain_consumer("drain-waiting")  # its queue full: the drain may hold it
    seeks = _reading(*full, at=101)
    queue = asyncio.Queue(maxsize=1)
    queue.put_nowait(SimpleNamespace(message=_message(TP("input", 1), 7, 1)))
    full[0].app.topics._tp_index[full[1]] = [SimpleNamespace(_queue=queue)]
    _waits(*full, now, rounds=3)
    assert seeks == []


async def test_a_record_the_gate_found_missing_is_read_again_at_once_unless_held():
    # The gate got 102 before 101 (gate_sequence): 101, delivered and queued
    # nowhere, was lost on its way: read again now, not after the 5 s check.
    consumer, tp = _chain_consumer("gate-missing")
    seeks = _reading(consumer, tp, at=103)
    consumer.read_again_if_lost(tp, 101)
    await asyncio.gather(*consumer._seeks)
    assert seeks == [101] and consumer._next[tp] == 101
    consumer.read_again_if_lost(tp, 101)  # asked again for the records after it: once
    assert seeks == [101]
    from types import SimpleNamespace

    queued, tp = _chain_consumer("gate-missing-queued")  # queued behind: it still comes
    seeks = _reading(queued, tp, at=103)
    queue = asyncio.Queue(maxsize=10)
    queue.put_nowait(SimpleNamespace(message=_message(tp, 101, 1)))
    queued.app.topics._tp_index[tp] = [SimpleNamespace(_queue=queue)]
    queued.read_again_if_lost(tp, 101)
    assert seeks == []
    taken, tp = _chain_consumer("gate-missing-taken")  # a stream took it, then lost it
    seeks = _reading(taken, tp, at=103)
    taken.track_message(_message(tp, 101, 1))
    taken.read_again_if_lost(tp, 101)
    await asyncio.gather(*taken._seeks)
    assert seeks == [101]

async def test_every_topic_an_agent_processes_in_order_is_acked_by_hand():
    # A record Faust's stream skips as a rebalance stops the flow is acked like a
    # processed one; on these topics such an ack never reaches a commit (seen: a
    # skipped session turn committed unprocessed, its session judged without it).
    from guardrail.agents.app import build_app
    from guardrail.agents.run_assembly import run_spans_topic
    from guardrail.agents.session_assembly import session_turns_topic

    settings = load_settings(environ={}, judge_model="openai/test-judge",
                             judge_api_key="k", input_format="otlp", agent_runs=True,
                             session_judging=True)
    runtime = build_app(settings)
    try:
        app_id = settings.kafka.app_id
        assert runtime.app.acked_when_processed == {
            settings.kafka.input_topic, settings.kafka.judgments_topic,
            session_turns_topic(app_id), run_spans_topic(app_id)}
    finally:
        await runtime.message_judge.evaluator.aclose()


def test_done_below_is_where_the_processed_run_from_the_commit_chain_stops():
    consumer, tp = _chain_consumer("done-below")
    assert consumer.done_below(tp) == 100
    _processed(consumer, tp, 100, 101, 103)
    assert consumer.done_below(tp) == 102  # 102 is still being judged (or was lost)
    assert consumer.done_below(tp, 103) == 104  # the caller has 102 itself
    _processed(consumer, tp, 102)
    assert consumer.done_below(tp) == 104
    assert consumer._new_offset(tp) == 104 and consumer.done_below(tp) == 104
    consumer._gap[tp].addi(104, 106)  # offsets that do not exist count as done
    assert consumer.done_below(tp) == 106
    # Not known: a partition not in reading, a topic not acked by hand.
    assert consumer.done_below(TP("input", 1)) is None
    consumer.app.acked_when_processed.discard("input")
    assert consumer.done_below(tp) is None


def test_a_record_never_acked_keeps_done_below_at_it_after_the_ones_behind():
    # The judging side's floor: 100 lost on its way, 101..110 judged; the
    # judgment events of that time must not claim 100 done.
    consumer, tp = _chain_consumer("lost-floor")
    _processed(consumer, tp, *range(101, 111))
    assert consumer.done_below(tp) == 100
    _processed(consumer, tp, 100)
    assert consumer.done_below(tp) == 111


async def _stop_commit_meeting_a_periodic_one(consumer, tp, stop_commit):
    """A periodic commit takes its offsets (100..104 acked) and is in flight
    when the drain acks 105..109 and the stop commits: what reached the broker."""
    committed, release = [], asyncio.Event()

    async def commit(offsets):
        committed.append(dict(offsets))
        if len(committed) == 1:
            await release.wait()  # the periodic commit's round trip
        return True

    async def flush():
        pass

    consumer._thread.commit = commit
    consumer.assignment = lambda: {tp}
    consumer.app.producer.flush = flush
    _processed(consumer, tp, *range(100, 105))
    periodic = asyncio.ensure_future(consumer.commit())
    await asyncio.sleep(0)  # it has taken its offsets and waits on the broker
    _processed(consumer, tp, *range(105, 110))
    stopping = asyncio.ensure_future(stop_commit())
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(periodic, stopping)
    return [offsets[tp] for offsets in committed]


async def test_the_stops_commit_is_made_after_a_periodic_one_in_flight():
    consumer, tp = _chain_consumer("stop-commit")
    assert await _stop_commit_meeting_a_periodic_one(
        consumer, tp, consumer.commit_and_end_transactions) == [105, 110]
    # Faust's own stop commit waits for the periodic one and commits nothing
    # more: a restart would judge 105..109 again.
    faust_consumer, tp = _chain_consumer("stop-commit-faust")
    assert await _stop_commit_meeting_a_periodic_one(
        faust_consumer, tp, lambda: FaustConsumer.commit_and_end_transactions(faust_consumer)
    ) == [105]


async def _transaction(bootstrap, topic, partition, count, *, commit):
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap,
                                transactional_id=f"ends-{uuid.uuid4().hex[:8]}")
    await producer.start()
    try:
        await producer.begin_transaction()
        for i in range(count):
            await producer.send(topic, b"v%d" % i, partition=partition)
        await (producer.commit_transaction() if commit else producer.abort_transaction())
    finally:
        await producer.stop()


@pytest.mark.apache_kafka
async def test_recovery_ends_at_the_last_committed_record_past_a_long_aborted_transaction(
        apache_kafka_bootstrap):
    # A worker killed mid-transaction leaves its records on the changelog, aborted
    # once the next owner fences it: a read_committed recovery never gets them and
    # must not wait for them, however many (here more than the first look back).
    topic = f"ends-{uuid.uuid4().hex[:8]}"
    await ensure_topics(KafkaSettings(bootstrap_servers=apache_kafka_bootstrap),
                        {topic: 3}, strict=frozenset())
    await _transaction(apache_kafka_bootstrap, topic, 0, 40, commit=True)   # 0..39, marker 40
    await _transaction(apache_kafka_bootstrap, topic, 0, 700, commit=False)  # 41..740, 741
    await _transaction(apache_kafka_bootstrap, topic, 1, 30, commit=True)   # 0..29, marker 30
    await _transaction(apache_kafka_bootstrap, topic, 2, 20, commit=False)  # none committed
    reported = {TP(topic, p): end for p, end in ((0, 742), (1, 31), (2, 21))}
    ends = await committed_ends({"bootstrap_servers": apache_kafka_bootstrap}, reported)
    assert ends == {TP(topic, 0): 40, TP(topic, 1): 30, TP(topic, 2): 0}
