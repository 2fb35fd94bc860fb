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

import asyncio
from collections.abc import Iterable, Iterator

import orjson
from aiokafka.errors import KafkaError

from ..kafka.changelog import ChangelogReader, RatesUnavailable
from ..kafka.clients import resolve_bootstrap
from ..kafka.settings import KafkaSettings
from .settings import ReviewSettings
from .folds import LabelsFold
from .records import LabelRecord

__all__ = ["read_labels_topic", "label_lines", "label_rows"]


async def read_labels_topic(kafka: KafkaSettings, review: ReviewSettings, *,
                            topic: str | None = None, fetch_wait_ms: int = 100,
                            timeout: float = 60.0, missing_ok: bool = False
                            ) -> LabelsFold | None:
    """Every label of the labels topic (the latest per key), read once up to the
    end seen at the start. A missing topic is None with ``missing_ok``, else,
    like an unreachable broker or a read slower than ``timeout``,
    :class:`~guardrail.kafka.changelog.RatesUnavailable`."""
    topic = topic or review.labels_topic
    fold = LabelsFold()
    reader = ChangelogReader(kafka, topic, fold, fetch_wait_ms=fetch_wait_ms)
    where = resolve_bootstrap(kafka)
    try:
        if not await reader.open():
            if missing_ok:
                return None
            raise RatesUnavailable(f"no labels topic {topic!r} on {where} (no review "
                                   "queue has written there; see labels_topic)")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not await reader.caught_up():
            if loop.time() > deadline:
                raise RatesUnavailable(f"could not read {topic!r} to its end within "
                                       f"{timeout:.0f}s")
            await reader.poll(200)
    except KafkaError as exc:
        raise RatesUnavailable(f"cannot read {topic!r} from {where}: {exc}") from None
    finally:
        await reader.close()
    return fold


def label_lines(labels: Iterable[LabelRecord]) -> Iterator[bytes]:
    """Each label as the JSON line ``calibrate --labels`` reads (no newline)."""
    for label in labels:
        yield orjson.dumps(label.calibrate_row())


def label_rows(labels: Iterable[LabelRecord], topic: str) -> Iterator[tuple[str, bytes]]:
    """``(where, line)`` pairs for :func:`guardrail.calibration.labels.read_label_rows`."""
    for label in labels:
        yield f"{topic}: {label.case_id}|{label.metric}", orjson.dumps(label.calibrate_row())
