"""Alert rules over windowed counts, and the hooks that deliver alerts.

The decision logic is pure and synchronous::

    reasons = check_rule(rule, current=WindowCounts(total=40, unsafe=12),
                         baseline=WindowCounts(total=120, unsafe=3))
    # ["unsafe rate 30.0% above 20.0%", "regression vs baseline: 30.0% vs 2.5% (p=...)"]

Delivery (:class:`AlertDispatcher`) runs in the background so a slow webhook
never stalls counting: webhook POST (retried, with a timeout), a Kafka topic,
and the log.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from .settings import AlertRule

__all__ = ["WindowCounts", "two_proportion_p_value", "check_rule", "Cooldown", "RECENT_ALERTS",
           "AlertDispatcher", "rule_for"]

log = logging.getLogger("guardrail.alerts")


#: The window cell's schema (additive changes only; see WindowCounts.as_dict).
CELL_SCHEMA_VERSION = 1


@dataclass
class WindowCounts:
    """Judgments of one metric for one group in one window.

    ``total``, ``unsafe``, ``errors``, ``judged`` and ``rate`` count judged
    messages only; ``seen`` also counts those the sampling left unjudged, so
    ``judged / seen`` is the coverage. The rules read judged counts only."""

    total: int = 0
    unsafe: int = 0
    errors: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)
    #: Per origin|topic|partition: the highest position counted (see
    #: events.mark_value), the de-duplication of releases before ``ledgers``.
    marks: dict[str, int | list[int]] = field(default_factory=dict)
    #: Messages seen, judged or not (last, so positional uses keep their meaning).
    seen: int = 0
    #: Per origin|topic|partition: ``[floor, [position, ...]]``, the positions
    #: counted (:class:`~guardrail.stream.dedup.Ledger`); ``marks`` stays
    #: written for older releases reading the same changelog.
    ledgers: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def judged(self) -> int:
        """Judgments with a verdict (errors excluded from the rate)."""
        return self.total - self.errors

    @property
    def rate(self) -> float | None:
        return self.unsafe / self.judged if self.judged else None

    def as_dict(self) -> dict[str, Any]:
        # Cells change only by adding fields: a reader of any version reads
        # the ones it knows, so cells of two releases can share a changelog.
        return {"schema_version": CELL_SCHEMA_VERSION, "total": self.total,
                "unsafe": self.unsafe, "errors": self.errors, "seen": self.seen,
                "examples": self.examples, "marks": self.marks, "ledgers": self.ledgers}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> WindowCounts:
        data = data or {}
        total = data.get("total", 0)
        # Cells written before sampling have no "seen": every message was judged.
        return cls(total=total, unsafe=data.get("unsafe", 0),
                   errors=data.get("errors", 0), examples=list(data.get("examples", [])),
                   marks=dict(data.get("marks", {})), seen=data.get("seen", total),
                   ledgers=dict(data.get("ledgers", {})))

    def __add__(self, other: WindowCounts) -> WindowCounts:
        return WindowCounts(self.total + other.total, self.unsafe + other.unsafe,
                            self.errors + other.errors, seen=self.seen + other.seen)


def two_proportion_p_value(x1: int, n1: int, x2: int, n2: int) -> float:
    """One-sided p-value that proportion 1 (current) exceeds proportion 2 (baseline)."""
    if n1 == 0 or n2 == 0:
        return 1.0
    pooled = (x1 + x2) / (n1 + n2)
    variance = pooled * (1 - pooled) * (1 / n1 + 1 / n2)
    if variance == 0:
        return 1.0 if x1 / n1 <= x2 / n2 else 0.0
    z = (x1 / n1 - x2 / n2) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2))


def check_rule(rule: AlertRule, current: WindowCounts,
               baseline: WindowCounts | None) -> list[str]:
    """The reasons this window breaks the rule (empty: no alert)."""
    rate = current.rate
    if rate is None or current.judged < rule.min_judgments:
        return []
    reasons = []
    if rule.max_unsafe_rate is not None and rate > rule.max_unsafe_rate:
        reasons.append(f"unsafe rate {rate:.1%} above {rule.max_unsafe_rate:.1%}")
    if baseline is not None and baseline.judged >= rule.min_judgments:
        p = two_proportion_p_value(current.unsafe, current.judged, baseline.unsafe,
                                   baseline.judged)
        if p < rule.significance:
            reasons.append(f"regression vs baseline: {rate:.1%} vs {baseline.rate:.1%} "
                           f"(one-sided p={p:.2g} < {rule.significance:g})")
    return reasons


def rule_for(rules: tuple[AlertRule, ...], metric: str) -> AlertRule | None:
    """The rule for a metric: an exact name wins over the '*' rule."""
    exact = [r for r in rules if r.metric == metric]
    if exact:
        return exact[0]
    wildcard = [r for r in rules if r.metric == "*"]
    return wildcard[0] if wildcard else None


class Cooldown:
    """One incident, one alert: suppress repeats for the same key for a while."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def ready(self, key: str, now: float, seconds: float) -> bool:
        last = self._last.get(key)
        if last is not None and now - last < seconds:
            return False
        self._last[key] = now
        return True


