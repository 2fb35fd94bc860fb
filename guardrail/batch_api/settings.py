"""The ``batch_api`` settings group (flat names ``batch_max_requests``,
``batch_max_bytes``, ``batch_gather_seconds``, ``batch_poll_seconds``,
``batch_poll_max_seconds``, ``batch_completion_window``, ``batch_discount``);
part of :class:`guardrail.config.settings.Settings`, kept beside the batch path it
configures (``run --batch-api``)."""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

from .._group_config import GROUP_CONFIG

__all__ = ["BatchApiSettings"]


class BatchApiSettings(BaseModel):
    """How judge requests are sent through a provider's batch API: chunk sizes,
    polling and the batch price."""

    model_config = GROUP_CONFIG

    max_requests: int = Field(default=50_000, ge=1)
    """Most requests in one submitted batch (OpenAI takes 50,000); more become
    further chunks, each its own batch. Unset, an ``anthropic/`` judge takes
    100,000 (Anthropic's limit)."""
    max_bytes: int = Field(default=190_000_000, ge=1000)
    """Most bytes of one batch's requests (OpenAI takes 200 MB; the default
    leaves a margin). Unset, an ``anthropic/`` judge takes 250,000,000 (Anthropic
    takes 256 MB)."""
    gather_seconds: float = Field(default=2.0, gt=0)
    """Seconds without a new request after which the requests gathered so far are
    submitted as a chunk of their own (a full chunk goes at once)."""
    poll_seconds: float = Field(default=5.0, gt=0)
    """First wait between status checks of a submitted batch; it doubles after
    each check, up to ``batch_poll_max_seconds``."""
    poll_max_seconds: float = Field(default=300.0, gt=0)
    """Longest wait between two status checks of one batch."""
    completion_window: str = "24h"
    """The ``completion_window`` asked of the provider (OpenAI takes ``24h``;
    Anthropic's Message Batches have no such setting and end within 24 hours)."""
    discount: float = Field(default=0.5, gt=0, le=1)
    """Share of the normal price a batch request costs when the price map has no
    batch price for the judge model (OpenAI's and Anthropic's batch discount:
    half price); also applied to ``judge_*_cost_per_token`` when those are set."""

    @model_validator(mode="after")
    def _max_after_first(self) -> BatchApiSettings:
        if self.poll_max_seconds < self.poll_seconds:
            raise ValueError("batch_poll_max_seconds must be at least batch_poll_seconds")
        return self
