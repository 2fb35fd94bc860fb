"""A cascade of two judges: the first judges everything, a second decides the unsure.

A metric whose first judgment has P(UNSAFE) inside ``escalate_band`` (inclusive)
is judged again by the escalation judge, and that verdict stands. The first
judge can be the local model or a small hosted one; the strong judge is paid
only where the first is unsure::

    settings = load_settings(judge_model="openai/local-judge", judge_api_base=local,
                             escalate_model="openai/gpt-4o", escalate_band=(0.2, 0.8))
    evaluator = build_evaluator(settings)        # wires a Cascade in
    metrics = await evaluator.evaluate(case)
    metrics.metrics[0].judge_model               # the model whose verdict stands
    metrics.to_json()                            # result[0].judge_model too, cascade only

The escalation judge is an ``LLMJudge`` with the judge settings except model,
api_base and key (and prices: the ``judge_*_cost_per_token`` overrides describe
the first model; the escalation model is priced from litellm's cost map, an
unknown price staying unknown, never $0). It shares the judgment cache, keyed
by its own model, so first-judge and escalation judgments never mix.

Decisions, each one a safety team can defend:

- Out of band (or no probability), the first verdict stands.
- A first judgment without P(UNSAFE) (a provider without log-probabilities)
  cannot be placed in the band: it stands, and the log says so once.
- An escalation that fails (outage, timeout, invalid answer) leaves the first
  verdict standing, recorded as not escalated (``judge_model`` is the first
  model, ``escalation_error`` says why) and logged; its spend still counts.
- A misconfigured escalation judge (key refused, unknown model) raises
  :class:`~guardrail.errors.JudgeConfigError` naming the ``escalate_*``
  setting: every escalation would fail alike.
- Tokens and cost of a metric add both judges' calls.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from .._tasks import gather_or_cancel
from ..errors import ConfigError, JudgeConfigError
from ..judging.models import Case, MetricResult, MetricRubric
from .settings import EscalationSettings

__all__ = ["EscalationSettings", "Cascade", "escalation_judge_settings"]

log = logging.getLogger("guardrail.cascade")  # the name users configure logging by


def escalation_judge_settings(judge: Any, escalation: EscalationSettings) -> Any:
    """The judge settings (a ``JudgeSettings``) for the escalation judge."""
    return judge.model_copy(update={
        "model": escalation.model, "api_base": escalation.api_base,
        "api_key": escalation.api_key,
        "input_cost_per_token": None, "output_cost_per_token": None,
        # The second stage is a rubric judge: violations and evidence for what it sees.
        "protocol": "rubric", "protocol_options": {}, "guard_categories": None})


class _Judging(Protocol):
    """What the cascade needs of the escalation judge's ``Evaluator``."""

    judge: Any

    async def evaluate_metric(self, case: Case, rubric: MetricRubric,
                              config: Any) -> MetricResult: ...

    async def evaluate_together(self, case: Case, metrics: tuple[MetricRubric, ...],
                                config: Any) -> list[MetricResult]: ...


