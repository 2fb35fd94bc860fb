"""How a judge is asked and answered: the rubric judge and guard models, in one room.

The rubric judge sends the rubric prompt and reads a JSON verdict; a guard
model answers in its own format — Llama Guard's ``unsafe`` + ``S10``, Granite
Guardian's ``Yes``, Qwen3Guard's ``Safety: Controversial``, a policy model's
``{"violation": 1}``, a moderation endpoint's scores — which this package turns
into the rubric judge's reply types, metric by metric::

    from guardrail.judges import LLMJudge, GuardJudge
    judge = LLMJudge(settings.judge)                  # judge_protocol: rubric
    guard = GuardJudge(settings.judge, "qwen3guard")  # or a guard model
    group = await guard.judge_case(case, evaluator.base_metrics)
    guard.describe(["bias", "toxicity", "pii"])       # what this guard covers

- :mod:`~guardrail.judges.llm`: the :class:`Judge` protocol, :class:`LLMJudge`
  (retries, timeouts, repair, log-probabilities) and its reply types.
- :mod:`~guardrail.judges.transports`: litellm or direct HTTP to an
  OpenAI-compatible server.
- :mod:`~guardrail.judging.probability`: P(UNSAFE) from token log-probabilities.
- :mod:`~guardrail.judges.cascade`: a second judge for the unsure (or flagged,
  or uncovered) judgments.
- :mod:`~guardrail.judges.protocols`: one module per guard protocol (request,
  parse); :mod:`~guardrail.judges.categories`: guard categories → metrics, from
  ``rubrics/guards/<protocol>.yaml``; :mod:`~guardrail.judges.guard`:
  :class:`GuardJudge`; :mod:`~guardrail.judges.guard_transport`: request-body
  fields and the ``/moderations`` transport.

Names are imported on first use: the settings import the cascade's settings
from here, and the judges import the settings.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "Judge": "llm", "LLMJudge": "llm", "LiteLLMJudge": "llm", "JudgeReply": "llm",
    "GroupReply": "llm", "Usage": "llm",
    "Transport": "transports", "make_transport": "transports",
    "Cascade": "cascade", "EscalationSettings": "cascade",
    "escalation_judge_settings": "cascade",
    "GuardJudge": "guard", "GuardReply": "guard", "GuardGroupReply": "guard",
    "severity_from_probability": "guard", "guard_input": "guard",
    "CategoryMap": "categories", "CategoryMapError": "categories",
    "MetricVerdict": "categories", "load_category_map": "categories",
    "guard_map_dir": "categories",
    "PROTOCOLS": "protocols", "make_protocol": "protocols", "GuardProtocol": "protocols",
    "GuardVerdict": "protocols", "GuardCategory": "protocols", "GuardRequest": "protocols",
    "GuardInput": "protocols", "GuardAnswerError": "protocols",
    "GuardCoverageError": "protocols", "LlamaGuard": "protocols", "YesNo": "protocols",
    "Qwen3Guard": "protocols", "Policy": "protocols", "Moderation": "protocols",
    "ModerationTransport": "guard_transport", "extra_body": "guard_transport",
    "make_guard_transport": "guard_transport",
}

__all__ = list(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{home}", __name__), name)
