"""Who answers: the rubric judge and guard models, in one room, each meeting the
:class:`~guardrail.judging.judge.Judge` protocol the evaluator asks.

The rubric judge sends the rubric prompt and reads a JSON verdict; a guard
model answers in its own format — Llama Guard's ``unsafe`` + ``S10``, Granite
Guardian's ``Yes``, Qwen3Guard's ``Safety: Controversial``, a policy model's
``{"violation": 1}``, a moderation endpoint's scores — which this package turns
into the rubric judge's reply types, metric by metric::

    from guardrail.judges import LLMJudge, GuardJudge, build_evaluator
    judge = LLMJudge(settings.judge)                  # judge_protocol: rubric
    guard = GuardJudge(settings.judge, "qwen3guard")  # or a guard model
    group = await guard.judge_case(case, evaluator.base_metrics)
    evaluator = build_evaluator(settings)             # the configured judge, cascade, cache

- :mod:`~guardrail.judges.settings`: the ``judge`` and ``escalation`` settings groups.
- :mod:`~guardrail.judges.build`: the configured judge (:func:`make_judge`) and an
  evaluator around it (:func:`build_evaluator`).
- :mod:`~guardrail.judges.llm`: :class:`LLMJudge` (retries, timeouts, repair,
  log-probabilities); :mod:`~guardrail.judges.transports`: litellm or direct HTTP
  (:mod:`~guardrail.judges.http1`) to an OpenAI-compatible server;
  :mod:`~guardrail.judges.answers`: answers read with their token log-probabilities.
- :mod:`~guardrail.judges.cascade`: a second judge for the unsure (or flagged,
  or uncovered) judgments.
- :mod:`~guardrail.judges.protocols`: one module per guard protocol (request,
  parse); :mod:`~guardrail.judges.categories`: guard categories → metrics, from
  ``rubrics/guards/<protocol>.yaml``; :mod:`~guardrail.judges.guard`:
  :class:`GuardJudge`; :mod:`~guardrail.judges.guard_transport`: request-body
  fields and the ``/moderations`` transport; :mod:`~guardrail.judges.micro_batch`:
  single calls sent as a few calls of many items.

It imports the judging core and the providers, never Kafka or the stream. Names
are imported on first use: the settings every command reads must not load the
guard protocols.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_HOMES = {
    "JudgeSettings": ".settings", "EscalationSettings": ".settings",
    "build_evaluator": ".build", "make_judge": ".build", "EvaluatorGroups": ".build",
    "LLMJudge": ".llm", "LiteLLMJudge": ".llm",
    "Judge": "guardrail.judging.judge", "JudgeReply": "guardrail.judging.judge",
    "GroupReply": "guardrail.judging.judge", "Usage": "guardrail.judging.judge",
    "Transport": ".transports", "make_transport": ".transports",
    "Cascade": ".cascade", "escalation_judge_settings": ".cascade",
    "GuardJudge": ".guard", "GuardReply": ".guard", "GuardGroupReply": ".guard",
    "severity_from_probability": ".guard", "guard_input": ".guard",
    "CategoryMap": ".categories", "CategoryMapError": ".categories",
    "MetricVerdict": ".categories", "load_category_map": ".categories",
    "guard_map_dir": ".categories",
    "PROTOCOLS": ".protocols", "make_protocol": ".protocols", "GuardProtocol": ".protocols",
    "GuardVerdict": ".protocols", "GuardCategory": ".protocols", "GuardRequest": ".protocols",
    "GuardInput": ".protocols", "GuardAnswerError": ".protocols",
    "GuardCoverageError": ".protocols", "LlamaGuard": ".protocols", "YesNo": ".protocols",
    "Qwen3Guard": ".protocols", "Policy": ".protocols", "Moderation": ".protocols",
    "ModerationTransport": ".guard_transport", "extra_body": ".guard_transport",
    "make_guard_transport": ".guard_transport",
}

__all__ = list(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)
