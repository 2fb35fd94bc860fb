"""The review queue: which item a reviewer gets next, and who holds what.

Pure logic over the two folds (no Kafka here): the review topic's items and
the labels topic's labels. An item is *open* while some metric of it has no
label, or (gate mode) the gate's hold on it has no answer. A reviewer gets
the first open item, oldest first, that nobody else holds and that they did
not skip, and holds it (a *lease*) until they label it, skip it, sign out,
or ``lease_seconds`` pass without them loading it again; on reload they get
the same item back, its lease renewed::

    queue = ReviewQueue(lease_seconds=600)
    follow(review_topic, queue.items); follow(labels_topic, queue.labels)
    offer = queue.next_for("ana")       # Offer(item, metrics, lease) or None
    queue.remaining("ana")              # Remaining(left=41, held_by_others=1)
    offer = queue.begin_write("ana", case_id)        # Conflict: someone else's now
    ...send the labels, wait for the broker's ack...
    queue.finish_write("ana", case_id, labels, skipped=False)   # or abort_write

Labels written here are applied at once (no wait for the topic round trip),
so a labelled item is never offered again. Memory stays bounded by what is
open: an item is dropped once every metric of it is labelled, and of the
labels only their keys are kept (not the texts they carry). Leases live in this
process's memory: two workers do not see each other's leases, so reviewers
should use one worker's page (the labels themselves are shared through the
topic: a label written at another worker closes the item here once read).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .folds import ReviewItemsFold
from .records import (GATE_LABEL, GateAnswer, LabelRecord, ReviewItem, ReviewMetric, SchemaError,
                      decode_label)

__all__ = ["ReviewQueue", "Offer", "Lease", "Remaining", "Conflict", "LabelKeys"]


class Conflict(Exception):
    """The item cannot be labelled now; the message is for the reviewer."""


@dataclass
class Lease:
    """An item held for one reviewer until ``expires`` (the queue's clock)."""

    case_id: str
    reviewer: str
    expires: float
    lease_id: str


@dataclass(frozen=True)
class Offer:
    """An item as shown to its holder: only its metrics still without a label, and
    (``gate_open``) whether the gate's hold on it still waits for an answer."""

    item: ReviewItem
    metrics: tuple[ReviewMetric, ...]
    lease: Lease
    gate_open: bool = False


@dataclass(frozen=True)
class Remaining:
    """What is left for one reviewer: ``left`` items they may still get (the
    one they hold included); ``held_by_others`` more are held by others now."""

    left: int
    held_by_others: int


class LabelKeys:
    """The labels topic as the queue needs it: which ``<case_id>|<metric>`` keys
    hold a label or (``<case_id>|@gate``) a gate answer (a
    :class:`~guardrail.kafka.changelog.RecordSink`; records of
    another kind or schema version are skipped and counted, as the folds do)."""

    def __init__(self, on_change: Callable[[str], None]) -> None:
        self.keys: set[str] = set()
        self.skipped = self.applied = 0
        self.on_change = on_change

    def apply(self, key: bytes | None, value: bytes | None, *, where: str = "") -> None:
        if value is None:  # a tombstone: the label was withdrawn, the metric is open again
            if key is not None:
                name = key.decode("utf-8", "replace")
                self.keys.discard(name)
                self.on_change(name)
            return
        try:
            name = decode_label(value).key().decode()
        except SchemaError:
            self.skipped += 1
            return
        self.keys.add(name)
        self.applied += 1
        self.on_change(name)

    def labelled(self, case_id: str, metric: str) -> bool:
        return f"{case_id}|{metric}" in self.keys


class ReviewQueue:
    """Items to label, leases, and each reviewer's skips (see the module doc)."""

    def __init__(self, *, lease_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.lease_seconds = lease_seconds
        self._clock = clock
        self.items = ReviewItemsFold(on_change=self._refresh)
        self.labels = LabelKeys(on_change=self._label_changed)
        self._open: dict[str, None] = {}  # case ids with an unlabelled metric, oldest first
        self._leases: dict[str, Lease] = {}  # case id -> its lease
        self._held: dict[str, str] = {}  # reviewer -> the case id they hold
        self._skipped: dict[str, set[str]] = {}  # reviewer -> case ids they skipped
        self._writing: set[str] = set()  # case ids whose labels are on their way

    # -- folding --------------------------------------------------------------

    def open_metrics(self, case_id: str) -> tuple[ReviewMetric, ...]:
        """The item's metrics that have no label yet (none for an unknown item)."""
        item = self.items.by_case.get(case_id)
        if item is None:
            return ()
        return tuple(m for m in item.metrics if not self.labels.labelled(case_id, m.name))

    def gate_open(self, case_id: str) -> bool:
        """Does the gate's hold on the item still wait for a reviewer's answer?"""
        item = self.items.by_case.get(case_id)
        return (item is not None and item.gate is not None
                and not self.labels.labelled(case_id, GATE_LABEL))

    def _is_open(self, case_id: str) -> bool:
        return bool(self.open_metrics(case_id)) or self.gate_open(case_id)

    def _label_changed(self, key: str) -> None:
        # Keys are "<case_id>|<metric>"; a case id may hold "|", a metric name not.
        self._refresh(key.rpartition("|")[0])

    def _refresh(self, case_id: str) -> None:
        if self._is_open(case_id):
            self._open.setdefault(case_id, None)
            return
        self._open.pop(case_id, None)
        self.items.by_case.pop(case_id, None)  # done: only open items are kept
        self._drop_lease(case_id)
        for skipped in self._skipped.values():  # keeps the skip sets small
            skipped.discard(case_id)

    # -- leases ---------------------------------------------------------------

    def _live(self, case_id: str) -> Lease | None:
        lease = self._leases.get(case_id)
        if lease is not None and lease.expires <= self._clock():
            self._drop_lease(case_id)
            return None
        return lease

    def _drop_lease(self, case_id: str) -> None:
        lease = self._leases.pop(case_id, None)
        if lease is not None and self._held.get(lease.reviewer) == case_id:
            del self._held[lease.reviewer]

    def _lease(self, reviewer: str, case_id: str) -> Lease:
        held = self._held.get(reviewer)
        if held is not None and held != case_id:
            self._drop_lease(held)  # one item at a time: the old one goes back
        lease = self._live(case_id)
        if lease is None or lease.reviewer != reviewer:
            lease = Lease(case_id, reviewer, 0.0, secrets.token_hex(8))
        lease.expires = self._clock() + self.lease_seconds  # renewed on every showing
        self._leases[case_id] = lease
        self._held[reviewer] = case_id
        return lease

    def holder(self, case_id: str) -> str | None:
        """Who holds the item now (None: nobody, or the lease expired)."""
        lease = self._live(case_id)
        return None if lease is None else lease.reviewer

    def release(self, reviewer: str) -> None:
        """Give back what ``reviewer`` holds (sign-out): others may take it at once."""
        held = self._held.get(reviewer)
        if held is not None and held not in self._writing:
            self._drop_lease(held)

    # -- what a reviewer sees -------------------------------------------------

    def _offerable(self, reviewer: str, case_id: str) -> bool:
        if case_id in self._writing or case_id in self._skipped.get(reviewer, ()):
            return False
        lease = self._live(case_id)
        return lease is None or lease.reviewer == reviewer

    def next_for(self, reviewer: str) -> Offer | None:
        """The item ``reviewer`` holds, else the oldest open one nobody holds and
        they did not skip, now leased to them; None when there is none."""
        held = self._held.get(reviewer)
        candidates = ([held] if held is not None else []) + list(self._open)
        for case_id in candidates:
            if not self._is_open(case_id):
                self._refresh(case_id)  # deleted by a tombstone, or labelled meanwhile
                continue
            if self._offerable(reviewer, case_id):
                return self._offer(reviewer, case_id)
        return None

    def _offer(self, reviewer: str, case_id: str) -> Offer:
        return Offer(self.items.by_case[case_id], self.open_metrics(case_id),
                     self._lease(reviewer, case_id), gate_open=self.gate_open(case_id))

    def remaining(self, reviewer: str) -> Remaining:
        """How many items are left for ``reviewer``, and how many others hold."""
        skipped = self._skipped.get(reviewer, set())
        held = {c for c in list(self._leases) if c in self._open and c not in skipped
                and (lease := self._live(c)) is not None and lease.reviewer != reviewer}
        left = len(self._open) - sum(c in self._open for c in skipped) - len(held)
        return Remaining(left=max(0, left), held_by_others=len(held))

    @property
    def open_count(self) -> int:
        return len(self._open)

    # -- labelling ------------------------------------------------------------

    def begin_write(self, reviewer: str, case_id: str) -> Offer:
        """Claim the item for ``reviewer``'s labels while they are sent; :class:`Conflict`
        when someone else holds it, it is labelled already or being saved."""
        if case_id not in self.items.by_case:
            raise Conflict("this item is labelled already or not in the review queue; "
                           "nothing was saved")
        if case_id in self._writing:
            raise Conflict("labels for this item are being saved already; nothing more was "
                           "saved")
        lease = self._live(case_id)
        if lease is not None and lease.reviewer != reviewer:
            raise Conflict("your hold on this item expired and another reviewer has it now; "
                           "nothing was saved")
        if not self._is_open(case_id):  # kept items are open; this guards the invariant
            raise Conflict("this item is labelled already; nothing was saved")
        self._writing.add(case_id)
        return self._offer(reviewer, case_id)

    def finish_write(self, reviewer: str, case_id: str,
                     labels: Sequence[LabelRecord | GateAnswer], *, skipped: bool) -> None:
        """The broker acknowledged ``labels`` (and gate answer): apply them at once;
        ``skipped``: the reviewer left something unanswered and is not offered the
        item again."""
        self._writing.discard(case_id)
        for label in labels:
            self.labels.apply(label.key(), label.encode(), where="labelled here")
        if skipped:
            self.skip(reviewer, case_id)
        elif self._held.get(reviewer) == case_id:
            self._drop_lease(case_id)

    def abort_write(self, case_id: str) -> None:
        """The labels were not acknowledged: the item stays open, still held."""
        self._writing.discard(case_id)

    def skip(self, reviewer: str, case_id: str) -> None:
        """``reviewer`` is not offered the item again (others are); it is released."""
        if case_id in self._open:
            self._skipped.setdefault(reviewer, set()).add(case_id)
        if self._held.get(reviewer) == case_id:
            self._drop_lease(case_id)
