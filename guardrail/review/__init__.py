"""Humans in the loop: the review queue, labels, and the judge's agreement with people.

- :mod:`.settings` — the ``review`` settings group.
- :mod:`.records` — review items and labels as they travel on Kafka.
- :mod:`.selection` — which judged results go to review (deterministic per case);
  imported as ``guardrail.review.selection``.
"""

from .records import (CHOICES, SCHEMA_VERSION, LabelRecord, ReviewItem, ReviewMetric,
                      SchemaError, label_key, rubric_version)
from .settings import ReviewSettings

__all__ = ["ReviewSettings", "ReviewItem", "ReviewMetric", "LabelRecord", "SchemaError",
           "SCHEMA_VERSION", "CHOICES", "label_key", "rubric_version"]
