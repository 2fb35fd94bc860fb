"""The gate table: one entry per input record (:class:`~guardrail.gate.state.Entry`),
kept in a Faust table whose changelog ``<app_id>-gate-changelog`` is partitioned
like the input (the entry of input partition p goes to changelog partition p and
is recovered by the worker that owns p)::

    book = GateTable(table, app, input_topic="model-outputs", writer=DirectWriter(topics, table))
    await book.keep(0, 41, Entry("decided", decision, outgoing), confirm=True)
    book.entry(0, 41).state            # "decided"
    book.prune(owned={0, 1})           # entries done with below the committed offsets

Writes go to the changelog at once (:mod:`.gate_writer`), not through Faust's
buffer (where table writes queue behind the windows'): the window between a
forward and its entry, which a crash turns into a second copy, stays a few
milliseconds; in a transaction, there is none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from ..gate.state import Entry, entry_key, parse_entry_key

__all__ = ["GateTable", "DONE_STATES", "ANSWERABLE_STATES"]

#: The states whose entry is done with once its offset is committed.
DONE_STATES = frozenset({"decided", "forwarded", "released", "confirmed"})
#: Held records waiting for a reviewer's answer.
ANSWERABLE_STATES = frozenset({"held", "blocking"})


class GateTable:
    """The gate's entries over a Faust table (see the module text)."""

    def __init__(self, table: Any, app: Any, *, input_topic: str, writer: Any) -> None:
        self.table, self.app, self.input_topic = table, app, input_topic
        #: How entries are written (:mod:`.gate_writer`).
        self.writer = writer

    def entry(self, partition: int, offset: int) -> Entry | None:
        value = self.table.data.get(entry_key(partition, offset))
        return Entry.from_dict(value) if isinstance(value, dict) else None

    def entries(self, partitions: set[int]) -> Iterator[tuple[int, int, Entry]]:
        """``(partition, offset, entry)`` of every entry of ``partitions``."""
        for key, value in list(self.table.data.items()):
            partition, offset = parse_entry_key(key)
            if partition in partitions and isinstance(value, dict):
                yield partition, offset, Entry.from_dict(value)

    async def keep(self, partition: int, offset: int, entry: Entry, *,
                   confirm: bool = False) -> None:
        """Write ``entry``; with ``confirm``, return once the broker has it (this
        write: records decide concurrently; in a transaction, once it is in it)."""
        key, value = entry_key(partition, offset), entry.to_dict()
        self.table.data[key] = value
        sent = asyncio.ensure_future(self.writer.write_entry(partition, key, value))
        if confirm:
            await sent

    def committed(self) -> dict[int, int | None]:
        """The committed offset of each input partition the consumer knows (None: none)."""
        known = getattr(self.app.consumer, "_committed_offset", {})  # no public accessor
        committed = {tp.partition: offset for tp, offset in dict(known).items()
                     if tp.topic == self.input_topic}
        # The writer's say: with transactions, Kafka's offset may be behind what the
        # consumer counts, and a record read again needs its entry. (None: no offset
        # committed yet, nothing to prune.)
        return {partition: offset if offset is None
                else self.writer.offset_committed(partition, offset)
                for partition, offset in committed.items()}

    def prune(self, owned: set[int]) -> int:
        """Below each owned partition's committed offset: delete the entries done
        with, and slim the held ones waiting for a reviewer (their records to
        publish are published for good). Returns how many were deleted."""
        committed = self.committed()
        gone = 0
        for partition, offset, entry in self.entries(owned):
            done = committed.get(partition)
            if done is None or offset >= done:
                continue
            if entry.state in DONE_STATES:
                del self.table.data[entry_key(partition, offset)]
                asyncio.ensure_future(self.writer.write_entry(partition,
                                                              entry_key(partition, offset), None))
                gone += 1
            elif entry.state in ANSWERABLE_STATES and entry.outgoing:
                asyncio.ensure_future(self.keep(partition, offset, entry.slim()))
        return gone
