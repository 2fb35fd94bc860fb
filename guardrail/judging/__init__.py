"""The judging contract's core: a case, its metric set and a judge in, the
contract's ``RedteamMetrics`` out. Pure judging: no Kafka, no files but the rubrics
and the judgment cache, and no judge of its own (any :class:`Judge` answers)::

    from guardrail.judging import Case, Evaluator
    evaluator = Evaluator(judge, evaluation=settings.evaluation)   # judge: any Judge
    metrics = await evaluator.evaluate(Case(case_id="c1", output="Have a nice day"))
    metrics.to_json()      # the spec's JSON, field for field

- :mod:`.models` — the contract's records (``Case``, ``MetricRubric``, ``RedteamConfig``,
  ``MetricResult``, ``RedteamMetrics``); :mod:`.conversation` — chat messages into a
  case's judged fields; :mod:`.steps` and :mod:`.trajectory` — an agent run's steps as
  the fenced ``trajectory`` text.
- :mod:`.rubrics` — rubrics as data (``rubrics/``), merged by name; :mod:`.metric_sets`
  — which metrics a message, an agent run or a session is judged on.
- :mod:`.prompts` — rubrics and judged fields into judge messages; :mod:`.judge` — the
  :class:`Judge` protocol and its replies; :mod:`.parsing` — an answer validated or a
  precise error; :mod:`.probability` — P(UNSAFE) from token log-probabilities.
- :mod:`.verdicts` — severity → score, ``passed = score >= 0.6``, thresholds on
  P(UNSAFE); :mod:`.evaluate` — the :class:`Evaluator`; :mod:`.cache` — judgments
  never paid for twice; :mod:`.draws` — deterministic sampling draws.
- :mod:`.settings` — the ``evaluation`` settings group.

Bottom layer: it imports no other wing. The judges that answer live above it
(:mod:`guardrail.judges`), the records that carry results to Kafka further up
(:mod:`guardrail.stream`).
"""

from __future__ import annotations

from .cache import JudgmentCache, MemoryCache, SqliteCache
from .evaluate import Evaluator, open_cache
from .judge import GroupReply, Judge, JudgeReply, Usage
from .models import (CATEGORY, PASS_THRESHOLD, Case, CostEstimate, JudgeVerdict, MetricResult,
                     MetricRubric, RedteamConfig, RedteamMetrics)
from .prompts import JudgePrompt, render_prompt
from .rubrics import default_metrics, load_rubric_dir, merge_metrics
from .settings import EvaluationSettings
from .verdicts import severity_to_score

__all__ = ["Case", "MetricRubric", "RedteamConfig", "JudgeVerdict", "MetricResult",
           "CostEstimate", "RedteamMetrics", "CATEGORY", "PASS_THRESHOLD", "Judge",
           "JudgeReply", "GroupReply", "Usage", "JudgePrompt", "render_prompt", "Evaluator",
           "open_cache", "JudgmentCache", "MemoryCache", "SqliteCache", "default_metrics",
           "load_rubric_dir", "merge_metrics", "severity_to_score", "EvaluationSettings"]
