"""The ``evaluation`` settings group (flat names as written: ``rubric_dir``,
``redteam``, ``cache_path``, ``judge_calls``, ``verdict_thresholds``): what is judged
and how, and what is remembered; part of :class:`guardrail.config.Settings`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from .._group_config import GROUP_CONFIG
from .models import RedteamConfig

__all__ = ["EvaluationSettings", "DEFAULT_CACHE_PATH"]

#: Where ``replay`` keeps judgments when ``cache_path`` is unset, so a second
#: replay of the same range pays the judge nothing.
DEFAULT_CACHE_PATH = Path("~/.cache/guardrail/judgments.sqlite")


class EvaluationSettings(BaseModel):
    """What is judged and how (rubrics, redteam defaults, calls, thresholds), and
    what is remembered (the judgment cache)."""

    model_config = GROUP_CONFIG

    rubric_dir: Path | None = None
    """Folder of rubric files (YAML or JSON, one metric each) that add metrics to the
    shipped ones or replace them by name. Unset: the shipped rubrics only."""
    redteam: RedteamConfig = RedteamConfig()
    """The deployment's ``redteam`` block: ``scoring_mode`` (``binary_yes_no`` or
    ``scale_1_5``), ``include_reasoning``, ``include_probability`` and ``metrics``
    (rubrics inline, added or replacing by name). A message's own block wins key
    by key, its metrics merged on top."""
    cache_path: Path | None = None
    """SQLite file of the judgment cache, for every command: a text judged once is not
    paid for again. Unset: an in-memory cache per process, except for ``replay``,
    which keeps ``~/.cache/guardrail/judgments.sqlite``."""
    judge_calls: Literal["per_message", "per_metric"] = "per_message"
    """``per_message``: one judge call per message answers every metric (one prompt
    with all rubrics); ``per_metric``: one call per metric. Each metric gets its
    own result either way."""
    verdict_thresholds: dict[str, float] = Field(default_factory=dict)
    """Per metric name, the P(UNSAFE) in (0, 1] from which its verdict is UNSAFE;
    other metrics use 0.5. Needs log-probabilities (``judge_logprobs``) and
    applies to cached judgments too. ``guardrail calibrate`` recommends them."""

    @model_validator(mode="after")
    def _thresholds_are_probabilities(self) -> EvaluationSettings:
        for metric, threshold in self.verdict_thresholds.items():
            if not 0.0 < threshold <= 1.0:
                raise ValueError(f"verdict_thresholds.{metric} must be in (0, 1], got {threshold}")
        return self
