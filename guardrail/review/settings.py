"""The ``review`` settings group: the human review queue, labels and agreement
(flat names as written: ``review_topic``, ``labels_topic``, ``review_users_file`` …);
part of :class:`guardrail.settings.Settings`."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ReviewSettings"]


class ReviewSettings(BaseModel):
    """Which results go to human review, where labels go, and when the judge's
    agreement with the reviewers alerts. The queue is on only with
    ``review_users_file`` (nobody could label it otherwise)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: ``name:bcrypt-hash`` lines as ``htpasswd -B`` writes them; turns review on.
    review_users_file: Path | None = None
    review_topic: str = "redteam-review"
    #: Compacted: key ``<case_id>|<metric>``, the latest label wins.
    labels_topic: str = "redteam-labels"
    #: Share of UNSAFE verdicts and judge errors sent to review.
    review_rate_unsafe: float = Field(default=1.0, ge=0, le=1)
    #: Share of SAFE verdicts sent to review, so that recall can be estimated.
    review_rate_safe: float = Field(default=0.01, ge=0, le=1)
    #: P(UNSAFE) within this distance of the metric's threshold: always reviewed
    #: (needs log-probabilities; 0 turns the band off).
    review_band: float = Field(default=0.1, ge=0, le=0.5)
    #: How long an item shown to a reviewer is held for them.
    review_lease_seconds: float = Field(default=600.0, gt=0)
    #: Also put the read-only pages (/dashboard, /rates, /metrics …) behind the
    #: reviewers' authentication.
    review_protect_pages: bool = False
    #: Fewest reviews in a window before an agreement figure may alert.
    agreement_min_reviews: int = Field(default=20, ge=1)
    #: Agreement alert when precision or recall over the last window falls below.
    agreement_precision_floor: float | None = Field(default=0.7, ge=0, le=1)
    agreement_recall_floor: float | None = Field(default=0.7, ge=0, le=1)
    #: Fewest reviews (of each of the judge's verdicts) before a corrected rate is shown.
    corrected_min_reviews: int = Field(default=10, ge=1)