Sender = Callable[[dict[str, Any]], Awaitable[None]]


#: How many fired alerts a dispatcher keeps for the dashboard.
RECENT_ALERTS = 50


class AlertDispatcher:
    """Deliver alerts in the background: log, Kafka topic, webhook (retried).
    The last ``recent`` alerts stay readable (:meth:`recent_alerts`)."""

    def __init__(self, *, webhook_url: str | None, timeout: float,
                 send_to_topic: Sender | None = None, retries: int = 3,
                 recent: int = RECENT_ALERTS) -> None:
        self.webhook_url = webhook_url
        self.timeout = timeout
        self.retries = retries
        self.send_to_topic = send_to_topic
        self.delivered = 0
        self.failed = 0
        # Deliveries in flight and their alerts (what is lost if they never finish).
        self._tasks: dict[asyncio.Task[None], dict[str, Any]] = {}
        # Bounded: a long-running worker must not grow with every alert.
        self._recent: deque[dict[str, Any]] = deque(maxlen=recent)

    def recent_alerts(self) -> list[dict[str, Any]]:
        """The alerts dispatched most recently, newest first."""
        return list(reversed(self._recent))

    def dispatch(self, alert: dict[str, Any]) -> None:
        self._recent.append(alert)
        unit = f" unit: {alert['unit']}" if "unit" in alert else ""  # sessions or turns
        log.warning("ALERT %s %s%s: %s", alert.get("metric") or alert.get("kind"),
                    alert.get("group", ""), unit, "; ".join(alert.get("reasons", [])))
        task = asyncio.ensure_future(self._deliver(alert))
        self._tasks[task] = alert
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)

    @property
    def in_flight(self) -> int:
        """Deliveries not finished yet."""
        return len(self._tasks)

    async def _deliver(self, alert: dict[str, Any]) -> None:
        if self.send_to_topic is not None:
            try:
                await self.send_to_topic(alert)
            except Exception as exc:  # the log line above is the fallback record
                log.error("alert not written to the alerts topic: %s", exc)
        if self.webhook_url:
            ok = await self._post(alert)
            self.delivered += ok
            self.failed += not ok
            if not ok:  # identifies the alert, never its examples (output excerpts)
                log.error("alert %s (%s %s) not delivered to the webhook",
                          alert.get("alert_id"), alert.get("metric"), alert.get("group"))

    async def _post(self, alert: dict[str, Any]) -> bool:
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        for attempt in range(self.retries + 1):
            try:
                async with aiohttp.ClientSession(timeout=timeout) as session:
                    async with session.post(self.webhook_url, json=alert) as response:
                        if response.status < 300:
                            return True
                        problem = f"HTTP {response.status}"
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                problem = type(exc).__name__
            log.warning("alert webhook attempt %d failed: %s", attempt + 1, problem)
            if attempt < self.retries:
                await asyncio.sleep(min(10.0, 0.5 * 2 ** attempt))
        log.error("alert webhook gave up after %d attempts", self.retries + 1)
        return False

    async def drain(self, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Wait up to ``timeout`` for deliveries in flight (used on shutdown and
        in tests); return the alerts whose delivery is still unfinished."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)
        return list(self._tasks.values())

    def cancel(self) -> list[dict[str, Any]]:
        """Stop the deliveries still in flight; return their alerts."""
        unfinished = list(self._tasks.items())
        for task, _ in unfinished:
            task.cancel()
        return [alert for _, alert in unfinished]
