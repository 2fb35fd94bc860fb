"""Where :class:`~.consumer.ProcessedOnlyConsumer` reads each partition from after an
assignment: its committed offset (or its first, without one), past what this
worker processed in its revoke phase, from the moment Faust resumes its flow;
records held back before then are read again from there. Mixed into the
consumer: it reads and sets the consumer's chain (``_base``, ``_next``,
``_sought``, ``_held``) and seeks in its thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

__all__ = ["SeekPositions"]

log = logging.getLogger("guardrail.transport")


class SeekPositions:
    """The seek to the committed offsets and the positions it sets (see the module text)."""

    _assignments: int
    _rewound: dict[Any, tuple[int, int]]
    _sought: set[Any]
    _sought_before_flow: set[Any]
    _seeks: set[asyncio.Future[None]]
    _held: dict[Any, int]
    _next: dict[Any, int | None]
    _base: dict[Any, int]
    _read_offset: Any
    _committed_offset: Any
    _acked: Any
    _gap: Any
    _thread: Any
    app: Any

    async def perform_seek(self) -> None:
        """Faust's seek to the committed offsets, then the chain's base and the
        position per partition, and the held records read again."""
        assignments = self._assignments
        try:
            committed = await self.seek_to_committed()
            starts = await self._starts_without_commit(
                [tp for tp, o in committed.items() if o is None or o < 0])
        finally:  # a check made before or while it ran proves nothing after it
            self._rewound.clear()
        at_commit = {tp: o if o is not None and o >= 0 else None for tp, o in committed.items()}
        # Faust's own bookkeeping, as its perform_seek keeps it.
        self._read_offset.update(at_commit)
        self._committed_offset.update({tp: o if o else None
                                       for tp, o in committed.items() if o is not None})
        if assignments != self._assignments:
            return  # a new assignment came meanwhile: its recovery seeks again
        moves = {}
        for tp, position in at_commit.items():
            # The client seeks only to a committed offset above 0: elsewhere its
            # position may have moved past records Faust fetched and dropped.
            sought_by_client = position is not None and position > 0
            if position is None:
                position = starts.get(tp)
            if position is not None:
                # Kept if known: a seek during a revoke phase can read an
                # offset older than the commits made while it ran.
                self._base.setdefault(tp, position)
                done = self._processed_from(tp, position)
                if done != position or not sought_by_client:
                    moves[tp] = position = done
            self._next[tp] = position
        for tp, position in moves.items():
            await self._thread.seek_in_thread(tp, position)
        self._sought_before_flow.update(committed)  # delivered from the flow's resume on
        await self._release_held(sought_now=moves.keys())

    def resume_flow(self) -> None:
        """Faust resumes the flow once it sought, and empties every stream's buffer as
        it does (``FlowControlEvent.resume``): a record delivered between the seek and
        the resume was dropped unacked, and the gate forwarded later records of its key
        before it. So the partitions sought deliver from the resume on; what was held
        back meanwhile is read again from the position the seek set."""
        super().resume_flow()  # type: ignore[misc]
        if self._sought_before_flow:
            self._sought.update(self._sought_before_flow)
            self._sought_before_flow.clear()
            if self._held:
                task = asyncio.ensure_future(self._release_held(sought_now=()))
                self._seeks.add(task)
                task.add_done_callback(self._seeks.discard)

    def _processed_from(self, tp: Any, position: int) -> int:
        """The first offset from ``position`` on that this worker has not
        processed: a partition given back to it after a rebalance need not be
        judged again where its acks of the revoke phase were not committed
        yet (they will be: the chain starts at ``position``). Only on topics
        acked by hand, where an ack means processed."""
        if tp.topic not in self.app.acked_when_processed:
            return position
        done, gap = set(self._acked.get(tp, ())), self._gap.get(tp)
        while position in done or (gap is not None and gap.overlaps(position)):
            position += 1
        return position

    async def _starts_without_commit(self, partitions: list[Any]) -> dict[Any, int]:
        """Where partitions without a committed offset start: their first
        offset (the app reads from the earliest). Faust drops records it
        fetched for a partition paused or moved meanwhile, and the client's
        position has then moved past them; had the first record delivered set
        where the chain starts, those would never be judged (seen: a
        partition's first 77 records, on the three-node cluster). So
        :meth:`perform_seek` seeks them there: waiting for a later record to
        show the jump is not enough, as a partition whose producers are done
        has none (seen: a restarted worker holding an input partition, lag 85,
        never reading it)."""
        wanted = [tp for tp in partitions if self.app.topics.acks_enabled_for(tp.topic)]
        if not wanted or self.app.conf.consumer_auto_offset_reset != "earliest":
            return {}
        try:
            found = await self.earliest_offsets(*wanted)
        except Exception as exc:  # the first record delivered then sets the start
            log.warning("could not read where %d partition(s) without a committed offset "
                        "start (%s)", len(wanted), exc)
            return {}
        return {tp: offset for tp, offset in found.items() if offset is not None}

    async def _release_held(self, *, sought_now: Iterable[Any]) -> None:
        """Read the records held back before the seek again: from the position
        the seek set, or (no start known) from the first one held. A partition
        just sought there is read from it anyway."""
        held, self._held = self._held, {}
        for tp in sought_now:
            held.pop(tp, None)
        for tp, first_held in held.items():
            position = self._next.get(tp)
            await self._thread.seek_in_thread(tp, first_held if position is None else position)

    async def seek(self, partition: Any, offset: int) -> None:
        self._rewound.pop(partition, None)
        await super().seek(partition, offset)
        self._next[partition] = offset
