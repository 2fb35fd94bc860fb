"""The order the gate forwards records in, whatever order the judge decides them in.

Records enter in offset order per partition, as they are read; each leaves once it
is decided and everything it must wait for has left (``gate_order``):

- ``key``: the earlier records of its key in its partition (a record without a key
  waits for none: Kafka keeps no order for them either);
- ``partition``: every earlier record of its partition;
- ``none``: nothing.

With ``hold_blocks_key``, a record forwarded to the held topic blocks its key (a
record without a key blocks nothing): the
key's later records, once their turn comes, are *parked* (kept, not forwarded)
until :meth:`ReleaseOrder.unblock` (a reviewer released or confirmed the held one);
then they leave in order, and a held one among them blocks the key again. Parked
records block no other key::

    order = ReleaseOrder("key", hold_blocks_key=False)
    order.enter(Ticket(0, 41, b"user-7"))
    order.enter(Ticket(0, 42, b"user-7"))
    order.decide(0, 42, safe)       # []: 41 of the same key is not decided yet
    order.decide(0, 41, unsafe)     # [Release("forward", 41), Release("forward", 42)]

Pure bookkeeping: no Kafka, no clock (the wiring is :mod:`guardrail.agents.gate`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from .decision import Decision

__all__ = ["Ticket", "Release", "ReleaseOrder", "Order"]

Order = Literal["key", "partition", "none"]


@dataclass(eq=False)
class Ticket:
    """One input record on its way through the gate; ``data`` is the caller's."""

    partition: int
    offset: int
    key: bytes | None
    decision: Decision | None = None
    data: Any = field(default=None, repr=False)

    @property
    def held(self) -> bool:
        """Forwarded to the held topic (a DLQ'd record is forwarded nowhere)."""
        d = self.decision
        return d is not None and not d.approved and not d.dlq_only


class Release(NamedTuple):
    """What to do with a ticket now: ``forward`` it, ``park`` it (its key is
    blocked), or ``none`` (its record went to the DLQ: nothing to forward)."""

    action: Literal["forward", "park", "none"]
    ticket: Ticket


class ReleaseOrder:
    """The tickets entered and not yet released, by lane (see the module text)."""

    def __init__(self, order: Order = "key", *, hold_blocks_key: bool = False) -> None:
        self.order, self.hold_blocks_key = order, hold_blocks_key
        self._lanes: dict[Hashable, deque[Ticket]] = {}
        self._tickets: dict[tuple[int, int], Ticket] = {}
        #: Keys blocked by a held record, with the tickets parked behind it.
        self._parked: dict[tuple[int, bytes | None], deque[Ticket]] = {}

    @property
    def waiting(self) -> int:
        """Tickets entered and not released (decided or not)."""
        return len(self._tickets)

    @property
    def parked(self) -> int:
        return sum(len(q) for q in self._parked.values())

    def holds(self, ticket: Ticket) -> bool:
        """``ticket`` entered and not released or dropped (its partition revoked)."""
        return self._tickets.get((ticket.partition, ticket.offset)) is ticket

    def blocked(self, partition: int, key: bytes | None) -> bool:
        return (partition, key) in self._parked

    def enter(self, ticket: Ticket) -> None:
        """A record read; tickets of one partition enter in offset order."""
        self._tickets[ticket.partition, ticket.offset] = ticket
        self._lanes.setdefault(self.lane(ticket), deque()).append(ticket)

    def decide(self, partition: int, offset: int, decision: Decision) -> list[Release]:
        """``decision`` for the ticket at ``offset``; the tickets released by it."""
        ticket = self._tickets[partition, offset]
        ticket.decision = decision
        lane = self._lanes[self.lane(ticket)]
        released = []
        while lane and lane[0].decision is not None:
            released.append(lane.popleft())
        if not lane:
            del self._lanes[self.lane(ticket)]
        return [self._release(t) for t in released]

    def lane(self, ticket: Ticket) -> Hashable:
        """The lane ``ticket`` waits in (its forwards are sent one after the other)."""
        if self.order == "partition":
            return ticket.partition
        if self.order == "key" and ticket.key is not None:
            return ticket.partition, ticket.key
        return ticket.partition, ticket.offset  # a lane of its own

    def _release(self, ticket: Ticket) -> Release:
        del self._tickets[ticket.partition, ticket.offset]
        parked = self._parked.get((ticket.partition, ticket.key))
        if parked is not None:
            parked.append(ticket)
            return Release("park", ticket)
        if ticket.decision is not None and ticket.decision.dlq_only:
            return Release("none", ticket)
        if self.hold_blocks_key and ticket.held and ticket.key is not None:
            self._parked[ticket.partition, ticket.key] = deque()
        return Release("forward", ticket)

    def unblock(self, partition: int, key: bytes | None) -> list[Release]:
        """The held record blocking ``key`` was released or confirmed: its parked
        tickets leave in order, up to one that is held (which blocks it again)."""
        parked = self._parked.pop((partition, key), None)
        releases: list[Release] = []
        while parked:
            ticket = parked.popleft()
            if ticket.decision is not None and ticket.decision.dlq_only:
                releases.append(Release("none", ticket))
                continue
            releases.append(Release("forward", ticket))
            if self.hold_blocks_key and ticket.held:
                self._parked[partition, key] = parked
                break
        return releases

    def restore(self, blocked: Iterable[tuple[int, bytes | None]],
                parked: Iterable[Ticket]) -> None:
        """After a restart or a rebalance: the keys a held record blocks, and the
        tickets parked behind them (in offset order), as the gate's state kept them."""
        for partition, key in blocked:
            self._parked.setdefault((partition, key), deque())
        for ticket in sorted(parked, key=lambda t: t.offset):
            self._parked.setdefault((ticket.partition, ticket.key), deque()).append(ticket)

    def drop_partition(self, partition: int) -> list[Ticket]:
        """A partition revoked: forget its tickets (they are read again by its next
        owner) and its blocked keys (its next owner restores them)."""
        dropped = [t for (p, _), t in self._tickets.items() if p == partition]
        for ticket in dropped:
            del self._tickets[ticket.partition, ticket.offset]
        for lane in [lane for lane, q in self._lanes.items() if q and q[0].partition == partition]:
            del self._lanes[lane]
        for blocked in [k for k in self._parked if k[0] == partition]:
            del self._parked[blocked]
        return dropped
