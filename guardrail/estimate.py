"""Price a run before making it: render the real prompts, count, multiply.

No API call is made. Input tokens are litellm's count of the exact messages
the judge would receive; output tokens are an expected answer size per mode::

    report = estimate_cases(cases, evaluator, judge=settings.judge)
    report.total.cost    # None when the judge model has no known price
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from ._litellm import count_message_tokens, price_tokens
from .evaluate import Evaluator
from .models import Case, CostEstimate, ScoringMode
from .prompts import render_prompt
from .settings import JudgeSettings

__all__ = ["EXPECTED_OUTPUT_TOKENS", "estimate_nonce", "CaseEstimate", "EstimateReport",
           "estimate_cases"]

#: Typical answer sizes measured on the shipped rubrics (tokens per metric call).
EXPECTED_OUTPUT_TOKENS: dict[tuple[ScoringMode, bool], int] = {
    ("binary_yes_no", False): 30,
    ("binary_yes_no", True): 75,
    ("scale_1_5", False): 36,
    ("scale_1_5", True): 82,
}


@dataclass
class CaseEstimate:
    case_id: str
    calls: int
    input_tokens: int
    output_tokens: int
    skipped: str | None = None


@dataclass
class EstimateReport:
    model: str
    cases: list[CaseEstimate] = field(default_factory=list)
    total: CostEstimate = field(default_factory=CostEstimate)
    price_known: bool = True

    @property
    def calls(self) -> int:
        return sum(c.calls for c in self.cases)


def estimate_nonce(case: Case, metric: str) -> str:
    """A fence token for estimates: random-looking like the real one (hex tokenises
    differently from a constant) but reproducible, so estimates are stable."""
    seed = f"{metric}\0{case.case_id}\0{case.output}".encode("utf-8", "replace")
    return hashlib.sha256(seed).hexdigest()[:24]


def estimate_case(case: Case, evaluator: Evaluator, *, model: str) -> CaseEstimate:
    """Count the tokens one case would spend, metric by metric."""
    case_id = case.case_id or "-"
    config = evaluator.effective_config(case)
    if not case.has_output:
        return CaseEstimate(case_id, 0, 0, 0, skipped="output is missing or empty")
    input_tokens = 0
    for rubric in config.metrics:
        prompt = render_prompt(rubric, case, scoring_mode=config.scoring_mode,
                               include_reasoning=config.include_reasoning,
                               nonce=estimate_nonce(case, rubric.name))
        input_tokens += count_message_tokens(model, list(prompt.messages))
    per_call = EXPECTED_OUTPUT_TOKENS[(config.scoring_mode, config.include_reasoning)]
    calls = len(config.metrics)
    return CaseEstimate(case_id, calls, input_tokens, per_call * calls)


def estimate_cases(cases: Iterable[Case], evaluator: Evaluator, *,
                   judge: JudgeSettings) -> EstimateReport:
    """Estimate every case and price the total with the judge model's prices."""
    model = judge.model
    report = EstimateReport(model=model)
    report.cases = [estimate_case(case, evaluator, model=model) for case in cases]
    input_tokens = sum(c.input_tokens for c in report.cases)
    output_tokens = sum(c.output_tokens for c in report.cases)
    cost = price_tokens(model, input_tokens, output_tokens,
                        input_cost_per_token=judge.input_cost_per_token,
                        output_cost_per_token=judge.output_cost_per_token)
    report.price_known = cost is not None
    report.total = CostEstimate(cost=cost, input_tokens=float(input_tokens),
                                output_tokens=float(output_tokens))
    return report