class Cascade:
    """Review a case's first judgments; see the module text for the rules."""

    def __init__(self, escalation: _Judging, *, first_model: str,
                 band: tuple[float, float] = (0.2, 0.8),
                 on: Literal["unsure", "unsafe", "both"] = "unsure") -> None:
        self.escalation = escalation
        self.model = escalation.judge.model
        self.first_model = first_model
        self.band, self.on = band, on
        if self.model == first_model:
            # The cache tells the two judges' judgments apart by model name.
            raise ConfigError(f"escalate_model must differ from judge_model (both "
                              f"{first_model!r}); a local server ignores the name, so any "
                              "distinct name will do")
        self._said_no_probability = False

    async def aclose(self) -> None:
        """Release the escalation judge's connections (the cache is the caller's)."""
        close = getattr(self.escalation.judge, "aclose", None)
        if close is not None:
            await close()

    def in_band(self, result: MetricResult) -> bool:
        """A valid first judgment whose P(UNSAFE) lies in the band, ends included."""
        p, (low, high) = result.probability_unsafe, self.band
        return result.error is None and p is not None and low <= p <= high

    def escalates(self, result: MetricResult) -> bool:
        """Is this first judgment judged again (``escalate_on``; uncovered always)?"""
        if result.uncovered:
            return True
        unsure = self.in_band(result) or (result.error is None and result.unsure)
        unsafe = result.error is None and result.unsafe
        return {"unsure": unsure, "unsafe": unsafe, "both": unsure or unsafe}[self.on]

    async def review(self, case: Case, config: Any, results: Sequence[MetricResult], *,
                     per_message: bool) -> list[MetricResult]:
        """The final results: the escalated ones judged again, every verdict
        stamped with the model that decided it."""
        firsts = [_decided_by(r, self.first_model) for r in results]
        self._say_once_if_no_probability(firsts)
        rubrics = {m.name: m for m in config.metrics}
        chosen = tuple(rubrics[r.name] for r in firsts if self.escalates(r))
        second = await self._escalate(case, chosen, config, per_message) if chosen else {}
        return [_stamped(self._merge(r, second[r.name]) if r.name in second else r)
                for r in firsts]

    async def _escalate(self, case: Case, metrics: tuple[MetricRubric, ...], config: Any,
                        per_message: bool) -> dict[str, MetricResult]:
        """The escalation judge's results: one call for all ``metrics`` with
        ``per_message``, one each otherwise; a failure is a result's error."""
        try:
            if per_message:
                got = await self.escalation.evaluate_together(case, metrics, config)
            else:
                got = await gather_or_cancel(*(self.escalation.evaluate_metric(case, m, config)
                                               for m in metrics))
        except JudgeConfigError as exc:
            raise _as_escalation_setting(exc) from None
        except Exception as exc:  # a bug must not lose the first verdicts
            message = f"internal error: {type(exc).__name__}: {exc}"
            return {m.name: MetricResult(name=m.name, score=None, error=message) for m in metrics}
        return {r.name: r for r in got}

    def _merge(self, first: MetricResult, second: MetricResult) -> MetricResult:
        """The escalation verdict if there is one, else the first; spend adds up."""
        cost = (None if first.cost is None or second.cost is None
                else first.cost + second.cost)
        spent = {"input_tokens": first.input_tokens + second.input_tokens,
                 "output_tokens": first.output_tokens + second.output_tokens,
                 "cached_tokens": first.cached_tokens + second.cached_tokens, "cost": cost}
        if second.error is None:
            return second.model_copy(update={**spent, "judge_model": self.model,
                                             "cached": first.cached and second.cached})
        log.warning("escalation of %s to %s failed; the first judge's verdict stands: %s",
                    first.name, self.model, second.error)
        return first.model_copy(update={**spent, "escalation_error": second.error})

    def _say_once_if_no_probability(self, results: Sequence[MetricResult]) -> None:
        if self._said_no_probability:
            return
        if any(r.error is None and r.probability_unsafe is None for r in results):
            self._said_no_probability = True
            log.warning("the first judge %s gave a verdict without P(UNSAFE) (no token "
                        "log-probabilities from its provider): such verdicts stand and are "
                        "not escalated to %s", self.first_model, self.model)


def _decided_by(result: MetricResult, model: str) -> MetricResult:
    if result.error is not None or result.judge_model is not None:
        return result
    return result.model_copy(update={"judge_model": model})


def _stamped(result: MetricResult) -> MetricResult:
    """``result[0].judge_model``: in the JSON, only ever with a cascade."""
    if not result.result:
        return result
    first = result.result[0].model_copy(update={"judge_model": result.judge_model})
    return result.model_copy(update={"result": [first, *result.result[1:]]})


def _as_escalation_setting(exc: JudgeConfigError) -> JudgeConfigError:
    """The judge names ``judge_*`` settings; for the escalation judge they are ``escalate_*``."""
    setting = exc.setting.replace("judge_", "escalate_", 1)
    message = (str(exc).replace(exc.setting, setting)
               .replace(exc.setting.upper(), setting.upper())
               .replace("judge configuration error", "escalation judge configuration error", 1))
    return JudgeConfigError(message, setting=setting)
