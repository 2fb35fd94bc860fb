"""The gate lets a partition's records in only in the order they were read, none
passed over (:mod:`.gate`)::

    sequence = ReadSequence(app, input_topic)
    sequence.admissible(2, 41)      # False: 40 never reached the agent (read again)
    sequence.admitted(2, 41)        # let in: 42 may follow
    sequence.restart()              # a new assignment: each partition from its commit

The release order (:class:`~guardrail.gate.order.ReleaseOrder`) keeps a key's records
in the order they enter it; it cannot wait for a record that never enters. Faust can
lose a record between the consumer and the agent without an ack (seen after an
assignment, on both brokers: delivered, then in no stream), and a later record of
its key would then be forwarded first. So a record is let in only when every offset
of its partition before it, from where this assignment's reading started, was let
in, was processed already (:meth:`~.consumer.ProcessedOnlyConsumer.done_below`), or
does not exist. A record after a missing one is passed over (not acked: the commit
cannot pass it) and the consumer reads again from the missing one, at once when no
stream holds it (:meth:`~.lost_records.LostRecordChecks.read_again_if_lost`); the
records after it then come again, in order.
"""

from __future__ import annotations

from typing import Any

from faust.types import TP

__all__ = ["ReadSequence"]


class ReadSequence:
    """The next offset each partition's records must enter at (see the module text)."""

    def __init__(self, app: Any, topic: str) -> None:
        self.app, self.topic = app, topic
        self._next: dict[int, int] = {}

    def admissible(self, partition: int, offset: int) -> bool:
        """Whether the record at ``offset`` may enter now; if one before it never came,
        the consumer is asked to read again from that one."""
        expected = self._next.get(partition)
        if expected is not None and offset <= expected:
            return True  # the next one, or one read again after it entered
        tp = TP(self.topic, partition)
        done_below = getattr(self.app.consumer, "done_below", None)
        first = done_below(tp, expected) if done_below is not None else None
        if first is None or offset == first:
            return True  # nothing known (reading not started), or the next to come
        if offset > first:  # the record at ``first`` is missing: read again from it
            self.app.consumer.read_again_if_lost(tp, first)
        return False  # else processed already, or below the commit: read before a rebalance

    def admitted(self, partition: int, offset: int) -> None:
        self._next[partition] = max(self._next.get(partition, offset + 1), offset + 1)

    def restart(self) -> None:
        """After an assignment: every partition is read again from its commit."""
        self._next.clear()
