"""Humans in the loop: which results go to review, the queue reviewers work through,
their labels, and the ``/review`` page they do it on::

    item = review_item(result, record, review=settings.review, thresholds={}, judge_model=m)
    queue = ReviewQueue(lease_seconds=600)      # who gets which item next
    fold = await read_labels_topic(settings.kafka, settings.review)   # every label, latest wins

- :mod:`.settings` — the ``review`` settings group, and the review topics.
- :mod:`.records` — review items and labels as they travel on Kafka.
- :mod:`.selection` — which judged results go to review (deterministic per case);
  imported as ``guardrail.review.selection``.
- :mod:`.queue` — who gets which item next: leases, skips, what is left.
- :mod:`.auth` and :mod:`.access` — the users file, sessions, CSRF; who may write.
- :mod:`.page` (with :mod:`.style`, :mod:`.marks`, :mod:`.run_view` for agent runs
  and :mod:`.session_view` for sessions) and :mod:`.submit` — the ``/review`` page
  and the answers it takes; served by :mod:`guardrail.agents.review`.
- :mod:`.folds` — the review and labels topics folded by key; :mod:`.labels_topic` —
  the labels topic read once, for commands.

The judge's agreement with the reviewers is counted in windows, beside the rates it
corrects (:mod:`guardrail.stream.agreement`). This wing imports the judging core and
Kafka's topic readers, never the stream, Faust or the worker.
"""

from .records import (CHOICES, SCHEMA_VERSION, LabelRecord, ReviewItem, ReviewMetric,
                      SchemaError, label_key, rubric_version)
from .settings import ReviewSettings, review_topics

__all__ = ["ReviewSettings", "ReviewItem", "ReviewMetric", "LabelRecord", "SchemaError",
           "SCHEMA_VERSION", "CHOICES", "label_key", "rubric_version", "review_topics"]
