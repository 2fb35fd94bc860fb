"""The ``judge`` settings group (flat names ``judge_<field>``) and the cascade's
``escalation`` group (``escalate_<field>``): which model judges, how it is reached and
asked, what it costs, and which second judge decides the unsure; part of
:class:`guardrail.config.Settings`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator

from .._group_config import GROUP_CONFIG

__all__ = ["JudgeSettings", "EscalationSettings"]


class JudgeSettings(BaseModel):
    """The LLM judge: which model, how to reach it, how to ask it and what it costs."""

    model_config = GROUP_CONFIG

    model: str = "openai/gpt-4o-mini"
    """The judge model as a litellm model string, provider prefix first
    (``openai/gpt-4o-mini``, ``anthropic/…``, ``ollama/…``, ``hosted_vllm/…``)."""
    api_base: str | None = None
    """Base URL of the judge's API, for a self-hosted or proxied judge
    (``http://127.0.0.1:8000/v1``). Unset: the provider's own endpoint."""
    api_key: SecretStr | None = None
    """API key sent to the judge. Secret: never printed. Unset: through litellm the
    provider's usual variable (such as ``OPENAI_API_KEY``) applies; the direct HTTP
    transport sends no key."""
    timeout: float = Field(default=30.0, gt=0)
    """Seconds one judge call may take; a call that takes longer fails as transient
    and is retried."""
    max_retries: int = Field(default=3, ge=0)
    """Retries of a call that failed on the judge's side (timeout, lost connection,
    429, 5xx), with growing, jittered waits; 0: one attempt. A refused key or an
    unknown model or endpoint is never retried: it stops the command."""
    concurrency: int = Field(default=16, ge=1)
    """Most calls this judge has in flight at once in one process, across all cases
    and metrics (a cascade's escalation judge has as many of its own). With
    ``judge_protocol: moderation``, the most requests in flight, each carrying up
    to ``judge_batch_size`` messages."""
    batch_size: int = Field(default=32, ge=1)
    """With ``judge_protocol: moderation``: most messages sent in one request (the
    endpoint takes a list of inputs); messages judged at the same time share a
    request and each gets its own result back. 1: one request per message. Other
    protocols send one request per call whatever this is."""
    max_tokens: int = Field(default=400, ge=16)
    """Longest answer in tokens for one metric; a call that judges several metrics at
    once (``judge_calls: per_message``) may use this much per metric."""
    temperature: float = 0.0
    """Sampling temperature of every judge call; 0 keeps answers as repeatable as the
    provider allows."""
    structured_output: bool = True
    """Send the answer's JSON schema as a strict ``response_format``, so providers
    that honour it return valid JSON; false: only the prompt asks for JSON."""
    logprobs: bool = True
    """Ask for token log-probabilities and decide each verdict from P(UNSAFE) against
    ``verdict_thresholds``. False, or a provider or server without them: the
    judge's sampled verdict stands. They cost no tokens."""
    transport: Literal["auto", "litellm", "http"] = "auto"
    """How calls are sent. ``auto``: plain HTTP to a self-hosted OpenAI-compatible
    judge (an ``openai/`` or ``hosted_vllm/`` model with ``judge_api_base``), litellm
    otherwise; ``litellm`` or ``http`` forces one (``http`` needs such a model and
    ``judge_api_base``)."""
    input_cost_per_token: float | None = None
    """USD per input token of the judge model, for a model litellm's cost map lacks
    (0 for a free self-hosted one). Used only together with
    ``judge_output_cost_per_token``: with both set they replace the cost map's
    prices. Unset: the cost map's price, and a model it lacks has an unknown cost,
    never $0."""
    output_cost_per_token: float | None = None
    """USD per output token of the judge model; see ``judge_input_cost_per_token``.
    Never applied to the cascade's escalation judge."""
    protocol: Literal["rubric", "llama_guard", "yes_no", "qwen3guard", "policy",
                      "moderation"] = "rubric"
    """How the judge is asked and answered: ``rubric`` (the rubric prompt, a JSON
    verdict), or a guard model's own format: ``llama_guard`` (Llama Guard 3/4),
    ``yes_no`` (ShieldGemma, Granite Guardian), ``qwen3guard``, ``policy``
    (gpt-oss-safeguard and other written-policy models) or ``moderation`` (an
    OpenAI-compatible ``/v1/moderations`` endpoint). A metric a guard does not
    cover gets an error naming it, never SAFE."""
    protocol_options: dict[str, Any] = Field(default_factory=dict)
    """Options of a guard protocol, e.g. ``{"flavor": "granite3.3", "policy_via":
    "system"}`` for ``yes_no``; empty: the protocol's defaults."""
    guard_categories: dict[str, Any] | None = None
    """Changes to the shipped category map of the protocol
    (``rubrics/guards/<protocol>.yaml``), in its keys: e.g. ``{"metrics":
    {"toxicity": ["S1", "S10"], "bias": null}}`` (metric → the guard's categories;
    ``null`` removes a metric). Unset: the shipped map."""
    qwen3guard_controversial: Literal["unsafe", "safe"] = "unsafe"
    """What Qwen3Guard's ``Controversial`` (and other guards' unsure answers) counts
    as."""

    def calls_in_flight(self, protocol: str | None = None) -> int:
        """Most judge calls let in at once with ``protocol`` (this judge's by default):
        ``concurrency``, times ``batch_size`` for ``moderation``, whose requests carry
        up to that many calls each (fewer calls in flight would never fill one)."""
        shared = (protocol or self.protocol) == "moderation"
        return self.concurrency * (self.batch_size if shared else 1)


class EscalationSettings(BaseModel):
    """The cascade's second judge (flat names ``escalate_<field>``); off while
    ``model`` is unset. Its other settings (timeout, retries, concurrency,
    transport, structured output, log-probabilities) are the ``judge_*`` ones."""

    model_config = GROUP_CONFIG

    model: str | None = None
    """The escalation judge, a litellm model string that differs from ``judge_model``:
    a metric whose first P(UNSAFE) lies in ``escalate_band`` is judged again by it,
    and its verdict stands. Unset: no cascade."""
    api_base: str | None = None
    """Base URL of the escalation judge's API. Unset: the provider's own endpoint."""
    api_key: SecretStr | None = None
    """API key of the escalation judge. Secret: never printed."""
    band: tuple[float, float] = (0.2, 0.8)
    """The P(UNSAFE) interval, ends included, in which a first judgment is escalated:
    low and high with 0 ≤ low ≤ high ≤ 1. A judgment without P(UNSAFE) is never
    escalated. In the environment as two numbers, ``0.2,0.8``."""
    on: Literal["unsure", "unsafe", "both"] = "unsure"
    """Which first judgments are judged again: ``unsure`` (P(UNSAFE) in
    ``escalate_band``), ``unsafe`` (every UNSAFE verdict, e.g. a guard's, to get
    violations and evidence for what is flagged) or ``both``. Metrics the first
    judge does not cover (a guard model's) are always escalated."""

    @field_validator("band", mode="before")
    @classmethod
    def _band_from_text(cls, value: Any) -> Any:
        # From the environment as "0.2,0.8", or as the JSON settings_env writes.
        if isinstance(value, str):
            return [part.strip() for part in value.strip().strip("[]").split(",")]
        return value

    @field_validator("band")
    @classmethod
    def _band_is_an_interval(cls, band: tuple[float, float]) -> tuple[float, float]:
        low, high = band
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(f"must be two probabilities low <= high in [0, 1], got {list(band)}")
        return band
