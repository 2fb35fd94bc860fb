"""Which input positions a window cell has counted: exact under redelivery
and under a record read again late.

A window cell counts each judged input case once. A case can reach the cell
twice (the judging side judged its record again after a crash or rebalance,
or the counter read its judgments record again), and a case can also reach
it *late*: Faust drops a record on its way to an agent now and then, and the
consumer reads it again after the records behind it were done
(:mod:`guardrail.agents.consumer`). A highest-position mark cannot tell the
two apart, so cells keep, per stream (origin and input partition):

- a **floor**: every case of an input offset below it is counted (or is not
  of this cell), and
- the **positions** at or above the floor that were counted.

A case is a duplicate when its offset is below the floor or its position is
in the set. The floor rises with the events: each one carries the offset of
its input partition below which every record was judged *and its events
published* when it was built (:attr:`~.events.JudgmentEvent.floor`), so
those events are earlier in the cell's judgments partition. That holds only
when the counter reads that partition in order, so the counter raises the
floor only for a judgments record read in order (``in_order``); a record it
reads again late adds its positions and leaves the floor. The set keeps the
positions counted while a record is in flight, a few batches' worth::

    ledger = Ledger.from_cell(None, None)
    ledger.admit((143, 0), floor=142, in_order=True)   # True: counted
    ledger.admit((142, 0), floor=142, in_order=False)  # True: late, not a duplicate
    ledger.admit((143, 0), floor=140, in_order=True)   # False: counted already
    ledger.admit((150, 0), floor=144, in_order=True)   # True; floor 144, set {(150, 0)}

Events from older releases carry no floor: their own offset serves (all
earlier records of the partition were done), which is the old mark's rule.
Cells written by older releases have only the mark (highest position
counted), which converts exactly: the floor at its offset, and its cases up
to its index counted.
"""

from __future__ import annotations

import logging
from typing import Any

from .events import mark_position

__all__ = ["Ledger", "MAX_POSITIONS"]

log = logging.getLogger("guardrail.windows")

#: Positions a stream's ledger keeps above its floor at most. Only a floor that
#: never rises can reach it (a bug): the lowest positions are then folded
#: into the floor, as the old highest mark did, rather than growing the cell.
MAX_POSITIONS = 20_000


class Ledger:
    """One stream's counted positions in one window cell (see the module doc).

    A position ``(offset, 0)`` is kept as the offset alone, and the rarer
    ``(offset, index)`` of a many-case record's later cases as a pair, so
    reading and writing a cell's ledger mostly stays in C."""

    __slots__ = ("floor", "offsets", "cases", "changed", "highest")

    def __init__(self, floor: int, offsets: set[int],
                 cases: set[tuple[int, int]] | None = None) -> None:
        self.floor = floor
        self.offsets = offsets
        self.cases = cases or set()
        #: Whether :meth:`admit` changed it since it was read (the cell is written then).
        self.changed = False
        #: The highest position counted since it was read (older releases' mark).
        self.highest: tuple[int, int] | None = None

    @classmethod
    def from_cell(cls, stored: Any, legacy_mark: Any) -> Ledger:
        """From a cell's stored ledger, or else from an older release's mark."""
        if stored is not None:
            floor, offsets, *cases = stored
            return cls(int(floor), set(offsets), {(o, i) for o, i in (cases[0] if cases else ())})
        if legacy_mark is None:
            return cls(-1, set())
        offset, index = mark_position(legacy_mark)
        return cls(offset, {offset}, {(offset, i) for i in range(1, index + 1)})

    @property
    def positions(self) -> set[tuple[int, int]]:
        """Every position held above the floor, as ``(offset, index)``."""
        return {(o, 0) for o in self.offsets} | self.cases

    def stored(self) -> list[Any]:
        """The ledger as a cell stores it: ``[floor, [offset, ...]]``, and
        ``[[offset, index], ...]`` after them when a later case is held."""
        held: list[Any] = [self.floor, sorted(self.offsets)]
        if self.cases:
            held.append([list(case) for case in sorted(self.cases)])
        return held

    def admit(self, position: tuple[int, int], *, floor: int | None,
              in_order: bool) -> bool:
        """Count ``position``? False for a duplicate. ``floor``: the event's
        (None: its own offset); raised only for a record read ``in_order``."""
        offset, index = position
        held = self.offsets if index == 0 else self.cases
        key: Any = offset if index == 0 else position
        duplicate = offset < self.floor or key in held
        if not duplicate:
            held.add(key)
            self.changed = True
            if self.highest is None or position > self.highest:
                self.highest = position
        if in_order:
            self._raise(offset if floor is None else min(floor, offset))
        if len(self.offsets) + len(self.cases) > MAX_POSITIONS:
            self._fold()
        return not duplicate

    def _raise(self, floor: int) -> None:
        if floor > self.floor:
            self.floor, self.changed = floor, True
            self.offsets = {o for o in self.offsets if o >= floor}
            if self.cases:
                self.cases = {c for c in self.cases if c[0] >= floor}

    def _fold(self) -> None:
        kept = sorted(self.positions)[-MAX_POSITIONS // 2:]
        log.warning("a window cell's de-duplication ledger passed %d positions; its "
                    "floor moves up to offset %d (a record read later below it would "
                    "be taken for a duplicate)", MAX_POSITIONS, kept[0][0])
        self._raise(kept[0][0])
