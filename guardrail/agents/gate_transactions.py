"""The gate's writes in Kafka transactions (``gate_transactional``)::

    writer = TransactionalWriter(kafka=..., app_id=..., input_topic=..., table=table,
                                 serializers=..., on_fatal=stop)
    async with writer.together(input_partition):   # in one transaction
        await writer.send(input_partition, outgoing, metadata=False)
        await writer.write_entry(input_partition, key, value)
    writer.placed(input_partition, offset)
    await writer.commit_of(input_partition)       # committed: ack the record now

:class:`TransactionalWriter` keeps one transactional producer per input partition
(``transactional_id`` ``<app_id>-gate-<input topic>-<partition>``: the partition's
next owner fences a worker that lost it) and writes everything of that partition —
forwards and entries — in transactions committed every ``gate_transaction_ms``,
with the input offsets up to the last record placed in order
(``send_offsets_to_transaction`` for the worker's group) every
:data:`OFFSETS_SECONDS`. Records are acked only once their transaction committed,
and the worker reads ``read_committed`` (its tables' recovery too): what a crash
aborted is neither forwarded nor remembered, and is decided again; a record read
again whose entry committed is placed as that says, not twice. The writes of a
transaction do not wait for one another's acknowledgement; its commit waits for
them all. A transaction that cannot commit stops the worker
(:data:`EXIT_TRANSACTION_FAILED`): nothing of it is acked, and its records are
read again from the last commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition

from ..kafka.clients import client_options, retry_concurrent_transactions_sooner
from ..stream.processing import Outgoing

__all__ = ["TransactionalWriter", "already_done", "COMMIT_SECONDS",
           "EXIT_TRANSACTION_FAILED", "OFFSETS_SECONDS", "TRANSACTION_TIMEOUT_MS"]

log = logging.getLogger("guardrail.gate")

#: How long a transaction stays open for more writes before it commits.
COMMIT_SECONDS = 0.01
#: The exit code of a worker stopped by a transaction that could not commit
#: (EX_TEMPFAIL: start it again; it resumes from the last commit).
EXIT_TRANSACTION_FAILED = 75
#: The input offsets go with a transaction's commit at most this often (and with a
#: partition's last one here): after a crash, what was placed since is read again.
OFFSETS_SECONDS = 0.1
#: The broker aborts a transaction left open this long (its producer died).
TRANSACTION_TIMEOUT_MS = 10_000


def already_done() -> asyncio.Future[None]:
    """A future done already (nothing to wait for)."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


@dataclass(eq=False)
class _Partition:
    """One input partition's producer, its open transaction and its offsets."""

    partition: int
    producer: AIOKafkaProducer
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    commit: asyncio.Future[None] | None = None  # the open transaction's; None: none open
    #: Writes that must share a transaction, under way (``together``); a commit due
    #: waits for them (``drained``) and new ones wait for it (``reopened``).
    holders: int = 0
    drained: asyncio.Event = field(default_factory=asyncio.Event)
    reopened: asyncio.Event = field(default_factory=asyncio.Event)
    admitted: deque[int] = field(default_factory=deque)
    placed: set[int] = field(default_factory=set)
    #: The open transaction's writes, until the broker acknowledged them.
    writes: list[asyncio.Future[Any]] = field(default_factory=list)
    next_offset: int | None = None  # the input offset to commit with the next transaction
    committed_offset: int | None = None
    offsets_sent_at: float = 0.0  # time.monotonic() when they last went with a commit

    def admit(self, offset: int) -> None:
        """A record read (in offset order; one read again is counted once)."""
        last = self.admitted[-1] if self.admitted else self.next_offset
        if last is None or offset > last or (not self.admitted and offset >= last):
            self.admitted.append(offset)

    def advance(self) -> None:
        """Move ``next_offset`` past the records placed in order."""
        while self.admitted and self.admitted[0] in self.placed:
            offset = self.admitted.popleft()
            self.placed.discard(offset)
            self.next_offset = offset + 1


async def _drain(state: _Partition, timeout: float | None = None) -> None:
    """No new writes that belong together (``together``) until ``reopened`` is set
    again; return once those under way ended."""
    state.reopened.clear()
    if state.holders:
        state.drained.clear()
        await asyncio.wait_for(state.drained.wait(), timeout)


