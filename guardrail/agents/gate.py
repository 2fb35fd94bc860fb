"""The gate in the worker: every input record forwarded to the approved or the held
topic once judged, in order, fail-closed, never judged twice across a crash::

    gate = register(runtime)                # in gate mode, before the judging agent
    passage = await gate.admit(raw)         # room permitting, in offset order
    outgoing = await gate.through(passage, judge_one)   # judged (or not again), forwarded in order
    await gate.settled(passage)             # forwarded, or parked durably: it may be acked

**Decisions kept before anything is forwarded.** Judging a record ends with its
decision and the records judging made (results, judgment events, DLQ) written to
the gate table (:data:`GATE_TABLE`, changelog ``<app_id>-gate-changelog``,
partitioned like the input: the entry of input partition p goes to changelog
partition p, recovered by the worker that owns p) and confirmed by the broker.
Only then is the record forwarded. A record read again after a crash or a
rebalance is decided from its entry, never judged again nor forwarded differently,
nor again once forwarded (a crash between a forward and its entry's update makes a
copy with the same ``guardrail.source``, which a consumer drops it by). Entries of
committed offsets are deleted every :data:`PRUNE_SECONDS` (:mod:`.gate_table`).

**Review.** A held record is also a review item (:mod:`guardrail.gate.review`) when
review is on; the owner of its partition carries the answers out (:mod:`.gate_answers`).

**Order.** Records enter in the order read, none passed over (:mod:`.gate_sequence`);
:class:`~guardrail.gate.order.ReleaseOrder` decides when a decided one may leave
(``gate_order``); a lane's forwards are sent one after the other, each once the
broker acknowledged the one before, so a retry cannot reorder them.

**Acks.** A record is acked once forwarded or parked durably (:meth:`~GateForwarder.settled`),
in offset order: the committed offset never passes a record not on the approved or
held topic, the DLQ or parked in the gate table. **Partitions given up** are fenced
(:mod:`.gate_fence`). **Back-pressure**: at most ``gate_max_waiting`` records between
reading and forwarding (judged, waiting, parked); then the agent reads no more.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import faust

from ..gate.decision import Decision, GatePolicy, decide
from ..gate.order import Release, ReleaseOrder, Ticket
from ..gate.records import forwarded
from ..gate.sessions import SessionHolds
from ..gate.state import Entry, State
from ..stream.processing import Outgoing, RawMessage, RecordJudgment
from .gate_answers import AnswerFollower, ReviewAnswers
from .gate_fence import Fence
from .gate_sequence import ReadSequence
from .gate_sessions import HoldsFollower
from .gate_table import ANSWERABLE_STATES, GateTable
from .gate_writer import writer_for

if TYPE_CHECKING:
    from .runtime import WorkerRuntime

__all__ = ["GATE_TABLE", "PRUNE_SECONDS", "GateForwarder", "Passage", "register"]

log = logging.getLogger("guardrail.gate")

GATE_TABLE = "gate"
#: How often the entries of committed offsets leave the gate table.
PRUNE_SECONDS = 5.0
#: How often records approved unjudged (``gate_on_error: pass``) are reported.
UNJUDGED_REPORT_SECONDS = 60.0

JudgeOne = Callable[[RawMessage], Awaitable[tuple[RecordJudgment, list[Outgoing]]]]


@dataclass(eq=False)
class Passage:
    """One input record through the gate: its ticket in the order (None: it was
    forwarded or parked before, and only its records are published again)."""

    raw: RawMessage
    entry: Entry | None
    ticket: Ticket | None
    settled: asyncio.Future[None] = field(default_factory=asyncio.Future)
    decided_at: float = 0.0


class GateForwarder(ReviewAnswers):
    """The gate's state and forwards in one worker (see the module text)."""

    def __init__(self, runtime: WorkerRuntime, table: Any, writer: Any) -> None:
        s = runtime.settings
        self.gate, self.app, self.writer = s.gate, runtime.app, writer
        self.kafka, self.review, self.dlq_topic = s.kafka, s.review, s.kafka.dlq_topic
        self.review_on = s.review.review_users_file is not None
        self.input_topic = s.kafka.input_topic
        self.book = GateTable(table, runtime.app, input_topic=self.input_topic, writer=writer)
        self.telemetry = runtime.telemetry
        self.policy = GatePolicy.from_settings(s.gate, s.review, s.evaluation)
        self.thresholds = dict(s.evaluation.verdict_thresholds or {})
        self.judge_model = runtime.message_judge.evaluator.judge.model
        self.order = ReleaseOrder(s.gate.gate_order, hold_blocks_key=s.gate.gate_hold_blocks_key)
        #: Sessions judged UNSAFE whose later turns are held (``gate_session_hold``),
        #: and the follower of their topic: nothing is decided before it caught up.
        self.held_sessions: Any = frozenset()
        self.holds_follower: HoldsFollower | None = None
        self._room = asyncio.Condition()
        #: The last placement of each lane: the next one waits for it.
        self._lane_tail: dict[Hashable, asyncio.Future[None]] = {}
        self._passages: dict[tuple[int, int], Passage] = {}
        self._partitions: set[int] = set()
        self.sequence = ReadSequence(runtime.app, self.input_topic)  # none passed over
        self.fence = Fence()  # partitions given up: app.after_revoke, the agent's stop
        self.unjudged_since_report = 0
        ReviewAnswers.__init__(self)

    # -- through the gate ------------------------------------------------------------------

    @property
    def waiting(self) -> int:
        return self.order.waiting + self.order.parked

    def entry(self, partition: int, offset: int) -> Entry | None:
        return self.book.entry(partition, offset)

    async def admit(self, raw: RawMessage) -> Passage | None:
        """Wait for room, then let ``raw`` in, in offset order (one delivered again on its
        way here follows the first); None: one before it never came (:mod:`.gate_sequence`):
        ``raw`` is read again after it, and not to be acked."""
        s = raw.source
        if (first := self._passages.get((s.partition, s.offset))) is not None:
            return Passage(raw, None, None, settled=first.settled)  # publishes nothing
        async with self._room:
            await self._room.wait_for(lambda: self.waiting < self.gate.gate_max_waiting)
        if not self.sequence.admissible(s.partition, s.offset):
            return None
        self.sequence.admitted(s.partition, s.offset)
        entry = self.entry(s.partition, s.offset)
        ticket = None
        if entry is None or entry.state == "decided":
            ticket = Ticket(s.partition, s.offset, s.key, data=raw)
            self.order.enter(ticket)
        passage = Passage(raw, entry, ticket)
        self.writer.admitted(s.partition, s.offset)
        if ticket is None:  # forwarded or parked before: nothing to wait for
            passage.settled.set_result(None)
        else:
            self._passages[s.partition, s.offset] = passage
        self._gauges()
        return passage

    async def through(self, passage: Passage, judge_one: JudgeOne) -> list[Outgoing]:
        """The records to publish for the passage's input record, once judged (or
        taken from its entry) and its decision kept; its forward follows in order."""
        entry = passage.entry
        if passage.ticket is None:
            return list(entry.outgoing) if entry is not None else []
        if entry is not None:  # decided before a crash or a rebalance: as decided then
            decision, outgoing = entry.decision, list(entry.outgoing)
        else:
            judgment, outgoing = await judge_one(passage.raw)
            await self._sessions_read()
            decision = decide(judgment, self.policy, held_sessions=self.held_sessions)
            outgoing = self._with_review_item(judgment, decision, outgoing)
            # In a transaction, the DLQ records go with the record's place (once).
            dlq = tuple(o for o in outgoing if o.topic == self.dlq_topic
                        ) if self.writer.transactional else ()
            outgoing = [o for o in outgoing if o not in dlq]
            if self._owns(passage.ticket):  # not if its partition moved meanwhile
                s = passage.raw.source
                await self.book.keep(s.partition, s.offset,
                                     Entry("decided", decision, tuple(outgoing), dlq=dlq),
                                     confirm=True)
        if not self._owns(passage.ticket):
            return outgoing  # its partition's next owner reads it again; its acks count no more
        passage.decided_at = time.monotonic()
        s = passage.raw.source
        await self._release(self.order.decide(s.partition, s.offset, decision))
        return outgoing

    def _owns(self, ticket: Ticket) -> bool:
        return self.order.holds(ticket) and ticket.partition not in self.fence

    async def settled(self, raw: RawMessage) -> None:
        """Return once ``raw`` is forwarded, or parked durably (or its partition is gone)."""
        passage = self._passages.get((raw.source.partition, raw.source.offset))
        if passage is not None:
            await asyncio.shield(passage.settled)

    def done(self, raw: RawMessage) -> None:
        """``raw`` is placed and its records published: its offset may be committed."""
        self.writer.placed(raw.source.partition, raw.source.offset)

    # -- forwarding in order ---------------------------------------------------------------

    async def _release(self, releases: list[Release]) -> None:
        """Place each released ticket, one lane's after the other's (called right
        after the order released them: each joins its lane's chain at once)."""
        await asyncio.gather(*(self._in_lane(self.order.lane(r.ticket),
                                             lambda r=r: self._place(r))  # type: ignore[misc]
                               for r in releases))

    def _in_lane(self, lane: Hashable, place: Callable[[], Awaitable[None]],
                 ) -> asyncio.Future[None]:
        """``place()`` run once the lane's previous placement is done."""
        previous = self._lane_tail.get(lane)

        async def after_previous() -> None:
            if previous is not None:
                await asyncio.wait([previous])  # its failure is its own
            await place()

        task = asyncio.ensure_future(after_previous())
        self._lane_tail[lane] = task
        task.add_done_callback(lambda done: self._lane_tail.pop(lane, None)
                               if self._lane_tail.get(lane) is done else None)
        return task

    async def _place(self, release: Release) -> None:
        ticket = release.ticket
        if ticket.partition in self.fence:
            return  # its next owner places it; rebuild() settles its passage
        if release.action == "forward":
            await self._forward(ticket)
        elif release.action == "park":
            await self._park(ticket)
        else:  # the DLQ was its place: published with its results, or here
            self._count(ticket.decision, "dlq")
            known = self.entry(ticket.partition, ticket.offset)
            async with self.writer.together(ticket.partition):
                for out in known.dlq if known is not None else ():
                    await self.writer.send(ticket.partition, out)
                await self.book.keep(ticket.partition, ticket.offset,
                                     self._entry_of(ticket, "forwarded"), confirm=True)
        self._settle(ticket)

    def _state_after(self, held: bool, released: bool, key: bytes | None) -> State:
        if released or not held:
            return "released" if released else "forwarded"
        if self.gate.gate_hold_blocks_key and key is not None:
            return "blocking"
        return "held" if self.review_on else "forwarded"

    async def _forward(self, ticket: Ticket, *, released_by: str | None = None) -> None:
        decision = ticket.decision
        assert decision is not None
        out = forwarded(ticket.data, decision, approved_topic=self.gate.approved_topic,
                        held_topic=self.gate.held_topic, released_by=released_by)
        held = out.topic == self.gate.held_topic
        state = self._state_after(held, released_by is not None, ticket.key)
        async with self.writer.together(ticket.partition):  # one transaction, if any
            metadata = await self.writer.send(ticket.partition, out, metadata=held)
            entry = self._entry_of(ticket, state, by=released_by,
                                   held_at=(metadata.partition, metadata.offset) if held
                                   else None)
            # Confirmed before the record may be acked: a record read again after a
            # crash is then known as forwarded, not forwarded twice.
            await self.book.keep(ticket.partition, ticket.offset, entry, confirm=True)
        self._count(decision, "held" if held else "approved", released=released_by is not None)
        passage = self._passages.get((ticket.partition, ticket.offset))
        if passage is not None and passage.decided_at:
            self.telemetry.gate_order_wait.observe(time.monotonic() - passage.decided_at)
        if state in ANSWERABLE_STATES:
            self.answer_known(ticket.partition, ticket.offset)  # answered before it was held

    async def _park(self, ticket: Ticket) -> None:
        await self.book.keep(ticket.partition, ticket.offset,
                             self._entry_of(ticket, "parked", record=True), confirm=True)
        self._gauges()

    def _entry_of(self, ticket: Ticket, state: State, *, record: bool = False,
                  held_at: tuple[int, int] | None = None, by: str | None = None) -> Entry:
        known = self.entry(ticket.partition, ticket.offset)
        decision = ticket.decision
        assert decision is not None
        return Entry(state, decision, known.outgoing if known else (),
                     record=ticket.data if record else None, held_at=held_at, by=by,
                     key=ticket.key, dlq=known.dlq if known and state == "parked" else ())

    def _settle(self, ticket: Ticket) -> None:
        """The ticket is placed: its passage settles once that is visible (at once,
        or when the transaction it is written in commits)."""
        passage = self._passages.pop((ticket.partition, ticket.offset), None)
        if passage is not None:
            def settle(commit: asyncio.Future[None]) -> None:
                if not passage.settled.done() and not (commit.cancelled() or commit.exception()):
                    passage.settled.set_result(None)  # a failed commit acks nothing

            self.writer.commit_of(ticket.partition).add_done_callback(settle)
        self._gauges()
        asyncio.ensure_future(self._notify_room())

    async def _notify_room(self) -> None:
        async with self._room:
            self._room.notify_all()

    # -- rebalances ------------------------------------------------------------------------

    def rebuild(self) -> None:
        """After the table's recovery: forget the partitions this worker lost (their
        records are read again by the next owner), and restore the blocked keys and
        parked records of the ones it gained, and carry out the answers given on
        their held records meanwhile."""
        assigned = {tp.partition for tp in self.app.consumer.assignment()
                    if tp.topic == self.input_topic}
        fenced = self.fence.lift()  # given up, maybe assigned again: read again from its commit
        self.sequence.restart()
        for partition in (self._partitions - assigned) | fenced:
            self.order.drop_partition(partition)
            for (p, o), passage in list(self._passages.items()):
                if p == partition:
                    self._passages.pop((p, o))
                    if not passage.settled.done():
                        passage.settled.set_result(None)  # its acks no longer count
        gained = assigned - (self._partitions - fenced)
        blocked, parked, held = [], [], []
        for partition, offset, entry in self.book.entries(gained):
            if entry.state == "blocking":
                blocked.append((partition, entry.key))
            elif entry.state == "parked" and entry.record is not None:
                parked.append(Ticket(partition, offset, entry.record.source.key,
                                     entry.decision, data=entry.record))
            if entry.state in ANSWERABLE_STATES:
                held.append((partition, offset))
        self.order.restore(blocked, parked)
        self._partitions = assigned
        for partition, offset in held:
            self.answer_known(partition, offset)
        self._gauges()
        if blocked or parked:
            log.info("gate: %d keys blocked by a held record, %d records parked behind them",
                     len(blocked), len(parked))

    def prune(self) -> int:
        gone = self.book.prune(self._partitions)
        self.telemetry.gate_held_open.set(sum(
            1 for _, _, e in self.book.entries(self._partitions) if e.state in ANSWERABLE_STATES))
        return gone

    # -- telemetry -------------------------------------------------------------------------

    def _count(self, decision: Decision | None, to: str, *, released: bool = False) -> None:
        reason = "released" if released else (decision.reason if decision else None) or "-"
        self.telemetry.gate_records.labels(to=to, reason=reason).inc()
        if decision is not None and decision.unjudged:
            self.telemetry.gate_unjudged.inc()
            self.unjudged_since_report += 1

    def _gauges(self) -> None:
        self.telemetry.gate_waiting.set(self.waiting)
        self.telemetry.gate_parked.set(self.order.parked)

    def report_unjudged(self) -> None:
        """The once-a-minute line about records approved unjudged."""
        if self.unjudged_since_report:
            log.warning("gate: %d records approved unjudged in the last %.0fs (gate_on_error: "
                        "pass)", self.unjudged_since_report, UNJUDGED_REPORT_SECONDS)
            self.unjudged_since_report = 0


