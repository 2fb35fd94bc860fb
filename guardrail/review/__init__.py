"""Humans in the loop: the review queue, labels, and the judge's agreement with people.

- :mod:`.settings` — the ``review`` settings group.
- :mod:`.records` — review items and labels as they travel on Kafka.
- :mod:`.selection` — which judged results go to review (deterministic per case);
  imported as ``guardrail.review.selection``.
- :mod:`.queue` — who gets which item next: leases, skips, what is left.
- :mod:`.auth` and :mod:`.access` — the users file, sessions, CSRF; who may write.
- :mod:`.page` (with :mod:`.style`, :mod:`.marks`, :mod:`.run_view` for agent runs
  and :mod:`.session_view` for sessions) and :mod:`.submit` — the ``/review`` page
  and the answers it takes; served by :mod:`guardrail.agents.review`.
"""

from .records import (CHOICES, SCHEMA_VERSION, LabelRecord, ReviewItem, ReviewMetric,
                      SchemaError, label_key, rubric_version)
from .settings import ReviewSettings

__all__ = ["ReviewSettings", "ReviewItem", "ReviewMetric", "LabelRecord", "SchemaError",
           "SCHEMA_VERSION", "CHOICES", "label_key", "rubric_version"]