class TransactionalWriter:
    """A transactional producer per input partition (see the module text)."""

    transactional = True

    def __init__(self, *, kafka: Any, app_id: str, input_topic: str, table: Any,
                 serializers: Any, on_fatal: Callable[[str], None],
                 assignment: Callable[[], Any] = lambda: (),
                 commit_seconds: float = COMMIT_SECONDS) -> None:
        self.kafka, self.app_id, self.input_topic = kafka, app_id, input_topic
        self.table, self.serializers, self.on_fatal = table, serializers, on_fatal
        self.commit_seconds = commit_seconds
        self.changelog = table.changelog_topic.get_topic_name()
        self._partitions: dict[int, _Partition] = {}
        self._starting: dict[int, asyncio.Future[_Partition]] = {}
        self.failed = False
        self.assignment = assignment  # the worker consumer's topic partitions now
        retry_concurrent_transactions_sooner()

    def transactional_id(self, partition: int) -> str:
        return f"{self.app_id}-gate-{self.input_topic}-{partition}"

    # -- partitions ------------------------------------------------------------------------

    def assign(self, partitions: set[int]) -> None:
        """Start producers for new partitions at once (fencing their previous owner,
        whose open transaction the broker then aborts: a reader ``read_committed``
        reads past it), and commit and stop the ones of partitions gone."""
        for partition in set(self._partitions) - partitions:
            asyncio.ensure_future(self._retire(self._partitions.pop(partition)))
        for partition in partitions - set(self._partitions) - set(self._starting):
            starting = asyncio.ensure_future(self._start(partition))
            self._starting[partition] = starting
            starting.add_done_callback(lambda _, p=partition: self._starting.pop(p, None))

    async def settled(self) -> None:
        """Return once the producers of the input partitions assigned now have
        started: each start fences the partition's previous owner and waits for
        its open transaction to be committed or aborted, so what it committed is
        readable (the gate table's recovery and the committed offsets wait for it)."""
        assigned = {tp.partition for tp in self.assignment()
                    if tp.topic == self.input_topic}
        self.assign(assigned)  # before the rebalance's signal, which may come later
        starting = [self._starting[p] for p in assigned if p in self._starting]
        if starting:
            await asyncio.gather(*(asyncio.shield(s) for s in starting),
                                 return_exceptions=True)

    async def _owner(self, partition: int) -> _Partition:
        state = self._partitions.get(partition)
        if state is not None:
            return state
        starting = self._starting.get(partition)
        if starting is None:  # never write for a partition another worker may own now
            raise RuntimeError(f"partition {partition} of {self.input_topic} is not this "
                               "worker's")
        return await asyncio.shield(starting)

    async def _start(self, partition: int) -> _Partition:
        delay = 0.5
        while True:
            producer = AIOKafkaProducer(transactional_id=self.transactional_id(partition),
                                        transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
                                        enable_idempotence=True, acks="all", linger_ms=0,
                                        max_request_size=16 * 1024 * 1024,
                                        **client_options(self.kafka))
            try:
                await producer.start()
                break
            except Exception as exc:  # the broker is away: the partition waits for it
                await producer.stop()
                log.error("gate: the transactional producer of partition %d did not start "
                          "(%s); trying again in %.1fs", partition, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
        log.info("gate: transactions on %s partition %d (transactional id %s)",
                 self.input_topic, partition, self.transactional_id(partition))
        state = _Partition(partition, producer)
        state.reopened.set()
        self._partitions[partition] = state
        return state

    async def _retire(self, state: _Partition) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await _drain(state, timeout=10.0)
        try:
            async with state.lock:
                if state.commit is None and state.next_offset not in (
                        None, state.committed_offset):  # placed since the offsets went
                    await self._begin(state)  # for them alone
                await self._commit_locked(state, last=True)
        except Exception as exc:  # fenced by the next owner, most likely: it redoes them
            log.info("gate: the last transaction of partition %d did not commit (%s)",
                     state.partition, exc)
        finally:
            await state.producer.stop()

    async def close(self) -> None:
        for starting in list(self._starting.values()):
            starting.cancel()
        for partition in list(self._partitions):
            await self._retire(self._partitions.pop(partition))

    # -- writes ----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def together(self, partition: int) -> AsyncIterator[None]:
        """The writes made inside share one transaction: a commit waits for them."""
        state = await self._owner(partition)
        await state.reopened.wait()
        state.holders += 1
        try:
            yield
        finally:
            state.holders -= 1
            if state.holders == 0:
                state.drained.set()

    async def send(self, input_partition: int, out: Outgoing, *,
                   metadata: bool = True) -> Any:
        """Add ``out`` to the open transaction; with ``metadata``, return the broker's
        acknowledgement of it, else None at once (the commit waits for it)."""
        timestamp = out.timestamp_ms if out.timestamp_ms else None
        sent = await self._write(input_partition, out.topic, out.key, out.value,
                                 out.partition, list(out.headers) or None, timestamp)
        return await sent if metadata else None

    async def write_entry(self, input_partition: int, key: str, value: Any) -> None:
        """Add the entry to the open transaction (not waiting for its acknowledgement:
        nothing of the transaction counts before its commit, which waits for it)."""
        raw_key = self.serializers.dumps_key(self.table.key_type, key,
                                             serializer=self.table.key_serializer)
        raw_value = None if value is None else self.serializers.dumps_value(
            self.table.value_type, value, serializer=self.table.value_serializer)
        await self._write(input_partition, self.changelog, raw_key, raw_value, input_partition,
                          None, None)

    async def _write(self, input_partition: int, topic: str, key: Any, value: Any,
                     partition: int | None, headers: Any, timestamp_ms: int | None,
                     ) -> asyncio.Future[Any]:
        """Add one record to the partition's open transaction; returns the broker's
        acknowledgement to come. Within a transaction the writes need not wait for one
        another's (all commit or none); its commit waits for them all."""
        state = await self._owner(input_partition)
        try:
            async with state.lock:
                if state.commit is None:
                    await self._begin(state)
                    asyncio.ensure_future(self._commit_later(state))
                sent = await state.producer.send(topic, value=value, key=key,
                                                 partition=partition, headers=headers,
                                                 timestamp_ms=timestamp_ms)
                state.writes.append(sent)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._write_failed(topic, input_partition, exc)
            raise
        sent.add_done_callback(lambda ack: self._acknowledged(topic, input_partition, ack))
        return sent

    @staticmethod
    async def _begin(state: _Partition) -> None:
        """Open the partition's next transaction (under its lock)."""
        await state.producer.begin_transaction()
        state.commit = asyncio.get_running_loop().create_future()

    def _acknowledged(self, topic: str, input_partition: int, ack: asyncio.Future[Any]) -> None:
        """A write's answer from the broker: a refusal fails its transaction."""
        if ack.cancelled():
            self._write_failed(topic, input_partition, asyncio.CancelledError())
        elif (exc := ack.exception()) is not None:
            self._write_failed(topic, input_partition, exc)

    def _write_failed(self, topic: str, input_partition: int, exc: BaseException) -> None:
        """The transaction cannot hold a write: it must not commit (the worker stops)."""
        self.failed = True
        self.on_fatal(f"the gate could not write to {topic} in its transaction on "
                      f"{self.input_topic} partition {input_partition} "
                      f"({type(exc).__name__}: {exc})")

    def admitted(self, partition: int, offset: int) -> None:
        state = self._partitions.get(partition)
        if state is not None:
            state.admit(offset)

    def placed(self, partition: int, offset: int) -> None:
        state = self._partitions.get(partition)
        if state is not None:
            state.placed.add(offset)
            state.advance()

    def offset_committed(self, partition: int, counted: int) -> int:
        """The input offset committed for ``partition``: the consumer's count
        (``counted``) or, if lower, the one the transactions committed, which go
        now and then (0 while none did here)."""
        state = self._partitions.get(partition)
        if state is None or state.committed_offset is None:
            return 0
        return min(counted, state.committed_offset)

    def commit_of(self, partition: int) -> asyncio.Future[None]:
        state = self._partitions.get(partition)
        if state is None or state.commit is None:
            return already_done()
        return state.commit

    # -- commits ---------------------------------------------------------------------------

    async def _commit_later(self, state: _Partition) -> None:
        await asyncio.sleep(self.commit_seconds)
        await _drain(state)
        try:
            async with state.lock:
                await self._commit_locked(state)
        except Exception as exc:
            self.failed = True
            self.on_fatal(f"the gate's transaction on {self.input_topic} partition "
                          f"{state.partition} did not commit ({type(exc).__name__}: {exc})")
        finally:
            state.reopened.set()

    async def _commit_locked(self, state: _Partition, *, last: bool = False) -> None:
        """Commit the open transaction, with the input offsets placed in order when
        ``OFFSETS_SECONDS`` passed since they last went (or ``last``: the partition's
        last transaction here). Two more requests to the brokers, so not with each:
        a record read again after a crash is known by its entry, committed with its
        forward, and placed as it was."""
        commit = state.commit
        if commit is None:
            return
        writes, state.writes = state.writes, []
        try:
            if writes:
                await asyncio.wait(writes)  # acknowledged, or failed (then self.failed)
            if self.failed:  # a write of it failed: it must not commit half
                await state.producer.abort_transaction()
                raise RuntimeError("aborted: a write of the transaction failed")
            offset, now = state.next_offset, time.monotonic()
            due = last or now - state.offsets_sent_at >= OFFSETS_SECONDS
            if due and offset is not None and offset != state.committed_offset:
                await state.producer.send_offsets_to_transaction(
                    {TopicPartition(self.input_topic, state.partition): offset}, self.app_id)
                state.offsets_sent_at = now
            else:
                offset = state.committed_offset
            await state.producer.commit_transaction()
            state.committed_offset = offset
        except BaseException as exc:
            if not commit.done():
                commit.set_exception(exc)
                commit.exception()  # read here: the waiters may be gone
            raise
        finally:
            state.commit = None  # kept until it ended: acks wait on it
        commit.set_result(None)