def register(runtime: WorkerRuntime) -> GateForwarder:
    """The gate table, its recovery and pruning, and the forwarder (gate mode only)."""
    app, s = runtime.app, runtime.settings
    table = app.tables.add(faust.Table(app, name=GATE_TABLE, default=dict,
                                          beacon=app.tables.beacon,
                                          partitions=s.kafka.topic_partitions,
                                          extra_topic_configs={"cleanup.policy": "compact"}))
    writer = writer_for(runtime, table)
    gate = GateForwarder(runtime, table, writer)
    input_topic = s.kafka.input_topic

    @app.on_partitions_assigned.connect
    async def own(sender: Any, assigned: Any, **kwargs: Any) -> None:
        # At once, before the tables recover: a transactional writer fences the
        # partitions' previous owner, whose open transactions then stop nothing.
        writer.assign({tp.partition for tp in assigned if tp.topic == input_topic})

    async def rebuild() -> None:
        gate.rebuild()

    table.on_recover(rebuild)
    app.after_revoke(lambda revoked: gate.fence.add(
        {tp.partition for tp in revoked if tp.topic == gate.input_topic}))

    @app.timer(PRUNE_SECONDS)
    async def prune_gate_table() -> None:
        gate.prune()

    @app.timer(UNJUDGED_REPORT_SECONDS)
    async def report_unjudged() -> None:
        gate.report_unjudged()

    if s.gate.gate_session_hold:  # the sessions whose later turns are held
        gate.held_sessions = SessionHolds()
        gate.holds_follower = HoldsFollower(runtime, gate.held_sessions)
        runtime.services.append(gate.holds_follower)
    if gate.review_on:  # reviewers release or keep held records
        runtime.services.append(AnswerFollower(gate,
                                               fetch_wait_ms=s.worker.consumer_fetch_wait_ms))
    runtime.state["gate"] = gate
    return gate
