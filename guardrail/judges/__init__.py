"""Guard models and moderation endpoints as judges (issue 32, first layer).

A guard answers in its own format — Llama Guard's ``unsafe`` + ``S10``,
Granite Guardian's ``Yes``, Qwen3Guard's ``Safety: Controversial``, a policy
model's ``{"violation": 1}``, a moderation endpoint's scores — not the rubric
judge's JSON. This package asks each in its model card's format and turns the
answer into the rubric judge's reply types, metric by metric::

    from guardrail.judges import GuardJudge
    judge = GuardJudge(settings.judge, "qwen3guard")
    group = await judge.judge_case(case, evaluator.base_metrics)
    judge.describe(["bias", "toxicity", "pii"])      # what this guard covers

- :mod:`~guardrail.judges.protocols`: one module per protocol (request, parse).
- :mod:`~guardrail.judges.categories`: guard categories → metrics, from
  ``rubrics/guards/<protocol>.yaml``.
- :mod:`~guardrail.judges.guard`: :class:`GuardJudge`.
- :mod:`~guardrail.judges.transport`: the transports with request-body
  fields, and the ``/moderations`` transport.
"""

from __future__ import annotations

from .categories import (CategoryMap, CategoryMapError, MetricVerdict, guard_map_dir,
                         load_category_map)
from .guard import GuardGroupReply, GuardJudge, GuardReply, severity_from_probability
from .protocols import (PROTOCOLS, GuardAnswerError, GuardCategory, GuardCoverageError,
                        GuardInput, GuardProtocol, GuardRequest, GuardVerdict, LlamaGuard,
                        Moderation, Policy, Qwen3Guard, YesNo, make_protocol)
from .transport import ModerationTransport, extra_body, make_guard_transport

__all__ = ["GuardJudge", "GuardReply", "GuardGroupReply", "severity_from_probability",
           "CategoryMap", "CategoryMapError", "MetricVerdict", "load_category_map",
           "guard_map_dir", "PROTOCOLS", "make_protocol", "GuardProtocol", "GuardVerdict",
           "GuardCategory", "GuardRequest", "GuardInput", "GuardAnswerError",
           "GuardCoverageError", "LlamaGuard", "YesNo", "Qwen3Guard", "Policy", "Moderation",
           "ModerationTransport", "extra_body", "make_guard_transport"]
