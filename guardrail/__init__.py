"""guardrail: streaming safety scoring of LLM outputs with rubric-based LLM judges.

The judging core knows nothing about Kafka::

    from guardrail import Case, build_evaluator, load_settings

    settings = load_settings(judge_model="openai/gpt-4o-mini")
    evaluator = build_evaluator(settings)            # the configured judge + a cache
    metrics = await evaluator.evaluate(Case(case_id="c1", output="Have a nice day"))
    print(metrics.to_json())

The streaming worker lives in :mod:`guardrail.agents`.
"""

from .judging.cache import JudgmentCache, MemoryCache, SqliteCache
from .errors import (ConfigError, GuardrailError, InputError, JudgeAnswerError, JudgeError,
                     JudgeUnavailable, RubricError)
from .judging.evaluate import Evaluator, build_evaluator, open_cache, severity_to_score
from .judges.llm import Judge, JudgeReply, LiteLLMJudge, LLMJudge, Usage
from .judging.models import (CATEGORY, PASS_THRESHOLD, Case, CostEstimate, JudgeVerdict, MetricResult,
                     MetricRubric, RedteamConfig, RedteamMetrics)
from .judging.prompts import JudgePrompt, render_prompt
from .judging.rubrics import default_metrics, load_rubric_dir, merge_metrics
from .config.settings import (AlertRule, EvaluationSettings, JudgeSettings, KafkaSettings, Settings,
                       WindowSettings, WorkerSettings, load_settings)
from .judges.transports import Transport, make_transport

__all__ = [
    "AlertRule", "CATEGORY", "Case", "ConfigError", "CostEstimate", "EvaluationSettings",
    "Evaluator", "GuardrailError", "InputError", "Judge", "JudgeAnswerError", "JudgeError",
    "JudgePrompt", "JudgeReply", "JudgeSettings", "JudgeUnavailable", "JudgeVerdict",
    "JudgmentCache", "KafkaSettings", "LLMJudge", "LiteLLMJudge", "MemoryCache", "MetricResult",
    "MetricRubric", "PASS_THRESHOLD", "RedteamConfig", "RedteamMetrics", "RubricError",
    "Settings", "SqliteCache", "Transport", "Usage", "WindowSettings", "WorkerSettings",
    "build_evaluator", "default_metrics", "load_rubric_dir", "load_settings", "make_transport",
    "merge_metrics", "open_cache", "render_prompt", "severity_to_score",
]

__version__ = "0.1.0"
