"""Reviewers' answers on held records, carried out by the worker that owns them.

A reviewer answers a held record on ``/review`` (any worker's page): the answer
is a :class:`~guardrail.review.records.GateAnswer` on the labels topic. Every
worker follows the labels topic from its beginning (:class:`AnswerFollower`) and
keeps the answers on its input topic's records; the worker that owns the held
record's input partition carries it out, in the record's lane:

- ``release``: the held copy is read back from the held topic and forwarded to
  the approved topic with ``guardrail.released_by``; its entry becomes
  ``released``, so an answer read again (after a restart, on the partition's
  next owner) changes nothing;
- ``keep``: its entry becomes ``confirmed``.

Either way a key it blocked (``gate_hold_blocks_key``) goes on: the records parked
behind it leave in order. An answer given before its record reached the held topic
(a record parked behind another) is carried out once it does; one on a partition
that moves is carried out by its next owner, from the same answers.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..gate.order import Ticket
from ..gate.review import held_item, parse_source, with_item
from ..gate.state import Entry
from ..kafka.changelog import TopicFollower
from ..kafka.io import read_record_at
from ..review.records import GateAnswer, SchemaError
from ..stream.envelope import Source
from ..stream.processing import Outgoing, RawMessage, RecordJudgment
from .gate_table import ANSWERABLE_STATES

__all__ = ["AnswerFollower", "ReviewAnswers", "RETRY_SECONDS"]

log = logging.getLogger("guardrail.gate")

#: Wait before trying a release again whose held copy could not be read.
RETRY_SECONDS = 5.0


class AnswerFollower:
    """The labels topic followed for gate answers (a worker service)."""

    def __init__(self, gate: Any, *, fetch_wait_ms: int) -> None:
        self.gate = gate
        self.follower = TopicFollower(gate.kafka, gate.review.labels_topic, self,
                                      fetch_wait_ms=fetch_wait_ms)

    def apply(self, key: bytes | None, value: bytes | None, *, where: str = "") -> None:
        if value is None or b'"gate_answer"' not in value:
            return  # labels (and their tombstones) are the review queue's business
        try:
            answer = GateAnswer.decode(value)
        except SchemaError as exc:
            log.warning("gate: an answer that cannot be read (%s): %s", where, exc)
            return
        self.gate.on_answer(answer)

    async def start(self) -> None:
        await self.follower.start()

    async def stop(self) -> None:
        await self.follower.stop()


class ReviewAnswers:
    """The forwarder's review side: a held record's review item, the session holds
    it decides by, and the answers it carries out (see the module text); a mixin of
    :class:`~guardrail.agents.gate.GateForwarder`, whose lanes, order, table and
    forwards it uses."""

    input_topic: str
    held_sessions: Any
    _partitions: set[int]

    def __init__(self) -> None:
        #: ``source`` of a held input record -> (answer, reviewer).
        self.answers: dict[str, tuple[str, str]] = {}
        self._answering: set[tuple[int, int]] = set()

    def on_answer(self, answer: GateAnswer) -> None:
        """An answer read from the labels topic."""
        if answer.gate.kind == "session":
            answered = getattr(self.held_sessions, "answered", None)
            if answered is not None:
                answered(answer)
            return
        if answer.gate.source is None:
            return
        try:
            topic, partition, offset = parse_source(answer.gate.source)
        except ValueError:
            log.warning("gate: an answer names no record (%r)", answer.gate.source)
            return
        if topic != self.input_topic:
            return
        self.answers[answer.gate.source] = (answer.answer, answer.reviewer)
        self.answer_known(partition, offset)

    def answer_known(self, partition: int, offset: int) -> None:
        """Carry out the answer on the held record at ``partition``/``offset``, if it
        has one, is held here and is not being answered already."""
        given = self.answers.get(f"{self.input_topic}/{partition}/{offset}")
        if given is None or partition not in self._partitions:
            return
        entry = self.entry(partition, offset)
        if entry is None or entry.state not in ANSWERABLE_STATES:
            return
        if (partition, offset) in self._answering:
            return
        self._answering.add((partition, offset))
        asyncio.ensure_future(self._carry_out(*given, partition, offset, entry))

    async def _carry_out(self, answer: str, reviewer: str, partition: int, offset: int,
                         entry: Entry) -> None:
        try:
            ticket = Ticket(partition, offset, entry.key, entry.decision)
            if answer == "release":
                ticket.data = await self._held_copy(partition, offset, entry)
                if ticket.data is None:
                    answer = "keep"  # gone from the held topic: nothing left to release
            if partition not in self._partitions:
                return  # moved meanwhile: its next owner carries the answer out
            await self._in_lane(self.order.lane(ticket),
                                lambda: self._answer_in_lane(answer, reviewer, ticket))
            if entry.state == "blocking":
                await self._release(self.order.unblock(partition, entry.key))
        except TimeoutError as exc:
            log.warning("gate: releasing %s/%d/%d waits: %s; trying again in %.0fs",
                        self.input_topic, partition, offset, exc, RETRY_SECONDS)
            asyncio.get_running_loop().call_later(RETRY_SECONDS, self.answer_known,
                                                  partition, offset)
        except Exception:
            log.exception("gate: the answer on %s/%d/%d failed", self.input_topic, partition,
                          offset)
        finally:
            self._answering.discard((partition, offset))
            self._gauges()

    async def _answer_in_lane(self, answer: str, reviewer: str, ticket: Ticket) -> None:
        if answer == "release":
            await self._forward(ticket, released_by=reviewer)
            self.telemetry.gate_reviews.labels(answer="released").inc()
            log.info("gate: %s released %s/%d/%d", reviewer, self.input_topic,
                     ticket.partition, ticket.offset)
            return
        await self.book.keep(ticket.partition, ticket.offset,
                             self._entry_of(ticket, "confirmed", by=reviewer), confirm=True)
        self.telemetry.gate_reviews.labels(answer="confirmed").inc()

    async def _sessions_read(self) -> None:
        """Wait until the held sessions are read (once, at the start)."""
        follower = self.holds_follower
        while follower is not None and not follower.caught_up:
            await asyncio.sleep(0.1)

    def _with_review_item(self, judgment: RecordJudgment, decision: Any,
                          outgoing: list[Outgoing]) -> list[Outgoing]:
        """With review on, a held record's review item (which asks release or keep)."""
        if not self.review_on:
            return outgoing
        item = held_item(judgment, decision, review=self.review, thresholds=self.thresholds,
                         judge_model=self.judge_model,
                         blocks_key=(self.gate.gate_hold_blocks_key
                                     and judgment.raw.source.key is not None))
        if item is None:
            return outgoing
        return with_item(outgoing, item, review_topic=self.review.review_topic)

    async def _held_copy(self, partition: int, offset: int, entry: Entry) -> RawMessage | None:
        """The held record read back from the held topic, as its input record was
        (its own headers; the gate's are written anew); None when it is gone."""
        if entry.held_at is None:
            return None
        held_partition, held_offset = entry.held_at
        message: Any = await read_record_at(self.kafka, self.gate.held_topic, held_partition,
                                            held_offset)
        if message is None:
            log.error("gate: the held copy of %s/%d/%d (%s/%d/%d) is gone (retention); it "
                      "cannot be released and stays held", self.input_topic, partition, offset,
                      self.gate.held_topic, held_partition, held_offset)
            return None
        source = Source(self.input_topic, partition, offset, timestamp_ms=message.timestamp,
                        key=message.key, headers=tuple(message.headers or ()))
        return RawMessage(value=message.value, source=source)
