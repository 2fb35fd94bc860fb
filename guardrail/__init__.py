"""guardrail: streaming safety scoring of LLM outputs with rubric-based LLM judges.

The judging core knows nothing about Kafka::

    from guardrail import Case, build_evaluator, load_settings

    settings = load_settings(judge_model="openai/gpt-4o-mini")
    evaluator = build_evaluator(settings)            # the configured judge + a cache
    metrics = await evaluator.evaluate(Case(case_id="c1", output="Have a nice day"))
    print(metrics.to_json())

The package is a stack of wings (subpackages). A wing imports only the wings of
lower layers and the root's helpers; an exception is named, with its reason, in
the importing wing's docstring (``tests/test_layers.py`` keeps both true):

====  ===========  ==========================================================================
0     (root)       ``errors`` (the exceptions), and private helpers every wing may use:
                   ``_tasks``, ``_processes``, ``_event_time``, ``_group_config``, ``_lazy``
1     providers    model providers: the litellm boundary, the bundled price map, tokens
1     kafka        Kafka I/O that is not Faust: brokers, clients, topics, topic readers
1     judging      the contract's core: a case, its rubrics and a judge → ``RedteamMetrics``
2     judges       who answers: the LLM judge over litellm or HTTP, guard models, cascade
2     formats      input records → cases: case JSON, OTLP spans, chat logs, mappings, files
2     local        the local judge on loopback: a GGUF model, and the stand-in rule judge
3     assembly     things judged as a whole: agent runs from spans, sessions from turns
3     review       humans in the loop: the review queue, labels, the review page
3     batch_api    providers' batch APIs, judging at the batch price
4     stream       the stream contract: records in, results, judgments, DLQ out; windows
5     gate         gate mode's decisions: approved or held, in order, kept until committed
6     config       the one ``Settings``, gathered from every wing's group
7     batch        judging files: ``run``, ``estimate``, ``run --batch-api``
7     calibration  how far to trust a judge: labelled cases, agreement, thresholds
8     replay       re-judging a time range of a topic
8     agents       the Faust worker: judging, counting and assembling agents, web pages
8     demo         the whole product in one command
9     cli          the ``guardrail`` command
9     reference    the docs' reference pages, generated from the code
====  ===========  ==========================================================================
"""

from .judging.cache import JudgmentCache, MemoryCache, SqliteCache
from .errors import (ConfigError, GuardrailError, InputError, JudgeAnswerError, JudgeError,
                     JudgeUnavailable, RubricError)
from .judges.build import build_evaluator
from .judging.evaluate import Evaluator, open_cache, severity_to_score
from .judges.llm import LLMJudge, LiteLLMJudge
from .judging.judge import Judge, JudgeReply, Usage
from .judging.models import (CATEGORY, PASS_THRESHOLD, Case, CostEstimate, JudgeVerdict,
                             MetricResult, MetricRubric, RedteamConfig, RedteamMetrics)
from .judging.prompts import JudgePrompt, render_prompt
from .judging.rubrics import default_metrics, load_rubric_dir, merge_metrics
from .config.settings import Settings, load_settings
from .judges.settings import JudgeSettings
from .judging.settings import EvaluationSettings
from .kafka.settings import KafkaSettings
from .stream.settings import AlertRule, WindowSettings, WorkerSettings
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
