"""The configured judge, and an evaluator around it: what the CLI, the worker and a
replay all start from::

    evaluator = build_evaluator(settings)        # the configured judge + the cache policy
    metrics = await evaluator.evaluate(Case(case_id="c1", output="Have a nice day"))
    await evaluator.aclose()

    judge = make_judge(settings.judge)           # the rubric judge, or a guard model

``settings`` is a :class:`guardrail.config.Settings`, or anything with its
``judge``, ``evaluation`` and ``escalation`` groups (:class:`EvaluatorGroups`).
"""

from __future__ import annotations

import logging
from typing import Protocol

from ..judging.evaluate import Evaluator, open_cache
from ..judging.judge import Judge
from ..judging.rubrics import merge_metrics
from ..judging.settings import EvaluationSettings
from .cascade import Cascade, escalation_judge_settings
from .llm import LLMJudge
from .settings import EscalationSettings, JudgeSettings

__all__ = ["build_evaluator", "make_judge", "EvaluatorGroups"]

log = logging.getLogger("guardrail.judge")


class EvaluatorGroups(Protocol):
    """The settings groups :func:`build_evaluator` reads."""

    @property
    def judge(self) -> JudgeSettings: ...
    @property
    def evaluation(self) -> EvaluationSettings: ...
    @property
    def escalation(self) -> EscalationSettings: ...


def build_evaluator(settings: EvaluatorGroups, *, judge: Judge | None = None,
                    persistent_cache: bool = False,
                    escalation_judge: Judge | None = None) -> Evaluator:
    """An :class:`Evaluator` with the configured judge (or ``judge``) and the
    cache :func:`open_cache` chooses; ``aclose()`` releases both. With
    ``escalate_model`` set, a :class:`~guardrail.judges.cascade.Cascade` to that judge
    (or ``escalation_judge``), sharing the cache."""
    first = judge or make_judge(settings.judge)
    cache = open_cache(settings.evaluation, persistent=persistent_cache)
    cascade = None
    if settings.escalation.model:
        second = escalation_judge or LLMJudge(
            escalation_judge_settings(settings.judge, settings.escalation))
        cascade = Cascade(Evaluator(second, evaluation=settings.evaluation, cache=cache),
                          first_model=first.model, band=settings.escalation.band,
                          on=settings.escalation.on)
    evaluator = Evaluator(first, evaluation=settings.evaluation, cache=cache, cascade=cascade)
    use_rubrics = getattr(first, "use_rubrics", None)
    if use_rubrics is not None:  # a guard: policies from the rubrics; say what it covers
        # The session rubrics too (a message's bias and toxicity win by name).
        use_rubrics(merge_metrics(evaluator.session_metrics, evaluator.run_metrics))
        covers = first.describe(m.name for m in evaluator.run_metrics)  # type: ignore[attr-defined]
        log.info("judge %s (%s): %s", first.model, settings.judge.protocol, covers)
    if cascade is not None:
        gets = "the metrics the first stage does not cover, and " if use_rubrics else ""
        log.info("escalation judge %s (rubric) covers every metric; it gets %sthe first "
                 "stage's verdicts that escalate_on=%s names", cascade.model, gets,
                 settings.escalation.on)
    return evaluator


def make_judge(settings: JudgeSettings) -> Judge:
    """The judge ``judge_protocol`` names: the rubric judge, or a guard model
    (:mod:`guardrail.judges`, loaded only when chosen)."""
    if settings.protocol == "rubric":
        return LLMJudge(settings)
    from .guard import GuardJudge

    return GuardJudge(settings, settings.protocol, options=settings.protocol_options,
                      categories=settings.guard_categories,
                      unsure_verdict="UNSAFE" if settings.qwen3guard_controversial == "unsafe"
                      else "SAFE")
