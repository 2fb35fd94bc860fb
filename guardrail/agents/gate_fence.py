"""The input partitions a worker in gate mode gave up: it keeps no more decisions
and starts no more forwards of their records (:mod:`.gate`)::

    fence = Fence()
    fence.add({2, 3})       # the end of a revoke phase: their next owner may read them
    fence.add()             # the judging agent stopped: every partition, for good
    2 in fence              # True
    fence.lift()            # {2, 3}, after the next assignment's table recovery

At the end of a rebalance's revoke phase the revoked partitions may be read by their
next owner at once, and it decides each of their records from the gate table as it
reads it then: a decision kept or a forward started afterwards by the worker that
gave them up could differ from its own (with a judge that answers differently, the
record lands on both topics). Faust's revoke phase finishes and acks what is in
flight before it ends, except when the worker is stopping (a rolling restart: the
new worker joins as the old one drains), when it waits for nothing.

A fenced record's passage stays unsettled: acked in this generation, a record not
forwarded could be committed. The gate settles it after the next assignment, when
its ack no longer counts, and reads a fenced partition assigned to it again from its
committed offset, as any partition it gains.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["Fence"]


class Fence:
    """The partitions given up since the last :meth:`lift` (all, once stopped)."""

    def __init__(self) -> None:
        self.partitions: set[int] = set()
        self.stopped = False

    def add(self, partitions: Iterable[int] | None = None) -> None:
        """Give up ``partitions`` (None: every partition, for good)."""
        if partitions is None:
            self.stopped = True
        else:
            self.partitions.update(partitions)

    def __contains__(self, partition: int) -> bool:
        return self.stopped or partition in self.partitions

    def lift(self) -> set[int]:
        """The partitions given up since the last lift, fenced no more (a stop stays)."""
        lifted, self.partitions = self.partitions, set()
        return lifted
