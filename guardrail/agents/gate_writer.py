"""How the gate writes: forwards to the approved and held topics, and entries of the
gate table. Two writers with one interface::

    writer = DirectWriter(topics, table)                     # the default
    writer = TransactionalWriter(settings, table, on_fatal=stop)   # gate_transactional
    async with writer.together(input_partition):             # in one transaction
        metadata = await writer.send(input_partition, outgoing)  # acknowledged by the broker
        await writer.write_entry(input_partition, key, value)    # (or in the transaction)
    writer.placed(input_partition, offset)                   # the record is placed
    await writer.commit_of(input_partition)                  # ... and visible: ack it now

:class:`DirectWriter` sends each write on its own and again while it fails; a write
is visible once acknowledged. A crash between a forward and its entry's update
forwards the record twice.

:class:`TransactionalWriter` (:mod:`.gate_transactions`) writes them in transactions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..stream.processing import Outgoing
from .gate_transactions import (EXIT_TRANSACTION_FAILED, TransactionalWriter,
                                already_done)

if TYPE_CHECKING:
    from .runtime import WorkerRuntime

__all__ = ["DirectWriter", "TransactionalWriter", "writer_for", "EXIT_TRANSACTION_FAILED"]

log = logging.getLogger("guardrail.gate")


async def _retrying(what: str, send: Callable[[], Any]) -> Any:
    """``await (await send())``, again while it fails: broker trouble must not lose it."""
    delay = 0.5
    while True:
        try:
            return await (await send())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("%s failed (%s); trying again in %.1fs", what, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)


class DirectWriter:
    """Each write on its own, through the worker's producer (see the module text)."""

    transactional = False

    def __init__(self, topics: dict[str, Any], table: Any) -> None:
        self.topics, self.table = topics, table

    async def send(self, input_partition: int, out: Outgoing, *, metadata: bool = True) -> Any:
        """Acknowledged by the broker, whatever ``metadata`` asks: the entry written
        after a forward must not say forwarded before it is."""
        return await _retrying(f"forwarding to {out.topic}", lambda: self.topics[out.topic].send(
            key=out.key, value=out.value, partition=out.partition,
            headers=list(out.headers) or None,
            timestamp=out.timestamp_ms / 1000 if out.timestamp_ms else None))

    async def write_entry(self, input_partition: int, key: str, value: Any) -> None:
        def send() -> Any:
            # The key's newest value: a write after this one may have superseded it
            # (the table holds what was written last; a deleted key is a tombstone).
            newest = self.table.data.get(key)
            return self.table.changelog_topic.send(
                key=key, value=newest, partition=input_partition,
                key_serializer=self.table.key_serializer,
                value_serializer="raw" if newest is None else self.table.value_serializer)
        await _retrying("a gate table write", send)

    def together(self, partition: int) -> Any:
        """Writes made inside are made in one transaction (here: nothing to do)."""
        return contextlib.nullcontext()

    def admitted(self, partition: int, offset: int) -> None:
        """A record let in (offsets of a partition in order)."""

    def placed(self, partition: int, offset: int) -> None:
        """A record forwarded, parked or sent to the DLQ, its entry written."""

    def commit_of(self, partition: int) -> asyncio.Future[None]:
        """Done once what was written for ``partition`` so far is visible."""
        return already_done()

    def assign(self, partitions: set[int]) -> None:
        """The input partitions this worker owns now."""

    def offset_committed(self, partition: int, counted: int) -> int:
        """The input offset committed for ``partition``: the consumer commits it,
        so what it counts (``counted``)."""
        return counted

    async def close(self) -> None:
        """Commit what is open and stop (the worker stops)."""


def writer_for(runtime: WorkerRuntime, table: Any) -> DirectWriter | TransactionalWriter:
    """How the gate writes: in transactions (``gate_transactional``) or directly."""
    from .judging import RAW_TOPIC

    app, s = runtime.app, runtime.settings
    if not s.gate.gate_transactional:
        topics = {name: app.topic(name, **RAW_TOPIC)
                  for name in (s.gate.approved_topic, s.gate.held_topic)}
        return DirectWriter(topics, table)
    app.read_committed = True  # the input and the tables' recovery: committed records only
    app.offsets_committed_elsewhere.add(s.kafka.input_topic)  # by the transactions
    writer = TransactionalWriter(
        kafka=s.kafka, app_id=s.kafka.app_id, input_topic=s.kafka.input_topic, table=table,
        serializers=app.serializers,
        on_fatal=lambda why: runtime.stop_on_fatal(why, EXIT_TRANSACTION_FAILED),
        assignment=lambda: app.consumer.assignment(),
        commit_seconds=s.gate.gate_transaction_ms / 1000)
    app.transactions_settled = writer.settled
    app.before_producer_stops(writer.close)
    return writer
