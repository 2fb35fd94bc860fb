"""Stalled or busy: whether the partitions a worker holds make progress.

A busy worker commits as it goes, however long its lag; a stalled one holds
partitions with lag and its committed offsets stay put. Fed the lag and the
committed offset of each partition now and then (no Kafka here: the worker's
wiring in :mod:`guardrail.agents.liveness` samples its consumer)::

    liveness = Liveness(stall_seconds=120)
    report = liveness.update([("model-outputs", 0, 12, 4031)], now=time.monotonic())
    report.stalled                      # PartitionStatus of each stalled partition
    report.became_stalled               # those that stalled since the last update
    report.progressed                   # stalled before, moving (or caught up) again
    liveness.update(samples, now=..., excused=True)   # judge paused: not stalled

A partition is **stalled** when its lag is above 0 and its committed offset
has not moved for ``stall_seconds``. Progress is a committed offset that
changed, or no lag at all (nothing to do is no stall). ``excused`` updates
(the worker waits out a judge outage: the lack of progress is explained)
restart the stall clock without counting as progress, so a partition
becomes stalled only ``stall_seconds`` after the excuse ends, while
``seconds_since_progress`` keeps telling how long the offset has stood.
A partition missing from an update is no longer held, and is forgotten.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["Liveness", "LivenessReport", "PartitionStatus", "Sample"]

#: ``(topic, partition, lag, committed offset)``; the offset is None before
#: the group's first commit on the partition.
Sample = tuple[str, int, int, "int | None"]


@dataclass(frozen=True)
class PartitionStatus:
    """One held partition at the last update."""

    topic: str
    partition: int
    lag: int
    committed: int | None
    #: Seconds since its committed offset last moved or its lag was last 0
    #: (since the partition was first seen, at most).
    seconds_since_progress: float
    stalled: bool

    def as_dict(self) -> dict[str, object]:
        """JSON-ready (``/health``)."""
        return {"topic": self.topic, "partition": self.partition, "lag": self.lag,
                "committed": self.committed,
                "seconds_since_progress": round(self.seconds_since_progress, 1)}


@dataclass(frozen=True)
class LivenessReport:
    """What one :meth:`Liveness.update` saw, and what changed since the last."""

    partitions: tuple[PartitionStatus, ...]
    became_stalled: tuple[PartitionStatus, ...] = ()
    #: Stalled at the last update and moving (or caught up) now.
    progressed: tuple[PartitionStatus, ...] = ()
    #: Stalled at the last update and excused now (the judge is paused).
    excused: tuple[PartitionStatus, ...] = ()
    #: ``(topic, partition)`` of the partitions no longer held, and of those of
    #: them that were stalled.
    forgotten: tuple[tuple[str, int], ...] = ()
    forgotten_stalled: tuple[tuple[str, int], ...] = ()

    @property
    def stalled(self) -> tuple[PartitionStatus, ...]:
        return tuple(p for p in self.partitions if p.stalled)


@dataclass
class _Track:
    committed: int | None
    last_progress: float
    #: When the stall clock started: the last progress or the last excused update.
    clock: float
    stalled: bool = False


@dataclass
class Liveness:
    """Tracks each held partition's committed offset over time (see the module doc)."""

    stall_seconds: float
    _tracks: dict[tuple[str, int], _Track] = field(default_factory=dict, repr=False)

    def observe(self, topic: str, partition: int, lag: int, committed: int | None,
                now: float, *, excused: bool = False) -> PartitionStatus:
        """Record one partition's lag and committed offset at ``now`` (seconds of a
        monotonic clock); its status, stalled or not."""
        return self._observe(topic, partition, lag, committed, now, excused)[0]

    def _observe(self, topic: str, partition: int, lag: int, committed: int | None,
                 now: float, excused: bool) -> tuple[PartitionStatus, bool]:
        """The status, and whether the partition progressed at this update."""
        key = (topic, partition)
        track = self._tracks.get(key)
        moved = track is not None and (committed != track.committed or lag <= 0)
        if track is None:
            track = self._tracks[key] = _Track(committed, last_progress=now, clock=now)
        elif moved:
            track.committed, track.last_progress, track.clock = committed, now, now
        if excused:
            track.clock = now
        track.stalled = lag > 0 and now - track.clock >= self.stall_seconds
        return PartitionStatus(topic, partition, lag, committed,
                               max(0.0, now - track.last_progress), track.stalled), moved

    def update(self, samples: Iterable[Sample], now: float, *,
               excused: bool = False) -> LivenessReport:
        """Observe every held partition; those not in ``samples`` are forgotten."""
        before = {key for key, track in self._tracks.items() if track.stalled}
        seen = [self._observe(topic, partition, lag, committed, now, excused)
                for topic, partition, lag, committed in samples]
        held = {(s.topic, s.partition) for s, _ in seen}
        gone = tuple(sorted(key for key in self._tracks if key not in held))
        for key in gone:
            del self._tracks[key]
        cleared = [(s, moved) for s, moved in seen
                   if (s.topic, s.partition) in before and not s.stalled]
        return LivenessReport(
            partitions=tuple(s for s, _ in seen),
            became_stalled=tuple(s for s, _ in seen
                                 if s.stalled and (s.topic, s.partition) not in before),
            progressed=tuple(s for s, moved in cleared if moved),
            excused=tuple(s for s, moved in cleared if not moved),
            forgotten=gone, forgotten_stalled=tuple(k for k in gone if k in before))
