"""The labels topic read once, for commands: ``labels export``, ``calibrate
--labels-topic`` and ``rates``::

    fold = await read_labels_topic(settings.kafka, settings.review)  # RatesUnavailable if not
    fold = await read_labels_topic(settings.kafka, settings.review, missing_ok=True)  # None
    lines = label_lines(fold.records())     # what ``labels export`` writes
    cases, problems = read_label_rows(label_rows(fold.records(), topic))  # calibrate

A label becomes the JSON line :meth:`LabelRecord.calibrate_row` gives,
whether it is written to a file or read straight from the topic, and both go
through :func:`guardrail.calibration.labels.read_label_rows`: one reader, one result.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import orjson

from ..kafka.changelog import read_topic
from ..kafka.settings import KafkaSettings
from .folds import LabelsFold
from .records import LabelRecord
from .settings import ReviewSettings

__all__ = ["read_labels_topic", "label_lines", "label_rows"]


async def read_labels_topic(kafka: KafkaSettings, review: ReviewSettings, *,
                            topic: str | None = None, fetch_wait_ms: int = 100,
                            timeout: float = 60.0, missing_ok: bool = False
                            ) -> LabelsFold | None:
    """Every label of the labels topic (the latest per key), read once up to the
    end seen at the start. A missing topic is None with ``missing_ok``, else,
    like an unreachable broker or a read slower than ``timeout``,
    :class:`~guardrail.kafka.changelog.RatesUnavailable`."""
    fold = LabelsFold()
    read = await read_topic(kafka, topic or review.labels_topic, fold, what="labels topic",
                            fetch_wait_ms=fetch_wait_ms, timeout=timeout, missing_ok=missing_ok,
                            missing="no review queue has written there (see labels_topic)")
    return None if read is None else fold


def label_lines(labels: Iterable[LabelRecord]) -> Iterator[bytes]:
    """Each label as the JSON line ``calibrate --labels`` reads (no newline)."""
    for label in labels:
        yield orjson.dumps(label.calibrate_row())


def label_rows(labels: Iterable[LabelRecord], topic: str) -> Iterator[tuple[str, bytes]]:
    """``(where, line)`` pairs for :func:`guardrail.calibration.labels.read_label_rows`."""
    for label in labels:
        yield f"{topic}: {label.case_id}|{label.metric}", orjson.dumps(label.calibrate_row())
