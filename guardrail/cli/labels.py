"""``guardrail labels``: the reviewers' labels, out of Kafka.

    guardrail labels export --out labels.jsonl [--metric toxicity] [--bootstrap-servers H:P]

Reads the labels topic once (the latest label of each case and metric) and
writes one line per label in the format ``guardrail calibrate --labels``
reads (:meth:`guardrail.review.LabelRecord.calibrate_row`): output, label,
metric, case_id, the other judged fields, and the reviewer, the judge's
verdict and P(UNSAFE) as extra columns. ``calibrate --labels-topic`` reads
the same labels the same way.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import click

from .batch import settings_from_flags, settings_options

__all__ = ["labels_group"]


@click.group("labels", short_help="Export the reviewers' labels.")
def labels_group() -> None:
    """The reviewers' labels (the labels topic of the review queue)."""


@labels_group.command("export", short_help="Write the labels as calibrate's labelled cases.")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Where the JSON Lines go ('-': standard output).")
@click.option("--topic", help="The labels topic (default: the labels_topic setting).")
@click.option("--metric", "metrics", multiple=True, help="Only this metric (repeatable).")
@click.option("--bootstrap-servers", help="Kafka bootstrap servers (default: "
              "GUARDRAIL_BOOTSTRAP_SERVERS, else the embedded broker).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=60.0,
              show_default=True, help="Give up reading the topic after this many seconds.")
@settings_options
def export_command(out: Path, topic: str | None, metrics: tuple[str, ...],
                   bootstrap_servers: str | None, timeout: float, **flags: Any) -> None:
    """Write the labels topic's labels as calibrate's labelled cases."""
    from ..review.labels_topic import label_lines, read_labels_topic

    settings = settings_from_flags(bootstrap_servers=bootstrap_servers, **flags)
    topic = topic or settings.review.labels_topic
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # the error line says it once
    fold = asyncio.run(read_labels_topic(
        settings.kafka, settings.review, topic=topic, timeout=timeout,
        fetch_wait_ms=settings.worker.consumer_fetch_wait_ms))
    assert fold is not None
    labels = [label for label in fold.records() if not metrics or label.metric in metrics]
    text = b"".join(line + b"\n" for line in label_lines(labels)).decode()
    if str(out) == "-":
        click.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")
    skipped = f"; skipped {fold.skipped} record(s) of another kind or version" \
        if fold.skipped else ""
    click.echo(f"wrote {len(labels)} label(s) from {topic} to {out}{skipped}", err=True)
