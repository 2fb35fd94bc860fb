"""How :class:`~.consumer.ProcessedOnlyConsumer` finds a record lost on its
way to an agent, and reads it again.

Faust's drain and stream can drop a delivered record without an ack as the
flow stops or resumes (seen: a window counter stalled on one judgments record
after a restart). The agents ack in offset order, so a commit that waits on a
delivered record while records after it are done waits on a lost one; with
nothing done after it, it is lost when no stream holds it and no channel
queues it (the last record of a burst). A record a stream skipped and acked
unprocessed is read again at once.
"""

from __future__ import annotations

import logging
import time
from typing import Any

__all__ = ["LostRecordChecks", "LOST_AFTER_SECONDS"]

log = logging.getLogger("guardrail.transport")

#: Seconds a partition's commit may wait on a delivered record while records
#: after it are done, before that record counts as lost on its way to the agent.
LOST_AFTER_SECONDS = 5.0


class LostRecordChecks:
    """The checks, mixed into the consumer: they read its chain (``_waiting``,
    ``_unacked_messages``, the app's channels) and call its ``_delivered``
    and ``_seek_back``."""

    _waiting: dict[Any, tuple[int, float]]
    _gate_missing: dict[Any, tuple[int, float]]  # tp -> (offset the gate misses, since)
    _unacked_messages: Any
    app: Any

    def _read_again(self, tp: Any, offset: int) -> None:
        """Deliver a record Faust's stream skipped once more: its commit chain
        stops there until it is processed (records after it that were
        processed are passed over, see :meth:`_done_here`). Outside an
        assignment's reading (a revoke phase) the next assignment reads it
        from the committed offset."""
        if self._delivered(tp, offset):
            log.info("%s[%d]: offset %d was skipped unprocessed; reading again from it",
                     tp.topic, tp.partition, offset)
            self._seek_back(tp, offset)

    def read_again_if_lost(self, tp: Any, offset: int) -> None:
        """A later record of ``tp`` reached the gate before ``offset``
        (:mod:`.gate_sequence`). Delivered and queued in no channel, it was lost on
        its way (a stream that took it, as its records come in offset order, would
        have handed it over first): read again from it now; the commit's check
        would never (the records after it are not acked, and the stream that lost
        it still counts it as taken). Queued (a record read before a rebalance came
        first), it is waited for, :data:`LOST_AFTER_SECONDS` at most."""
        if not self._delivered(tp, offset):
            return  # still to come, or sought back to it already
        now = time.monotonic()
        asked, since = self._gate_missing.setdefault(tp, (offset, now))
        if asked != offset:  # another one missing now
            self._gate_missing[tp], since = (offset, now), now
        if self._queued(tp, offset) and now - since < LOST_AFTER_SECONDS:
            return
        del self._gate_missing[tp]
        log.warning("%s[%d]: offset %d was delivered and never reached the gate, a later "
                    "one did; reading again from it", tp.topic, tp.partition, offset)
        self._seek_back(tp, offset)

    def _check_lost(self, tp: Any, base: int) -> None:
        """The commit waits on ``base`` while records after it are done. The
        agents ack in offset order, so that record was lost on its way to
        the agent: Faust's drain and stream can drop a record delivered as
        the flow stops or resumes, without an ack (seen: a window counter
        stalled on one judgments record after a restart). After
        :data:`LOST_AFTER_SECONDS` it is read again."""
        if not self._delivered(tp, base):
            self._waiting.pop(tp, None)
            return
        now = time.monotonic()
        waited_on, since = self._waiting.setdefault(tp, (base, now))
        if waited_on != base:
            self._waiting[tp] = (base, now)
        elif now - since >= LOST_AFTER_SECONDS:
            del self._waiting[tp]
            log.warning("%s[%d]: offset %d was delivered %.0f s ago and never acked while "
                        "later ones were; reading again from it", tp.topic, tp.partition,
                        base, now - since)
            self._seek_back(tp, base)

    def _check_lost_last(self, tp: Any, base: int) -> None:
        """Nothing after ``base`` is done, so no later ack proves it lost (the last
        record of a burst, dropped on its way, would wait for more traffic): it
        is lost when no stream holds it and no channel queues it."""
        if self._in_hand(tp, base):
            self._waiting.pop(tp, None)
        else:
            self._check_lost(tp, base)

    def _in_hand(self, tp: Any, offset: int) -> bool:
        """A stream took the record and has not acked it, or a channel of its
        partition queues it or is full (the drain may be waiting to put it)."""
        taken = [m for m in list(self._unacked_messages) if not m.acked]
        return self._queued(tp, offset) or _among(taken, tp, offset)

    def _queued(self, tp: Any, offset: int) -> bool:
        """A channel of the record's partition queues it, or is full."""
        queues = [q for c in self.app.topics._tp_index.get(tp, ())
                  if (q := getattr(c, "_queue", None)) is not None]
        queued = [getattr(event, "message", None) for q in queues for event in list(q._queue)]
        return any(q.full() for q in queues) or _among(queued, tp, offset)


def _among(messages: list[Any], tp: Any, offset: int) -> bool:
    """Whether the record at ``offset`` of ``tp`` is one of ``messages``."""
    return any(getattr(m, "offset", None) == offset and getattr(m, "tp", None) == tp
               for m in messages)
