"""``run --batch-api``: a file of cases judged through the provider's batch API.

Same judge, same prompts, same parsing and the same output files as
:func:`guardrail.batch.run.run_batch`; only the transport differs (every call a
line of a batch, see :mod:`~guardrail.batch_api.collector`) and the price
(the batch price, :func:`batch_prices`). An ``anthropic/`` judge goes through
Anthropic's Message Batches (:mod:`~guardrail.batch_api.anthropic`), any other
through the OpenAI-compatible batch API (:func:`batch_endpoint`)::

    summary, stats = await run_batch_api(cases, settings=settings, output_dir=folder,
                                         state_path=folder / STATE_FILE, say=print)
    stats.requests, stats.submitted, stats.resumed   # calls, new chunks, resumed chunks
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..providers.litellm import price_tokens
from ..providers.price_map import price_entry
from .run import BatchSummary, run_batch
from ..errors import ConfigError
from ..formats.reader import InputProblem
from ..judges.llm import LLMJudge
from ..judging.models import Case
from ..config.settings import Settings
from ..judges.settings import JudgeSettings
from ..batch_api.api import BatchAPI, OpenAIBatches
from ..batch_api.client import BatchClient
from ..batch_api.collector import BatchCollector, BatchTransport, Say
from ..batch_api.settings import BatchApiSettings
from ..batch_api.state import BatchState

__all__ = ["run_batch_api", "batch_settings", "batch_prices", "batch_endpoint", "batch_judge",
           "BatchRunStats", "Endpoint", "STATE_FILE", "OPENAI_API_BASE", "PROVIDER_LIMITS"]

#: The state file's name inside ``--output-dir`` unless ``--batch-state`` names one.
STATE_FILE = ".batch-api-state.json"
OPENAI_API_BASE = "https://api.openai.com/v1"
#: How long one call may wait for its batch: past OpenAI's 24 h window, so the
#: batch's own end (completed, expired) is what ends the wait.
CALL_WAIT_SECONDS = 3 * 24 * 3600.0
#: The judge's limit on calls in flight: in a batch every call is in flight.
IN_FLIGHT = 1_000_000
#: (batch_max_requests, batch_max_bytes) where a provider's limits differ from
#: the defaults (OpenAI's); a value the user set wins. Anthropic takes 100,000
#: requests or 256 MB per batch; the bytes leave a margin for the JSON around the lines.
PROVIDER_LIMITS = {"anthropic": (100_000, 250_000_000)}


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
    return settings.model_copy(update={"judge": judge.model_copy(update=changes),
                                       "batch_api": _limits(settings)})


def _limits(settings: Settings) -> BatchApiSettings:
    """``batch_api`` with the provider's chunk limits where the user set none."""
    batch = settings.batch_api
    limits = PROVIDER_LIMITS.get(_provider(settings.judge.model))
    if limits is None:
        return batch
    return batch.model_copy(update={name: value for name, value in
                                    zip(("max_requests", "max_bytes"), limits)
                                    if name not in batch.model_fields_set})


def _provider(model: str) -> str:
    return model.partition("/")[0] if "/" in model else "openai"


@dataclass(frozen=True)
class Endpoint:
    """Where the batch API is: ``provider`` "anthropic" (Message Batches) or
    "openai" (any OpenAI-compatible files and batches API)."""

    provider: str
    api_base: str
    key: str | None = field(default=None, repr=False)


def batch_endpoint(judge: JudgeSettings) -> Endpoint:
    """The batch API of the judge: Anthropic's for an ``anthropic/`` model (at
    ``judge_api_base`` if set), else the OpenAI-compatible one at
    ``judge_api_base``, else OpenAI's."""
    if judge.protocol != "rubric":
        raise ConfigError(f"--batch-api takes the rubric judge, not judge_protocol="
                          f"{judge.protocol}")
    provider = _provider(judge.model)
    secret = judge.api_key.get_secret_value() if judge.api_key else None
    if provider == "anthropic":
        from ..batch_api.anthropic import ANTHROPIC_API_BASE, messages_root

        return Endpoint("anthropic", messages_root(judge.api_base or ANTHROPIC_API_BASE),
                        secret or os.environ.get("ANTHROPIC_API_KEY"))
    if judge.api_base is None and provider != "openai":
        raise ConfigError(f"--batch-api speaks OpenAI's batch API and Anthropic's Message "
                          f"Batches; {judge.model!r} needs judge_api_base pointing at an "
                          "OpenAI-compatible one")
    return Endpoint("openai", judge.api_base or OPENAI_API_BASE,
                    secret or os.environ.get("OPENAI_API_KEY"))


def batch_judge(settings: Settings, state_path: Path, say: Say | None = None,
                ) -> tuple[Settings, LLMJudge, BatchCollector]:
    """The settings a batch run judges with, its judge and the judge's collector
    (whose ``state`` is read from ``state_path``); closing the judge closes both."""
    endpoint = batch_endpoint(settings.judge)
    settings = batch_settings(settings)
    state = BatchState.open(state_path, api_base=endpoint.api_base, model=settings.judge.model)
    collector = BatchCollector(_open_api(endpoint, settings, state, say), state,
                               settings=settings.batch_api, say=say)
    return settings, LLMJudge(settings.judge, transport=BatchTransport(settings.judge,
                                                                      collector)), collector


def _open_api(endpoint: Endpoint, settings: Settings, state: BatchState,
              say: Say | None) -> BatchAPI:
    if endpoint.provider == "anthropic":
        from ..batch_api.anthropic import MessageBatchClient, MessageBatches

        # Staged create requests live beside the state file (see the anthropic module).
        spool = None if state.path is None else state.path.with_name(state.path.name + ".staged")
        return MessageBatches(MessageBatchClient(endpoint.api_base, api_key=endpoint.key),
                              spool=spool, say=say)
    return OpenAIBatches(BatchClient(endpoint.api_base, api_key=endpoint.key),
                         completion_window=settings.batch_api.completion_window)


async def run_batch_api(cases: list[tuple[str, Case]], *, settings: Settings, output_dir: Path,
                        report: str = "redteam", problems: list[InputProblem] | None = None,
                        state_path: Path | None = None, say: Say | None = None,
                        progress: Callable[[int, int, int], None] | None = None,
                        ) -> tuple[BatchSummary, BatchRunStats]:
    """Judge ``cases`` through the batch API and write what ``run_batch`` writes.
    ``state_path`` (default: ``output_dir/.batch-api-state.json``) is what a
    rerun resumes from."""
    state_path = state_path or output_dir / STATE_FILE
    settings, judge, collector = batch_judge(settings, state_path, say)
    # run_batch closes the judge, which closes the collector and its client.
    summary = await run_batch(cases, settings=settings, output_dir=output_dir, report=report,
                              problems=problems, judge=judge, progress=progress)
    return summary, BatchRunStats(requests=collector.requests, submitted=collector.submitted,
                                  resumed=collector.resumed, state_path=str(state_path))
