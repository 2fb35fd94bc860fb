"""The review and labels topics folded by key, latest wins.

Real Kafka compacts the labels topic; the embedded broker keeps every
version, so readers fold: the newest record of a key is its value, a
tombstone deletes it. Both folds are :class:`guardrail.kafka.changelog.RecordSink`\\ s,
fed by a :class:`~guardrail.kafka.changelog.TopicFollower` (in the worker) or
:func:`~guardrail.kafka.changelog.read_topic` (once, in commands)::

    labels = LabelsFold()
    await read_topic(settings.kafka, settings.review.labels_topic, labels, fetch_wait_ms=100)
    labels.records()          # the current LabelRecord of every (case_id, metric)

    queue = ReviewItemsFold()
    follower = TopicFollower(settings.kafka, settings.review.review_topic, queue,
                             fetch_wait_ms=100)

Records of another kind or schema version are skipped and counted
(``skipped``), with the first reason kept, never an error: a worker of a
newer release may share the topics.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .records import GATE_LABEL, GateAnswer, LabelRecord, ReviewItem, SchemaError, decode_label

__all__ = ["LabelsFold", "ReviewItemsFold"]

log = logging.getLogger("guardrail.review")


class _Fold:
    """Latest value per key; ``on_change(key)`` after each applied record."""

    def __init__(self, on_change: Callable[[str], None] | None = None) -> None:
        self.skipped = 0
        self.last_skip: str | None = None
        self.applied = 0
        self.on_change = on_change

    def _skip(self, where: str, reason: str) -> None:
        if self.skipped == 0:
            log.warning("skipping records of another kind or version (%s: %s)", where, reason)
        self.skipped += 1
        self.last_skip = f"{where}: {reason}"


class LabelsFold(_Fold):
    """The labels topic: one :class:`LabelRecord` per ``(case_id, metric)``, and the
    gate answers (gate mode) by case id, apart (``on_change`` is for labels)."""

    def __init__(self, on_change: Callable[[str], None] | None = None) -> None:
        super().__init__(on_change)
        self.by_key: dict[str, LabelRecord] = {}
        self.gate_answers: dict[str, GateAnswer] = {}

    def apply(self, key: bytes | None, value: bytes | None, *, where: str = "") -> None:
        if value is None:  # a tombstone: the label was withdrawn
            name = key.decode("utf-8", "replace") if key is not None else ""
            case_id, _, metric = name.rpartition("|")
            if metric == GATE_LABEL:
                self.gate_answers.pop(case_id, None)
            elif self.by_key.pop(name, None):
                self._changed(name)
            return
        try:
            label = decode_label(value)
        except SchemaError as exc:
            self._skip(where, str(exc))
            return
        if isinstance(label, GateAnswer):
            self.gate_answers[label.case_id] = label
            self.applied += 1
            return
        name = label.key().decode()
        self.by_key[name] = label
        self.applied += 1
        self._changed(name)

    def _changed(self, key: str) -> None:
        if self.on_change is not None:
            self.on_change(key)

    def records(self) -> list[LabelRecord]:
        """The current labels, in the order their keys were first seen."""
        return list(self.by_key.values())

    def labelled(self, case_id: str, metric: str) -> LabelRecord | None:
        return self.by_key.get(f"{case_id}|{metric}")


class ReviewItemsFold(_Fold):
    """The review topic: one :class:`ReviewItem` per ``case_id`` (a redelivered
    or replayed result publishes the same item again; it folds into one)."""

    def __init__(self, on_change: Callable[[str], None] | None = None) -> None:
        super().__init__(on_change)
        self.by_case: dict[str, ReviewItem] = {}

    def apply(self, key: bytes | None, value: bytes | None, *, where: str = "") -> None:
        if value is None:
            if key is not None:
                self.by_case.pop(key.decode("utf-8", "replace"), None)
            return
        try:
            item = ReviewItem.decode(value)
        except SchemaError as exc:
            self._skip(where, str(exc))
            return
        self.by_case[item.case_id] = item
        self.applied += 1
        if self.on_change is not None:
            self.on_change(item.case_id)

    def items(self) -> list[ReviewItem]:
        """Every item, in the order first seen (the queue's order)."""
        return list(self.by_case.values())
