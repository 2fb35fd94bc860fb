"""The worker's judging path on the test's loop, with no broker: raw Kafka-shaped
records in (``MessageJudge.process``, as the worker's agent calls it), results out::

    results, judge = await judge_in_process(settings, [{"case_id": "c1", "output": "…"}])
    results["c1"]["metrics"]          # the result record, decoded, by case_id
    judge.telemetry.render()          # its /metrics page
"""

from __future__ import annotations

from typing import Any

import orjson

from guardrail.judges.build import build_evaluator
from guardrail.config.settings import Settings
from guardrail.stream.envelope import Source
from guardrail.stream.processing import MessageJudge, RawMessage

__all__ = ["judge_in_process"]


async def judge_in_process(settings: Settings, cases: list[dict[str, Any]],
                           ) -> tuple[dict[str, dict[str, Any]], MessageJudge]:
    """Judge ``cases`` as one batch from partition 0 of topic ``in``; the evaluator
    is closed after, the judge kept for its telemetry."""
    evaluator = build_evaluator(settings)
    judge = MessageJudge.from_settings(evaluator, settings)
    batch = [RawMessage(orjson.dumps(c), Source("in", 0, i)) for i, c in enumerate(cases)]
    try:
        records = await judge.process(batch)
    finally:
        await evaluator.aclose()
    decoded = (orjson.loads(o.value) for o in records if o.topic == settings.kafka.results_topic)
    return {r["case_id"]: r for r in decoded}, judge
