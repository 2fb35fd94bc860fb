"""The transactional writer (guardrail/agents/gate_transactions.py) without a broker:
a stand-in producer whose acknowledgements the test hands out. The writes of one
transaction do not wait for each other's acknowledgement; its commit waits for
them all and carries the input offset placed now and then (the gate table is
pruned below that offset only); a write the broker refuses aborts the
transaction and stops the worker, so none of its records is acked."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from aiokafka import TopicPartition

from guardrail.agents import gate_transactions
from guardrail.agents.gate_table import GateTable
from guardrail.agents.gate_transactions import TransactionalWriter
from guardrail.agents.gate_writer import DirectWriter
from guardrail.kafka.settings import KafkaSettings
from guardrail.stream.processing import Outgoing

INPUT = "model-outputs"


class StandInProducer:
    """Records what the writer asks of it; each send's acknowledgement waits for
    the test (``acks``)."""

    made: list[StandInProducer] = []

    def __init__(self, **options):
        self.options, self.calls, self.acks = options, [], []
        StandInProducer.made.append(self)

    async def start(self):
        pass

    async def stop(self):
        pass

    async def begin_transaction(self):
        self.calls.append("begin")

    async def send(self, topic, **record):
        self.calls.append(f"send {topic}")
        ack = asyncio.get_running_loop().create_future()
        self.acks.append(ack)
        return ack

    async def send_offsets_to_transaction(self, offsets, group_id):
        self.calls.append(("offsets", dict(offsets), group_id))

    async def commit_transaction(self):
        self.calls.append("commit")

    async def abort_transaction(self):
        self.calls.append("abort")


@pytest.fixture
def producer_made(monkeypatch):
    StandInProducer.made = []
    monkeypatch.setattr(gate_transactions, "AIOKafkaProducer", StandInProducer)
    return StandInProducer.made


def _writer(fatal: list[str]) -> TransactionalWriter:
    table = SimpleNamespace(
        changelog_topic=SimpleNamespace(get_topic_name=lambda: "gate-changelog"),
        key_type=None, value_type=None, key_serializer="raw", value_serializer="json")
    serializers = SimpleNamespace(dumps_key=lambda _, key, serializer: key.encode(),
                                  dumps_value=lambda _, value, serializer: repr(value).encode())
    return TransactionalWriter(
        kafka=KafkaSettings(), app_id="guardrail", input_topic=INPUT, table=table,
        serializers=serializers, on_fatal=fatal.append,
        assignment=lambda: [TopicPartition(INPUT, 0)], commit_seconds=0.001)


async def _place_one(writer: TransactionalWriter, offset: int) -> asyncio.Future[None]:
    """Forward and record one input record in partition 0's transaction."""
    await writer.settled()
    writer.admitted(0, offset)
    async with writer.together(0):
        forward = Outgoing("model-outputs-approved", b"k", b"answer")
        assert await writer.send(0, forward, metadata=False) is None
        await writer.write_entry(0, "0:7", {"state": "forwarded"})
    writer.placed(0, offset)
    return writer.commit_of(0)


async def test_a_transaction_commits_once_its_writes_are_acknowledged(producer_made):
    fatal: list[str] = []
    writer = _writer(fatal)
    commit = await _place_one(writer, 7)  # returned before any acknowledgement
    producer = producer_made[0]
    await asyncio.sleep(0.05)  # well past commit_seconds
    assert producer.calls == ["begin", "send model-outputs-approved", "send gate-changelog"]
    assert not commit.done()
    for ack in producer.acks:
        ack.set_result(SimpleNamespace(partition=0, offset=1))
    await asyncio.wait_for(commit, 2)
    assert producer.calls[3:] == [("offsets", {TopicPartition(INPUT, 0): 8}, "guardrail"),
                                  "commit"]
    assert fatal == []


async def test_input_offsets_go_with_a_commit_now_and_then_and_with_the_last(producer_made):
    # Each commit with offsets costs two more requests: they go at most every
    # OFFSETS_SECONDS, and always with a partition's last transaction here.
    writer = _writer([])
    offsets_sent = []
    for offset in (7, 8, 9):
        commit = await _place_one(writer, offset)
        producer = producer_made[0]
        for ack in producer.acks:
            if not ack.done():
                ack.set_result(SimpleNamespace(partition=0, offset=1))
        await asyncio.wait_for(commit, 2)
        offsets_sent.append([call[1] for call in producer.calls if call[0] == "offsets"])
    assert offsets_sent[1] == offsets_sent[2] == [{TopicPartition(INPUT, 0): 8}]
    await writer.close()
    assert producer.calls[-2:] == [("offsets", {TopicPartition(INPUT, 0): 10}, "guardrail"),
                                   "commit"]


async def test_a_write_the_broker_refuses_aborts_its_transaction_and_stops_the_worker(
        producer_made):
    fatal: list[str] = []
    writer = _writer(fatal)
    commit = await _place_one(writer, 7)
    producer = producer_made[0]
    producer.acks[0].set_exception(RuntimeError("MessageSizeTooLarge"))
    producer.acks[1].set_result(SimpleNamespace(partition=0, offset=1))
    with pytest.raises(RuntimeError, match="aborted"):
        await asyncio.wait_for(commit, 2)  # the record's ack waits on it: never acked
    assert "abort" in producer.calls and "commit" not in producer.calls
    # The first reason given (the worker stops on it) names the write and its cause.
    assert "model-outputs-approved" in fatal[0] and "MessageSizeTooLarge" in fatal[0]


async def test_a_forward_whose_place_is_kept_waits_for_its_acknowledgement(producer_made):
    writer = _writer([])
    await writer.settled()
    held = Outgoing("model-outputs-held", b"k", b"answer")
    sent = asyncio.ensure_future(writer.send(0, held))
    await asyncio.sleep(0.01)
    assert not sent.done()
    producer_made[0].acks[0].set_result(SimpleNamespace(partition=1, offset=41))
    assert (await asyncio.wait_for(sent, 2)).offset == 41


async def test_transactions_begun_after_a_commit_retry_sooner_than_aiokafka_would(
        producer_made):
    # The broker answers CONCURRENT_TRANSACTIONS while the last commit's markers are
    # written; aiokafka asks again after its 20 ms unless told otherwise.
    from aiokafka.producer import sender

    _writer([])
    assert sender.BACKOFF_OVERRIDE <= 0.005


async def test_entries_are_pruned_only_below_the_offset_the_transactions_committed(
        producer_made):
    # The consumer counts a record committed once its transaction committed, but the
    # input offset goes to Kafka only now and then: an entry pruned past it would be
    # missing when a crash makes the record read again (judged and forwarded twice).
    writer = _writer([])
    for offset in (7, 8):
        commit = await _place_one(writer, offset)
        for ack in producer_made[0].acks:
            if not ack.done():
                ack.set_result(SimpleNamespace(partition=0, offset=1))
        await asyncio.wait_for(commit, 2)
    consumer = SimpleNamespace(_committed_offset={TopicPartition(INPUT, 0): 9,
                                                  TopicPartition(INPUT, 1): None,
                                                  TopicPartition("other", 0): 5})
    book = GateTable(SimpleNamespace(data={}), SimpleNamespace(consumer=consumer),
                     input_topic=INPUT, writer=writer)
    # Offsets went with the first commit only; partition 1 has none committed yet.
    assert book.committed() == {0: 8, 1: None}
    direct = GateTable(SimpleNamespace(data={}), SimpleNamespace(consumer=consumer),
                       input_topic=INPUT, writer=DirectWriter({}, None))
    assert direct.committed() == {0: 9, 1: None}
