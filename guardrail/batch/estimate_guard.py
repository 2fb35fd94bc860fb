"""The guard side of ``estimate``: what a guard protocol really sends, and what each stage covers.

A guard first stage (``judge_protocol`` other than ``rubric``) is not asked
the rubric prompt: it is sent its protocol's own request, built here from the
same rendered prompt the evaluator hands the :class:`~guardrail.judges.GuardJudge`
(the conversation of the case it was rendered from, :func:`~guardrail.judges.guard.guard_input`),
one request per case or per covered metric, as the guard really calls::

    requests = guard_requests(evaluator.judge, prompts, rubrics)   # GuardRequest list
    GUARD_OUTPUT_TOKENS["llama_guard"]                              # its expected answer
    stages = stage_coverage(evaluator.judge, "llama_guard", ["bias", "goal_drift"],
                            escalation_model="openai/gpt-4o")
    stages[0].covers, stages[0].uncovered                           # ['bias'], ['goal_drift']

Coverage is the guard's own :meth:`~guardrail.judges.GuardJudge.covered` (the
rule the startup log line reports): an uncovered metric goes straight to the
second stage, or, without one, is an error, never SAFE.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..judges.guard import GuardJudge, guard_input
from ..judges.protocols import GuardAnswerError, GuardRequest
from ..judging.models import MetricRubric
from ..judging.prompts import JudgePrompt

__all__ = ["GUARD_OUTPUT_TOKENS", "NOT_PRICED_BY_TOKEN", "StageCoverage", "as_guard",
           "guard_requests", "stage_coverage"]

#: Expected answer tokens per guard call. A guard answers in its card's short
#: format, not a JSON verdict, so these are sized from the formats themselves:
#: ``unsafe`` + a code line; ``Yes``/``No`` with Granite's confidence tag or
#: 3.3's ``<score> yes </score>``; Qwen3Guard's Safety, Categories and Refusal
#: lines. ``policy`` models (gpt-oss-safeguard) reason before answering and
#: reasoning is billed as output: an allowance for a ``Reasoning: low`` trace
#: plus the JSON answer with its one-sentence rationale (an assumption, not a
#: measurement). A moderation endpoint answers scores, not tokens.
GUARD_OUTPUT_TOKENS: dict[str, int] = {
    "llama_guard": 6,
    "yes_no": 10,
    "qwen3guard": 16,
    "policy": 250,
    "moderation": 0,
}
#: Said wherever a moderation endpoint's (unset) price would be read as $0 by mistake.
NOT_PRICED_BY_TOKEN = "moderation endpoints are not priced by token"


@dataclass
class StageCoverage:
    """One stage of the judging: its model, protocol, and the metrics it covers."""

    judge: str
    protocol: str
    covers: list[str] = field(default_factory=list)
    uncovered: list[str] = field(default_factory=list)


def as_guard(judge: Any) -> GuardJudge | None:
    """``judge`` when it is a guard judge (``judge_protocol`` not ``rubric``), else None."""
    return judge if isinstance(judge, GuardJudge) else None


def guard_requests(guard: GuardJudge, prompts: Sequence[JudgePrompt],
                   rubrics: Mapping[str, MetricRubric]) -> list[GuardRequest]:
    """The requests ``guard`` sends for one case's rendered ``prompts`` (one prompt
    per message, or one per metric), in the order :class:`GuardJudge` sends them:
    per covered metric for a per-metric protocol, else one per prompt. A prompt
    with nothing covered, or no output to judge, sends nothing."""
    requests: list[GuardRequest] = []
    protocol, builtin = guard.protocol, guard.builtin_criteria
    for prompt in prompts:
        covered, _ = guard.covered(prompt.metrics)
        if not covered:
            continue
        try:
            source = guard_input(prompt)
        except GuardAnswerError:  # the judge fails it before any call
            continue
        if not protocol.per_metric:
            requests.append(protocol.request(source))
            continue
        requests.extend(protocol.request(source, rubrics.get(m), builtin.get(m))
                        for m in covered)
    return requests


def stage_coverage(first: Any, protocol: str, metrics: Sequence[str], *,
                   escalation_model: str | None = None) -> list[StageCoverage]:
    """Per stage, the ``metrics`` it covers and those it does not: a guard first
    stage by its :meth:`~GuardJudge.covered`; a rubric judge, and the escalation
    judge (always a rubric judge), cover every metric."""
    names = list(metrics)
    guard = as_guard(first)
    covers, uncovered = guard.covered(names) if guard is not None else (tuple(names), ())
    stages = [StageCoverage(first.model, protocol, list(covers), list(uncovered))]
    if escalation_model:
        stages.append(StageCoverage(escalation_model, "rubric", names, []))
    return stages
