"""A judge budget per hour: lower the effective sample rate instead of stopping.

``budget_usd_per_hour`` and/or ``budget_tokens_per_hour`` cap what this worker's
judge spends over the last hour, a sliding window of the spend the worker's
own judgments reported (cost and tokens of every judge call; cache hits cost
nothing). It is **per worker**: N workers may spend N budgets together::

    governor = BudgetGovernor(settings.sampling, notify=dispatcher.dispatch,
                              telemetry=telemetry)
    governor.record(verdicts)          # after each batch: what its judgments cost
    governor.update()                  # maybe step the rate; fires budget alerts
    governor.factor                    # 1.0, 0.5, 0.25 … multiplies every sample rate

**Steps.** At most once per ``budget_step_seconds``: when the spend of the last
hour plus that of the last step interval would pass a budget (the next
interval at the current pace goes over), the effective rate halves, down to
``budget_min_sample_rate``; when the last hour plus *twice* the last interval
stays within 80 % of every budget (the pace after doubling, with headroom), it
doubles, back up to ``sample_rate``. Leaving the configured rate fires one
budget alert, coming back to it another (``kind: "budget"``, ``state``
``"throttled"`` / ``"restored"``, with the spend, the budget and the new rate);
the steps in between only move the gauges. An hour's window means a burst
keeps the rate low until it is an hour old.

A USD budget needs the judge's price: :func:`check_budget_prices` refuses a
judge that litellm's cost map does not price and no
``judge_input_cost_per_token`` / ``judge_output_cost_per_token`` (a ConfigError;
the worker exits 2), so spend is never read as free.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections import deque
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from ..providers.litellm import price_tokens
from ..errors import ConfigError
from ..judging.models import RedteamMetrics
from ..judges.settings import JudgeSettings
from .settings import SamplingSettings

__all__ = ["SpendWindow", "BudgetGovernor", "check_budget_prices", "HOUR"]

log = logging.getLogger("guardrail.budget")

HOUR = 3600.0
#: Stepping back up must leave this share of the budget free (no flapping).
HEADROOM = 0.8


class SpendWindow:
    """USD and tokens spent, in one-second buckets over a sliding hour."""

    def __init__(self, span: float = HOUR) -> None:
        self.span = span
        self._buckets: deque[list[float]] = deque()  # [second, usd, tokens]

    def add(self, now: float, usd: float, tokens: int) -> None:
        second = math.floor(now)
        if self._buckets and self._buckets[-1][0] == second:
            self._buckets[-1][1] += usd
            self._buckets[-1][2] += tokens
        else:
            self._buckets.append([second, usd, tokens])
        self._expire(now)

    def totals(self, now: float, span: float | None = None) -> tuple[float, int]:
        """(USD, tokens) of the last ``span`` seconds (default: the whole window)."""
        self._expire(now)
        since = now - (self.span if span is None else span)
        usd = tokens = 0.0
        for second, bucket_usd, bucket_tokens in reversed(self._buckets):
            if second + 1 <= since:
                break
            usd, tokens = usd + bucket_usd, tokens + bucket_tokens
        return usd, int(tokens)

    def _expire(self, now: float) -> None:
        while self._buckets and self._buckets[0][0] + 1 <= now - self.span:
            self._buckets.popleft()


def check_budget_prices(sampling: SamplingSettings, judge: JudgeSettings) -> None:
    """Refuse a USD budget over a judge whose price is unknown (ConfigError)."""
    if sampling.budget_usd_per_hour is None:
        return
    price = price_tokens(judge.model, 1000, 1000,
                         input_cost_per_token=judge.input_cost_per_token,
                         output_cost_per_token=judge.output_cost_per_token)
    if price is None:
        raise ConfigError(
            f"budget_usd_per_hour needs the judge's price, and '{judge.model}' is not in "
            "litellm's cost map: set judge_input_cost_per_token and "
            "judge_output_cost_per_token (or use budget_tokens_per_hour)")


Notify = Callable[[dict[str, Any]], None]


class BudgetGovernor:
    """Step the effective sample rate to keep the last hour's spend within budget."""

    def __init__(self, sampling: SamplingSettings, *, notify: Notify | None = None,
                 telemetry: Any = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.sampling = sampling
        self.notify = notify
        self.telemetry = telemetry
        self.clock = clock
        self.window = SpendWindow()
        self.level = 0  # halvings applied
        self._last_step = -math.inf
        self._warned_unpriced = False
        floor = min(sampling.budget_min_sample_rate, sampling.sample_rate)
        ratio = sampling.sample_rate / floor if floor > 0 else 1.0
        #: Halvings until the floor (the last step lands on the floor exactly).
        self.max_level = math.ceil(math.log2(ratio) - 1e-9) if ratio > 1 else 0
        self._floor = floor
        self._set_gauges(0.0, 0)

    @property
    def enabled(self) -> bool:
        s = self.sampling
        return s.budget_usd_per_hour is not None or s.budget_tokens_per_hour is not None

    @property
    def effective_rate(self) -> float:
        rate = self.sampling.sample_rate
        return max(self._floor, rate / 2 ** self.level) if self.level else rate

    @property
    def factor(self) -> float:
        """Effective over configured rate: multiplies every sampling rate."""
        rate = self.sampling.sample_rate
        return self.effective_rate / rate if rate > 0 else 1.0

    def record(self, verdicts: list[RedteamMetrics]) -> None:
        """Add what these judgments cost (judge calls only; cache hits are free)."""
        usd, tokens = 0.0, 0
        for verdict in verdicts:
            for m in verdict.metrics:
                if m.cached:
                    continue
                tokens += m.input_tokens + m.output_tokens
                if m.cost is not None:
                    usd += m.cost
                elif self.sampling.budget_usd_per_hour is not None and not self._warned_unpriced:
                    self._warned_unpriced = True  # checked at start; a tiered price can do it
                    log.warning("a judgment has no price; the USD budget counts only priced "
                                "calls (guardrail_judge_unpriced_calls_total counts the rest)")
        if usd or tokens:
            self.window.add(self.clock(), usd, tokens)

    def update(self) -> dict[str, Any] | None:
        """Step the rate if due; returns (and notifies) the alert it fired, if any."""
        now = self.clock()
        spent = self.window.totals(now)
        self._set_gauges(*spent)
        if not self.enabled or now - self._last_step < self.sampling.budget_step_seconds:
            return None
        pace = self.window.totals(now, self.sampling.budget_step_seconds)
        if self._within(spent, pace, 1.0, 1.0):
            if self.level == 0 or not self._within(spent, pace, 2.0, HEADROOM):
                return None
            return self._step(now, -1, spent)
        if self.level >= self.max_level:
            return None  # at the floor: keep judging a little, never stop
        return self._step(now, +1, spent)

    def _within(self, spent: tuple[float, int], pace: tuple[float, int], pace_factor: float,
                share: float) -> bool:
        budgets = (self.sampling.budget_usd_per_hour, self.sampling.budget_tokens_per_hour)
        return all(budget is None or used + pace_factor * recent <= share * budget
                   for budget, used, recent in zip(budgets, spent, pace))

    def _step(self, now: float, direction: int, spent: tuple[float, int]) -> dict[str, Any] | None:
        previous = self.effective_rate
        self.level += direction
        self._last_step = now
        self._set_gauges(*spent)
        log.warning("judge budget: spend last hour $%.6f / %d tokens; effective sample rate "
                    "%.4g -> %.4g", spent[0], spent[1], previous, self.effective_rate)
        if direction > 0 and self.level == 1:
            return self._alert("throttled", spent, previous)
        if direction < 0 and self.level == 0:
            return self._alert("restored", spent, previous)
        return None

    def _alert(self, state: str, spent: tuple[float, int], previous: float) -> dict[str, Any]:
        s = self.sampling
        reason = ("judge spend over the last hour would pass the budget; sampling less"
                  if state == "throttled" else "judge spend is within budget again; "
                  "back to the configured sample rate")
        alert = {
            "alert_id": uuid.uuid4().hex, "kind": "budget", "state": state,
            "reasons": [reason], "scope": "worker",
            "spend": {"usd_last_hour": round(spent[0], 10), "tokens_last_hour": spent[1]},
            "budget": {"usd_per_hour": s.budget_usd_per_hour,
                       "tokens_per_hour": s.budget_tokens_per_hour},
            "sample_rate": s.sample_rate, "previous_sample_rate": previous,
            "effective_sample_rate": self.effective_rate,
            "fired_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        }
        if self.telemetry is not None:
            self.telemetry.budget_alerts.labels(state=state).inc()
        if self.notify is not None:
            self.notify(alert)
        return alert

    def _set_gauges(self, usd: float, tokens: int) -> None:
        if self.telemetry is None:
            return
        self.telemetry.spend_usd_per_hour.set(usd)
        self.telemetry.spend_tokens_per_hour.set(tokens)
        self.telemetry.effective_sample_rate.set(self.effective_rate)
