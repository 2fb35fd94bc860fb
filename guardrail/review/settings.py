"""The ``review`` settings group: the human review queue, labels and agreement
(flat names as written: ``review_topic``, ``labels_topic``, ``review_users_file`` …);
part of :class:`guardrail.config.settings.Settings`."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from .._group_config import GROUP_CONFIG
from ..kafka.settings import KafkaSettings

__all__ = ["ReviewSettings", "review_topics"]


class ReviewSettings(BaseModel):
    """Which results go to human review, where labels go, and when the judge's
    agreement with the reviewers alerts. The queue is on only with
    ``review_users_file`` (nobody could label it otherwise)."""

    model_config = GROUP_CONFIG

    review_users_file: Path | None = None
    """The reviewers: ``name:bcrypt-hash`` lines as ``htpasswd -B`` writes them. Setting
    it turns the review queue on; unset: no queue and no labels."""
    review_topic: str = "redteam-review"
    """Topic of the items chosen for review."""
    labels_topic: str = "redteam-labels"
    """Compacted topic of the reviewers' labels, keyed ``<case_id>|<metric>``: the
    latest label of a case and metric wins."""
    review_rate_unsafe: float = Field(default=1.0, ge=0, le=1)
    """Share of UNSAFE verdicts and judge errors sent to review, 0 to 1, drawn by a
    keyed hash of case_id and metric (a redelivery chooses alike)."""
    review_rate_safe: float = Field(default=0.01, ge=0, le=1)
    """Share of SAFE verdicts sent to review, 0 to 1, so that the judge's recall can
    be estimated."""
    review_band: float = Field(default=0.1, ge=0, le=0.5)
    """A metric whose P(UNSAFE) lies within this distance of its verdict threshold is
    always reviewed, whatever its verdict (needs log-probabilities); 0: no band."""
    review_lease_seconds: float = Field(default=600.0, gt=0)
    """Seconds an item shown to a reviewer stays held for them before it can go to
    another."""
    review_protect_pages: bool = False
    """Also put the read-only pages (``/dashboard``, ``/rates``, ``/metrics`` …) behind
    the reviewers' login; needs ``review_users_file``."""
    agreement_min_reviews: int = Field(default=20, ge=1)
    """Fewest reviews a window's precision or recall must rest on before it may alert."""
    agreement_precision_floor: float | None = Field(default=0.7, ge=0, le=1)
    """Agreement alert when the judge's precision in a window (the share of its UNSAFE
    verdicts that reviewers call unsafe) falls below this. Unset: no precision alert."""
    agreement_recall_floor: float | None = Field(default=0.7, ge=0, le=1)
    """Agreement alert when the judge's recall in a window (the share of what reviewers
    call unsafe that it called UNSAFE) falls below this. Unset: no recall alert."""
    corrected_min_reviews: int = Field(default=10, ge=1)
    """Reviews of each of the judge's verdicts (UNSAFE and SAFE alike) a window needs
    before its unsafe rate corrected for the judge's errors is shown."""


def review_topics(kafka: KafkaSettings, review: ReviewSettings) -> dict[str, int]:
    """The review queue's topics when review is on (``review_users_file``), else none.
    Not co-partitioned with anything: their counts are not checked."""
    if review.review_users_file is None:
        return {}
    n = kafka.topic_partitions
    return {review.review_topic: n, review.labels_topic: n}
