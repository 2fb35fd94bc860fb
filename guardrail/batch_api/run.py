"""``run --batch-api``: a file of cases judged through the provider's batch API.

Same judge, same prompts, same parsing and the same output files as
:func:`guardrail.batch.run_batch`; only the transport differs (every call a
line of a batch, see :mod:`~guardrail.batch_api.collector`) and the price
(the batch price, :func:`batch_prices`)::

    summary, stats = await run_batch_api(cases, settings=settings, output_dir=folder,
                                         state_path=folder / STATE_FILE, say=print)
    stats.requests, stats.submitted, stats.resumed   # calls, new chunks, resumed chunks
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .._litellm import price_tokens
from .._price_map import price_entry
from ..batch import BatchSummary, run_batch
from ..errors import ConfigError
from ..inputs import InputProblem
from ..judges.llm import LLMJudge
from ..models import Case
from ..settings import JudgeSettings, Settings
from .client import BatchClient
from .collector import BatchCollector, BatchTransport, Say
from .state import BatchState

__all__ = ["run_batch_api", "batch_settings", "batch_prices", "batch_endpoint", "BatchRunStats",
           "STATE_FILE", "OPENAI_API_BASE"]

#: The state file's name inside ``--output-dir`` unless ``--batch-state`` names one.
STATE_FILE = ".batch-api-state.json"
OPENAI_API_BASE = "https://api.openai.com/v1"
#: How long one call may wait for its batch: past OpenAI's 24 h window, so the
#: batch's own end (completed, expired) is what ends the wait.
CALL_WAIT_SECONDS = 3 * 24 * 3600.0
#: The judge's limit on calls in flight: in a batch every call is in flight.
IN_FLIGHT = 1_000_000


@dataclass
class BatchRunStats:
    requests: int = 0
    submitted: int = 0
    resumed: int = 0
    state_path: str | None = None


def batch_prices(judge: JudgeSettings, *, discount: float) -> tuple[float, float] | None:
    """USD per (input, output) token at the batch price: the price map's
    ``*_cost_per_token_batches``, else ``discount`` times the normal price
    (``judge_*_cost_per_token`` when set); None when no price is known."""
    if judge.input_cost_per_token is not None and judge.output_cost_per_token is not None:
        return judge.input_cost_per_token * discount, judge.output_cost_per_token * discount
    entry = price_entry(judge.model) or {}
    unit_in = entry.get("input_cost_per_token_batches")
    unit_out = entry.get("output_cost_per_token_batches")
    if isinstance(unit_in, (int, float)) and isinstance(unit_out, (int, float)):
        return float(unit_in), float(unit_out)
    normal_in, normal_out = price_tokens(judge.model, 1, 0), price_tokens(judge.model, 0, 1)
    if normal_in is None or normal_out is None:
        return None
    return normal_in * discount, normal_out * discount


def batch_settings(settings: Settings) -> Settings:
    """The settings a batch run judges with: the batch price, every call in
    flight at once, a wait as long as a batch, no retry of a batch line."""
    if settings.escalation.model:
        # The escalation judge would inherit a batch line's wait and no retries.
        raise ConfigError("--batch-api does not take a cascade yet: unset escalate_model")
    judge = settings.judge
    prices = batch_prices(judge, discount=settings.batch_api.discount)
    changes: dict[str, object] = {"concurrency": IN_FLIGHT, "timeout": CALL_WAIT_SECONDS,
                                  "max_retries": 0}
    if prices is not None:
        changes["input_cost_per_token"], changes["output_cost_per_token"] = prices
    return settings.model_copy(update={"judge": judge.model_copy(update=changes)})


def batch_endpoint(judge: JudgeSettings) -> tuple[str, str | None]:
    """(API base, key) of the batch API: the judge's own, else OpenAI's."""
    if judge.protocol != "rubric":
        raise ConfigError(f"--batch-api takes the rubric judge, not judge_protocol="
                          f"{judge.protocol}")
    provider = judge.model.partition("/")[0] if "/" in judge.model else "openai"
    if judge.api_base is None and provider != "openai":
        raise ConfigError(f"--batch-api speaks the OpenAI-compatible files and batches API; "
                          f"{judge.model!r} needs judge_api_base pointing at one (Anthropic "
                          "Message Batches are not supported yet)")
    key = judge.api_key.get_secret_value() if judge.api_key else os.environ.get("OPENAI_API_KEY")
    return (judge.api_base or OPENAI_API_BASE), key


async def run_batch_api(cases: list[tuple[str, Case]], *, settings: Settings, output_dir: Path,
                        report: str = "redteam", problems: list[InputProblem] | None = None,
                        state_path: Path | None = None, say: Say | None = None,
                        progress: Callable[[int, int, int], None] | None = None,
                        ) -> tuple[BatchSummary, BatchRunStats]:
    """Judge ``cases`` through the batch API and write what ``run_batch`` writes.
    ``state_path`` (default: ``output_dir/.batch-api-state.json``) is what a
    rerun resumes from."""
    api_base, key = batch_endpoint(settings.judge)
    settings = batch_settings(settings)
    state_path = state_path or output_dir / STATE_FILE
    state = BatchState.open(state_path, api_base=api_base, model=settings.judge.model)
    collector = BatchCollector(BatchClient(api_base, api_key=key), state,
                               settings=settings.batch_api, say=say)
    judge = LLMJudge(settings.judge, transport=BatchTransport(settings.judge, collector))
    # run_batch closes the judge, which closes the collector and its client.
    summary = await run_batch(cases, settings=settings, output_dir=output_dir, report=report,
                              problems=problems, judge=judge, progress=progress)
    return summary, BatchRunStats(requests=collector.requests, submitted=collector.submitted,
                                  resumed=collector.resumed, state_path=str(state_path))
