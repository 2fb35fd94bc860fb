"""Faust's worker consumer, made to commit only what was processed.

Faust-streaming 0.15.3 decides what to commit from the offsets its streams
ack, with a gap list for offsets it thinks do not exist. Around rebalances
that bookkeeping can move the committed offset past records nobody judged,
and a partition's next owner then starts after them (the cluster bench lost
78 and 86 inputs this way, the embedded broker one). This consumer keeps one
invariant instead: **a partition's commit only ever passes offsets this
worker processed in this assignment, or offsets proven not to exist.**

**A chain from the committed offset.** Each assigned partition has a *base*:
the offset its next commit must start at, read from the broker when the
partition is sought to its committed offset (a partition without one is
sought to its first offset), then moved by each commit. A commit takes the
run of consecutive acked offsets starting exactly at the base; anything else
waits. Faust's own check let a run start one past its committed offset, and
none at all while a revoked partition's committed offset was forgotten; acks
from a revoke phase now continue the chain.

**Acks only for processed records.** Faust acks the records its streams skip
(flow stopped for a rebalance or a stop, or an earlier generation), like
processed ones. On a topic whose agent acks by hand
(``GuardrailFaustApp.mark_processed_on``), an ack counts only for a record
the agent marked processed, and a skipped record of the current assignment is
read again; acks of an earlier consumer generation never count (after the
assignment the partition is read again from its committed offset anyway).

**A record lost on its way is read again.** Faust's drain and stream can
drop a delivered record without an ack as the flow stops or resumes (seen: a
window counter stalled on one judgments record after a restart). The agents
ack in offset order, so a commit that waits on a delivered record while
records after it are done waits on a lost one: after ``LOST_AFTER_SECONDS``
it is read again, and the records after it that were processed (on a topic
acked by hand) are passed over. With nothing done after it, it is lost when
no stream holds it and no channel queues it (the last record of a burst).
The checks live in :mod:`.lost_records`. Such a record is judged after the
ones behind it; :meth:`ProcessedOnlyConsumer.done_below` tells the window
counter's de-duplication what was done before it (:mod:`guardrail.stream.dedup`).

**Records in offset order, from where the seek put them.** After a rebalance
Faust resumes partitions before it seeks them to their committed offsets, and
records fetched before a seek can arrive after it; then it resumes its flow,
which empties every stream's buffer. So a partition's records are held back
until its seek is done and the flow resumed, and then read again from the
position the seek set (past what this worker processed in the revoke phase and
has not committed yet, on a topic acked by hand); a record behind the next
expected offset is dropped (read before a seek back); one further on is a
*jump*: the partition is sought back to the next expected offset, on the
consumer's own thread in turn with its fetches, and the rest of its batch
dropped. A fetch that starts after that
seek and still jumps shows a real gap (compaction, transaction markers): its
offsets count as done. Faust's own gap logic never runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.utils.functional import consecutive_numbers

from .lost_records import LOST_AFTER_SECONDS, LostRecordChecks
from .seek_positions import SeekPositions

log = logging.getLogger("guardrail.transport")

__all__ = ["LOST_AFTER_SECONDS", "ProcessedOnlyConsumer"]

_DELIVER, _DROP, _REWOUND = object(), object(), object()


class ProcessedOnlyConsumer(SeekPositions, LostRecordChecks, faust_aiokafka.Consumer):
    """Faust's aiokafka consumer keeping the invariant of the module doc."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fetch_round = 0
        # Partition -> (offset it was sought back to, fetch round then).
        self._rewound: dict[Any, tuple[int, int]] = {}
        self._sought: set[Any] = set()  # sought to the committed offset, the flow resumed
        self._sought_before_flow: set[Any] = set()  # sought; Faust's flow not resumed yet
        self._held: dict[Any, int] = {}  # lowest offset held back before that seek
        self._next: dict[Any, int | None] = {}  # next offset to deliver, per partition
        self._base: dict[Any, int] = {}  # where the next commit must start
        self._processed: set[tuple[Any, int, int]] = set()  # (tp, offset, generation)
        self._seeks: set[asyncio.Future[None]] = set()  # seeks back started from ack()
        self._waiting: dict[Any, tuple[int, float]] = {}  # tp -> (base waited on, since)
        self._gate_missing: dict[Any, tuple[int, float]] = {}  # read_again_if_lost
        self._done_to: dict[Any, int] = {}  # tp -> the last answer of done_below()
        self._assignments = 0

    async def _wait_next_records(self, timeout: float) -> Any:
        self._fetch_round += 1
        return await super()._wait_next_records(timeout)

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[Any, Any]]:
        fetch_round = self._fetch_round + 1  # the round super() starts now
        rewound_now: set[Any] = set()
        async for tp, message in super().getmany(timeout):
            if not self.app.topics.acks_enabled_for(message.topic):
                yield tp, message
            elif tp in rewound_now:
                continue  # the rest of an unchecked run: read again from the position
            elif tp not in self._sought:
                self._held[tp] = min(message.offset, self._held.get(tp, message.offset))
            else:
                verdict = await self._place(tp, message.offset, fetch_round)
                if verdict is _DELIVER:
                    # Faust's drain then neither drops it nor records a gap of its own.
                    self._read_offset[tp] = None
                    yield tp, message
                elif verdict is _REWOUND:
                    rewound_now.add(tp)

    async def _place(self, tp: Any, offset: int, fetch_round: int) -> object:
        """Deliver the record at ``offset`` (the partition's next one, or the
        first after a real gap; the position moves past it), drop it (read
        before a seek back: delivered already or still to come), or seek back
        (an unchecked jump)."""
        expected = self._next.get(tp)
        if expected is None:  # no committed offset: the chain starts here
            self._base.setdefault(tp, offset)
        elif offset < expected:
            return _DROP
        elif offset == expected and self._done_here(tp, offset):
            self._next[tp] = offset + 1  # processed already: read again past it
            return _DROP
        elif offset > expected:
            rewound_to, rewound_in = self._rewound.get(tp, (None, fetch_round))
            if not (rewound_to == expected and rewound_in < fetch_round):
                log.warning("%s[%d]: got offset %d while at %d; reading again from %d",
                            tp.topic, tp.partition, offset, expected, expected)
                self._rewound[tp] = (expected, fetch_round)
                await self._thread.seek_in_thread(tp, expected)
                return _REWOUND
            self._gap[tp].addi(expected, offset)  # real: these offsets do not exist
        self._next[tp] = offset + 1
        return _DELIVER

    async def _add_gap(self, tp: Any, offset_from: int, offset_to: int) -> None:
        """Faust's own gaps are never recorded: :meth:`_place` records the real ones."""

    def _filter_tps_with_pending_acks(self, topics: Any = None) -> Any:
        """Faust's, and every partition in reading (one whose only delivered
        record was lost has no ack to list it)."""
        tps = set(super()._filter_tps_with_pending_acks(topics))
        tps.update(tp for tp in self._sought if tp in self._next and (
            topics is None or tp in topics or tp.topic in topics))
        return iter(tps)

    def _new_offset(self, tp: Any) -> int | None:
        base, acked = self._base.get(tp), self._acked[tp]
        if base is None:
            return None
        if not acked:
            self._check_lost_last(tp, base)
            return None
        gap = self._gap[tp]
        if gap:  # offsets that do not exist count as done
            end = max(acked) + 1
            acked.extend(o for iv in gap.overlap(base, end)
                         for o in range(max(iv.begin, base), min(iv.end, end)))
            gap.chop(0, end)
        acked[:] = sorted({o for o in acked if o >= base})
        index = self._acked_index[tp]
        index.intersection_update(acked)
        if not acked or acked[0] != base:
            if acked:
                self._check_lost(tp, base)
            return None  # the base itself is not done: nothing after it may be committed
        self._waiting.pop(tp, None)
        run = next(consecutive_numbers(acked))
        del acked[:len(run)]
        index.difference_update(run)
        self._base[tp] = run[-1] + 1
        return run[-1] + 1

    async def _commit(self, offsets: Any) -> bool:
        """Commit, except the offsets of topics committed elsewhere (the gate's
        transactions, ``GuardrailFaustApp.offsets_committed_elsewhere``): a second
        committer could move them back, and a record read again after its gate
        entry is pruned would be forwarded again. Their acks still count here: the
        offset known committed (what pruning reads) never passes the other's."""
        elsewhere = getattr(self.app, "offsets_committed_elsewhere", ())
        mine = {tp: offset for tp, offset in offsets.items() if tp.topic not in elsewhere}
        if not mine:
            return True
        return bool(await super()._commit(mine))

    async def highwaters(self, *partitions: Any) -> Any:
        """Where table recovery reads to, once the previous owner's transactions settled
        (``gate_transactional``: read before, the gate table may lack what it committed)."""
        if (settled := getattr(self.app, "transactions_settled", None)) is not None:
            await settled()
        return await super().highwaters(*partitions)

    async def commit_and_end_transactions(self) -> None:
        """The stop's last commit, made even when another commit is under way.

        Faust's ``commit()`` waits for a commit in progress and then returns
        without committing. The periodic one may have taken its offsets before
        the agents' last acks of the drain, so a stop that met it committed
        none of those: the restart judged them again (duplicate results).
        Once no commit is in progress, committing starts without a pause, so
        none can slip in between."""
        while await self.maybe_wait_for_commit_to_finish():
            pass
        await self.commit(start_new_transaction=False)

    async def on_partitions_revoked(self, revoked: Any) -> None:
        # Faust forgets the revoked partitions' acks, then runs the app's revoke
        # phase, in which the agents finish and ack what they hold and Faust
        # commits it. Those commits continue the chain, so the acks made so far
        # are put back before that phase starts.
        kept = {tp: (self._acked[tp], self._acked_index[tp], self._gap[tp])
                for tp in revoked if tp in self._acked}
        self._unseek()
        revoke_phase = self._on_partitions_revoked

        async def acks_kept_then_revoke_phase(partitions: Any) -> None:
            for tp, (acked, index, gap) in kept.items():
                self._acked[tp], self._acked_index[tp], self._gap[tp] = acked, index, gap
            await revoke_phase(partitions)

        self._on_partitions_revoked = acks_kept_then_revoke_phase
        try:
            await super().on_partitions_revoked(revoked)
        finally:
            self._on_partitions_revoked = revoke_phase

    async def on_partitions_assigned(self, assigned: Any, generation_id: int = 0) -> None:
        self._unseek()
        self._base.clear()  # read again from the committed offsets of this assignment
        self._processed.clear()
        for tp in [tp for tp in self._acked if tp not in assigned]:
            for table in (self._acked, self._acked_index, self._gap):
                table.pop(tp, None)
        await super().on_partitions_assigned(assigned, generation_id)

    def _unseek(self) -> None:
        self._assignments += 1
        self._sought.clear()
        self._sought_before_flow.clear()
        self._held.clear()
        self._next.clear()
        self._waiting.clear()  # a wait is timed within one assignment's reading
        self._gate_missing.clear()
        self._done_to.clear()

    def processed(self, messages: Iterable[Any]) -> None:
        """Mark records as processed: on a topic of
        ``GuardrailFaustApp.mark_processed_on``, only their acks count."""
        self._processed.update((m.tp, m.offset, m.generation_id) for m in messages)

    def forget(self, messages: Iterable[Any]) -> None:
        """Stop tracking messages an agent abandoned unacked on its way out, so
        the stop does not wait for them (Faust's ``wait_empty`` would, until
        killed). Their offsets are not committed: they are redelivered."""
        for message in messages:
            self._unacked_messages.discard(message)

    def ack(self, message: Any) -> bool:
        key = (message.tp, message.offset, message.generation_id)
        stale = message.generation_id != self.app.consumer_generation_id
        if stale or (message.topic in self.app.acked_when_processed
                     and key not in self._processed):
            # Stale, or skipped by Faust's stream: never part of a commit.
            message.acked = True
            self._unacked_messages.discard(message)
            if not stale:
                self._read_again(message.tp, message.offset)
            return False
        self._processed.discard(key)
        return super().ack(message)

    def done_below(self, tp: Any, start: int | None = None) -> int | None:
        """The first offset of ``tp`` from ``start`` on (default: the commit
        chain's base) that is not processed in this assignment: every record
        below it was processed (acked by hand, or committed), ``start`` taken
        as such by the caller. None before the partition's reading started, or
        on a topic not acked by hand. The window counter's de-duplication
        floor (:mod:`guardrail.stream.dedup`)."""
        base = self._base.get(tp)
        if base is None or tp.topic not in self.app.acked_when_processed:
            return None
        # Every offset below the last answer is still done (only a commit
        # forgets acks, and it moves the base past them): no rescan from the base.
        known = max(base, self._done_to.get(tp, base))
        offset = known if start is None else max(known, start)
        done, gap = self._acked_index.get(tp, ()), self._gap.get(tp)
        while offset in done or (gap and gap.overlaps(offset)):
            offset += 1
        if start is None or start <= known:  # a run from ``known``: the next answer's start
            self._done_to[tp] = offset
        return offset

    def _delivered(self, tp: Any, offset: int) -> bool:
        """Whether this assignment's reading has passed ``offset``."""
        expected = self._next.get(tp)
        return tp in self._sought and expected is not None and offset < expected

    def _done_here(self, tp: Any, offset: int) -> bool:
        """Whether ``offset`` was processed and awaits its commit: a record
        read again after a seek back is then passed over. Only on topics
        acked by hand, where an ack means processed."""
        index = self._acked_index.get(tp)
        return (tp.topic in self.app.acked_when_processed and index is not None
                and offset in index)

    def _seek_back(self, tp: Any, offset: int) -> None:
        self._next[tp] = offset
        self._rewound.pop(tp, None)
        task = asyncio.ensure_future(self._thread.seek_in_thread(tp, offset))
        self._seeks.add(task)
        task.add_done_callback(self._seeks.discard)
