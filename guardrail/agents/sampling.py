"""Sampling and the judge budget in the worker (the decisions live in
:mod:`guardrail.stream.sampling` and :mod:`guardrail.stream.budget`)::

    sampler, budget = build(settings, telemetry, notify=dispatcher.dispatch)
    # -> MessageJudge(..., sampler=sampler, budget=budget); both None by default
    register(runtime)      # the version-count table (if a rule needs it), the budget timer

A ``first_per_version`` rule keeps its counts in a Faust table,
``<app_id>-version-quota-changelog``, partitioned like the input topic: the
count of input partition p is written to changelog partition p, so the worker
that owns p recovers it on restart or rebalance. The judging agent confirms
the table's changelog writes before it acks a batch (``confirm_before_ack``),
so a committed offset is never ahead of the counts that decided it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..config.settings import Settings
from ..stream.budget import BudgetGovernor, Notify, check_budget_prices
from ..stream.sampling import Sampler
from ..stream.telemetry import Telemetry
from .windows import ConfirmedTable

if TYPE_CHECKING:
    from .runtime import WorkerRuntime

__all__ = ["build", "register", "TableStore", "QUOTA_TABLE"]

log = logging.getLogger("guardrail.sampling")

QUOTA_TABLE = "version-quota"


def build(settings: Settings, telemetry: Telemetry, *, notify: Notify | None = None,
          ) -> tuple[Sampler | None, BudgetGovernor | None]:
    """The worker's sampler and budget governor (None when not configured).

    Raises ConfigError for a USD budget over a judge without a known price."""
    s = settings.sampling
    check_budget_prices(s, settings.judge)
    budget = BudgetGovernor(s, notify=notify, telemetry=telemetry)  # sets the gauges
    if not budget.enabled:
        budget = None
    if s.sample_rate >= 1.0 and not s.sample_rules and budget is None:
        return None, None
    sampler = Sampler(s, group_labels=settings.windows.group_labels,
                      version_label=settings.windows.version_label,
                      partitions=settings.kafka.topic_partitions)
    log.info("sampling: rate %.4g, %d rule(s)%s", s.sample_rate, len(s.sample_rules),
             "" if budget is None else f", budget ${s.budget_usd_per_hour}/h, "
             f"{s.budget_tokens_per_hour} tokens/h (per worker)")
    return sampler, budget


class TableStore:
    """A :class:`~guardrail.stream.sampling.QuotaStore` over a Faust table: the
    value goes to the changelog partition of the input partition it counts."""

    def __init__(self, table: Any) -> None:
        self.table = table

    def get(self, key: str) -> dict[str, Any] | None:
        value = self.table.data.get(key)
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: dict[str, Any], partition: int) -> None:
        self.table.data[key] = value
        self.table.send_changelog(partition, key, value)


def register(runtime: WorkerRuntime) -> None:
    """Add the version-count table and the budget timer, when configured."""
    app, s = runtime.app, runtime.settings
    judge = runtime.message_judge
    if judge.sampler is not None and judge.sampler.uses_quota:
        # Compacted only: Faust's tables default to compact,delete with the
        # broker's retention (7 days), which would forget a quiet version's count.
        table = app.tables.add(ConfirmedTable(app, name=QUOTA_TABLE, default=dict,
                                              beacon=app.tables.beacon,
                                              partitions=s.kafka.topic_partitions,
                                              extra_topic_configs={"cleanup.policy": "compact"}))
        judge.sampler.quota.store = TableStore(table)
        runtime.state["quota_table"] = table
        runtime.state["confirm_before_ack"] = table.confirm_changelog
    budget = judge.budget
    if budget is not None:
        # Batches update the rate as they finish; the timer lets the gauges and
        # the way back up follow the sliding hour while traffic is quiet.
        @app.timer(min(5.0, s.sampling.budget_step_seconds))
        async def budget_tick() -> None:
            budget.update()
