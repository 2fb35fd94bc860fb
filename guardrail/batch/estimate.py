"""Price a run before making it: render the real prompts, count, multiply.

No API call is made. Input tokens are litellm's count of the exact messages
the judge would receive (one call per message, or per metric with
``judge_calls=per_metric``); output tokens are an expected answer size per
mode and metric::

    report = estimate_cases(cases, evaluator, judge=settings.judge, sample_rate=0.1,
                            escalation=settings.escalation)
    report.total.cost          # None when the judge model has no known price
    report.cost_cached         # the same with every prompt's static prefix read from cache
    report.warnings            # e.g. cases too long for the judge's context window
    report.escalation          # with escalate_model: the cascade's worst case, or None

The static prefix (system text, rubrics, answer instructions; see
:mod:`guardrail.judging.prompts`) is what a provider's prompt cache can serve: it is
counted per call and priced a second time at the cost map's cached rate. A
case longer than the judge model's context window (litellm's
``max_input_tokens``) is not priced: it is reported as a warning.

With a cascade (``escalate_model``) the second judge's spend depends on how
many first judgments fall inside ``escalate_band``, which only a run shows;
the estimate gives its ceiling: every sampled message escalated on every
metric, the same prompts counted and priced for the escalation model.

A guard model first (``judge_protocol`` not ``rubric``; see
:mod:`guardrail.batch.estimate_guard`) is priced with the requests its protocol
really sends and a guard's short answer (a moderation endpoint: calls only,
$0 unless ``judge_*_cost_per_token`` price it). ``report.stages`` says what
each stage covers; with ``escalate_model``, ``report.escalation_uncovered``
prices what the cascade always escalates (the metrics the guard does not
cover), ``report.escalation`` stays the ceiling (every metric escalated).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..providers.litellm import (cached_input_price, count_message_tokens, max_input_tokens,
                                 price_tokens)
from ..judges.cascade import escalation_judge_settings
from ..judges.settings import EscalationSettings
from .estimate_guard import (GUARD_OUTPUT_TOKENS, StageCoverage, as_guard, guard_requests,
                             stage_coverage)
from ..judging.evaluate import EffectiveConfig, Evaluator
from ..judges.guard import GuardJudge
from ..judges.protocols import GuardRequest
from ..judging.models import Case, CostEstimate, ScoringMode
from ..judging.prompts import NONCE_BYTES, JudgePrompt, render_group_prompt, render_prompt
from ..judges.settings import JudgeSettings

__all__ = ["EXPECTED_OUTPUT_TOKENS", "GROUP_ENTRY_TOKENS", "OPENAI_MIN_CACHED_PROMPT",
           "estimate_nonce", "CaseEstimate", "EscalationEstimate", "EstimateReport",
           "estimate_case", "estimate_guard_case", "estimate_cases"]

#: Typical answer sizes measured on the shipped rubrics (tokens per metric).
EXPECTED_OUTPUT_TOKENS: dict[tuple[ScoringMode, bool], int] = {
    ("binary_yes_no", False): 30,
    ("binary_yes_no", True): 75,
    ("scale_1_5", False): 36,
    ("scale_1_5", True): 82,
}
#: A metric's entry in a several-metric answer also carries its name as a key.
GROUP_ENTRY_TOKENS = 5
#: OpenAI caches a prompt's prefix only from this many prompt tokens on.
OPENAI_MIN_CACHED_PROMPT = 1024
#: No tokenizer gives fewer tokens than characters / this: a cheap check that
#: spares tokenizing a case of megabytes only to find it cannot fit.
_MAX_CHARS_PER_TOKEN = 8


@dataclass
class CaseEstimate:
    case_id: str
    calls: int
    input_tokens: int
    output_tokens: int
    skipped: str | None = None
    #: Of ``input_tokens``, the static prefix a prompt cache can serve.
    cached_prefix_tokens: int = 0


@dataclass
class EscalationEstimate:
    """The cascade's ceiling: what the escalation judge would spend if every
    sampled message's first P(UNSAFE) fell inside ``band`` on every metric
    (a cascade escalates only those, so a real run spends a share of this)."""

    model: str
    band: tuple[float, float]
    calls: float
    input_tokens: float
    output_tokens: float
    #: None when litellm's cost map has no price for ``model`` (never $0).
    cost: float | None


@dataclass
class EstimateReport:
    model: str
    cases: list[CaseEstimate] = field(default_factory=list)
    #: Expected spend: all cases' figures times ``sample_rate``.
    total: CostEstimate = field(default_factory=CostEstimate)
    price_known: bool = True
    sample_rate: float = 1.0
    judge_calls: str = "per_message"
    cached_prefix_tokens: float = 0.0
    #: ``total.cost`` with every call's static prefix priced at the cached rate.
    cost_cached: float | None = None
    cached_rate: float | None = None
    warnings: list[str] = field(default_factory=list)
    #: With ``escalate_model`` set: the escalation judge's worst case.
    escalation: EscalationEstimate | None = None
    #: The first stage's protocol: ``rubric``, or the guard's (``llama_guard`` …).
    protocol: str = "rubric"
    #: Per stage (first judge; escalation judge with ``escalate_model``): what it covers.
    stages: list[StageCoverage] = field(default_factory=list)
    #: A guard first: its expected answer tokens per call (None: the rubric judge).
    guard_output_tokens: int | None = None
    #: False for a moderation endpoint without ``judge_*_cost_per_token``: $0, no tokens.
    priced_by_token: bool = True
    #: A guard first with ``escalate_model``: what is always escalated (the
    #: metrics the guard does not cover), a part of ``escalation``.
    escalation_uncovered: EscalationEstimate | None = None

    @property
    def calls(self) -> float:
        """Expected judge calls (all cases' calls times the sample rate)."""
        calls = sum(c.calls for c in self.cases) * self.sample_rate
        return int(calls) if calls == int(calls) else round(calls, 2)

    @property
    def prefix_share(self) -> float | None:
        """The share of input tokens that is a cacheable static prefix."""
        tokens = self.total.input_tokens
        return self.cached_prefix_tokens / tokens if tokens else None


def estimate_nonce(case: Case, metric: str) -> str:
    """A fence token for estimates: random-looking like the real one (hex tokenises
    differently from a constant) but reproducible, so estimates are stable."""
    seed = f"{metric}\0{case.case_id}\0{case.output}".encode("utf-8", "replace")
    return hashlib.sha256(seed).hexdigest()[:2 * NONCE_BYTES]


def _prompts(case: Case, config: EffectiveConfig, per_message: bool) -> list[JudgePrompt]:
    knobs = {"scoring_mode": config.scoring_mode, "include_reasoning": config.include_reasoning}
    if per_message:
        names = "+".join(m.name for m in config.metrics)
        return [render_group_prompt(config.metrics, case, nonce=estimate_nonce(case, names),
                                    **knobs)]
    return [render_prompt(m, case, nonce=estimate_nonce(case, m.name), **knobs)
            for m in config.metrics]


def _too_long(tokens: int, model: str, limit: int | None) -> str | None:
    if limit is None or tokens <= limit:
        return None
    return (f"exceeds the judge's context window: at least {tokens:,} input tokens per call, "
            f"{model} takes {limit:,}; not priced")


def _counts(prompts: Sequence[JudgePrompt | GuardRequest], model: str,
            limit: int | None) -> list[int] | str:
    """Input tokens per call (a rubric prompt's or a guard request's messages),
    or why the case cannot fit ``model``'s context."""
    counts = []
    for prompt in prompts:
        floor = sum(len(m["content"]) for m in prompt.messages) // _MAX_CHARS_PER_TOKEN
        tokens = floor if limit is not None and floor > limit else (
            count_message_tokens(model, list(prompt.messages)))
        reason = _too_long(tokens, model, limit)
        if reason is not None:
            return reason
        counts.append(tokens)
    return counts


def estimate_case(case: Case, evaluator: Evaluator, *, model: str,
                  context_limit: int | None = None,
                  uncovered_by: GuardJudge | None = None) -> CaseEstimate:
    """Count the tokens one case would spend, call by call; with ``uncovered_by``
    (a guard first stage) only for the metrics that guard does not cover."""
    case_id = case.case_id or "-"
    config = evaluator.effective_config(case)
    if not case.has_output:
        return CaseEstimate(case_id, 0, 0, 0, skipped="output is missing or empty")
    if uncovered_by is not None:
        _, uncovered = uncovered_by.covered(m.name for m in config.metrics)
        config = EffectiveConfig(config.scoring_mode, config.include_reasoning,
                                 tuple(m for m in config.metrics if m.name in uncovered))
        if not config.metrics:
            return CaseEstimate(case_id, 0, 0, 0)
    prompts = _prompts(case, config, evaluator.per_message)
    counts = _counts(prompts, model, context_limit)
    if isinstance(counts, str):
        return CaseEstimate(case_id, 0, 0, 0, skipped=counts)
    prefix = sum(count_message_tokens(model, p.static_messages()) for p in prompts)
    per_metric = EXPECTED_OUTPUT_TOKENS[(config.scoring_mode, config.include_reasoning)]
    metrics = len(config.metrics)
    output_tokens = (metrics * (per_metric + GROUP_ENTRY_TOKENS) if evaluator.per_message
                     else metrics * per_metric)
    return CaseEstimate(case_id, len(prompts), sum(counts), output_tokens,
                        cached_prefix_tokens=min(prefix, sum(counts)))


def estimate_guard_case(case: Case, evaluator: Evaluator, guard: GuardJudge, *, model: str,
                        context_limit: int | None = None,
                        by_token: bool = True) -> CaseEstimate:
    """Count what a guard first stage sends for one case: the requests its
    protocol builds (see :func:`~guardrail.batch.estimate_guard.guard_requests`) and a
    guard's short answer per call; ``by_token=False`` (an unpriced moderation
    endpoint): the calls only."""
    case_id = case.case_id or "-"
    if not case.has_output:
        return CaseEstimate(case_id, 0, 0, 0, skipped="output is missing or empty")
    config = evaluator.effective_config(case)
    requests = guard_requests(guard, _prompts(case, config, evaluator.per_message),
                              {m.name: m for m in config.metrics})
    if not by_token:
        return CaseEstimate(case_id, len(requests), 0, 0)
    counts = _counts(requests, model, context_limit)
    if isinstance(counts, str):
        return CaseEstimate(case_id, 0, 0, 0, skipped=counts)
    answer = GUARD_OUTPUT_TOKENS[guard.protocol.name]
    return CaseEstimate(case_id, len(requests), sum(counts), answer * len(requests))


def estimate_cases(cases: Iterable[Case], evaluator: Evaluator, *, judge: JudgeSettings,
                   sample_rate: float = 1.0,
                   escalation: EscalationSettings | None = None) -> EstimateReport:
    """Estimate every case and price the expected total (times ``sample_rate``)
    with the judge model's prices, in full and with cached prefixes; with an
    ``escalation`` whose ``model`` is set, also the cascade's ceiling (and, after
    a guard, what it always escalates). ``report.stages``: what each stage covers."""
    if not 0.0 <= sample_rate <= 1.0:
        raise ValueError(f"sample_rate must be within 0..1, got {sample_rate}")
    cases = list(cases)
    guard = as_guard(evaluator.judge)
    report = EstimateReport(model=judge.model, sample_rate=sample_rate,
                            judge_calls=evaluator.evaluation.judge_calls,
                            protocol=guard.protocol.name if guard is not None else "rubric")
    report.cases = _first_stage(cases, evaluator, guard, judge, report)
    second = escalation.model if escalation is not None else None
    report.stages = stage_coverage(evaluator.judge, report.protocol,
                                   _metric_names(cases, evaluator), escalation_model=second)
    if escalation is not None and second:
        settings = escalation_judge_settings(judge, escalation)
        report.escalation = _escalation_ceiling(cases, evaluator, settings, escalation.band,
                                                sample_rate)
        if guard is not None:
            report.escalation_uncovered = _escalation_ceiling(
                cases, evaluator, settings, escalation.band, sample_rate, uncovered_by=guard)
    report.warnings = [f"case {c.case_id}: {c.skipped}" for c in report.cases
                       if c.skipped and "context window" in c.skipped]
    _price_first_stage(report, judge)
    return report


def _first_stage(cases: list[Case], evaluator: Evaluator, guard: GuardJudge | None,
                 judge: JudgeSettings, report: EstimateReport) -> list[CaseEstimate]:
    """The first judge's rows: rubric prompts, or a guard's own requests."""
    limit = max_input_tokens(judge.model)
    if guard is None:
        return [estimate_case(case, evaluator, model=judge.model, context_limit=limit)
                for case in cases]
    report.guard_output_tokens = GUARD_OUTPUT_TOKENS[guard.protocol.name]
    priced = judge.input_cost_per_token is not None and judge.output_cost_per_token is not None
    report.priced_by_token = guard.protocol.name != "moderation" or priced
    return [estimate_guard_case(case, evaluator, guard, model=judge.model, context_limit=limit,
                                by_token=report.priced_by_token) for case in cases]


def _metric_names(cases: list[Case], evaluator: Evaluator) -> list[str]:
    """Every metric the sampled cases are judged on, in first-seen order."""
    names: dict[str, None] = {}
    for case in cases:
        names.update(dict.fromkeys(m.name for m in evaluator.effective_config(case).metrics))
    return list(names) or [m.name for m in evaluator.base_metrics]


def _price_first_stage(report: EstimateReport, judge: JudgeSettings) -> None:
    """Totals times the sample rate, in full and with cached prefixes; an
    unpriced moderation endpoint costs $0 (it is not priced by token)."""
    rate, rows = report.sample_rate, report.cases
    prefix = sum(c.cached_prefix_tokens for c in rows)
    if report.priced_by_token:
        cost, cached = _price(rows, judge), _price(rows, judge, cached_tokens=prefix)
    else:
        cost = cached = 0.0
    report.price_known = cost is not None
    report.total = CostEstimate(cost=None if cost is None else cost * rate,
                                input_tokens=float(sum(c.input_tokens for c in rows)) * rate,
                                output_tokens=float(sum(c.output_tokens for c in rows)) * rate)
    report.cached_prefix_tokens = prefix * rate
    report.cost_cached = None if cached is None else cached * rate
    report.cached_rate = None if judge.input_cost_per_token is not None or (
        report.protocol != "rubric") else cached_input_price(judge.model)


def _escalation_ceiling(cases: list[Case], evaluator: Evaluator, judge: JudgeSettings,
                        band: tuple[float, float], sample_rate: float, *,
                        uncovered_by: GuardJudge | None = None) -> EscalationEstimate:
    """Every case judged again by ``judge`` with the same prompts (the cascade
    sends the first judge's layout: one call per message, or one per metric);
    with ``uncovered_by``, only the metrics that guard leaves uncovered."""
    limit = max_input_tokens(judge.model)
    rows = [estimate_case(case, evaluator, model=judge.model, context_limit=limit,
                          uncovered_by=uncovered_by) for case in cases]
    cost = _price(rows, judge)
    return EscalationEstimate(
        model=judge.model, band=band, calls=sum(r.calls for r in rows) * sample_rate,
        input_tokens=sum(r.input_tokens for r in rows) * sample_rate,
        output_tokens=sum(r.output_tokens for r in rows) * sample_rate,
        cost=None if cost is None else cost * sample_rate)


def _price(rows: list[CaseEstimate], judge: JudgeSettings, *,
           cached_tokens: int = 0) -> float | None:
    """What ``rows`` cost at ``judge``'s prices: its per-token overrides, else
    litellm's cost map (None: no price known)."""
    return price_tokens(judge.model, sum(r.input_tokens for r in rows),
                        sum(r.output_tokens for r in rows), cached_tokens=cached_tokens,
                        input_cost_per_token=judge.input_cost_per_token,
                        output_cost_per_token=judge.output_cost_per_token)
