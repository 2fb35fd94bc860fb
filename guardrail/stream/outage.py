"""Judging a batch that waits out a judge outage instead of publishing errors.

:class:`OutageWaits` gives :class:`~guardrail.stream.processing.MessageJudge` its
judge calls: each case judged (timed, and the last success remembered), and a
batch held, unacked, while the judge is down::

    verdicts = await self._judge_until_available(messages)   # may wait, never raises
    #          for judge trouble (errors end up in the verdicts' metrics)

Publishing errors during an outage would burn through the topic, so a batch whose
judge-side failures reach ``outage_threshold`` of the calls it made, with no judge
call succeeding anywhere since the previous round started, waits with backoff for
as long as the outage lasts. Fewer failures (a batch straddling the start or end of
an outage, or one message the judge always fails on while other calls succeed) are
retried a few rounds, then published as errors: one bad message must not hold a
partition. The cache keeps what did succeed, so a retry re-asks only the failures.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from .._tasks import gather_or_cancel
from ..judging.models import RedteamMetrics
from .envelope import InputMessage
from .tally import unavailable_share

__all__ = ["OutageWaits", "PARTIAL_OUTAGE_RETRIES"]

log = logging.getLogger("guardrail.worker")

#: Rounds a batch is retried when some judgments (under the outage threshold)
#: failed judge-side, before those errors are published.
PARTIAL_OUTAGE_RETRIES = 3


class OutageWaits:
    """The judge calls of a message judge (it sets ``evaluator``, ``worker``,
    ``telemetry``; :meth:`_pause` is the wait, replaced in tests)."""

    evaluator: Any
    worker: Any
    telemetry: Any
    #: When a judge call last succeeded (any batch): tells a judge outage
    #: from one message the judge keeps failing on.
    _last_judge_success: float = float("-inf")

    async def _judge(self, message: InputMessage) -> RedteamMetrics:
        started = time.perf_counter()
        try:
            verdict = await self.evaluator.evaluate(message.case)
        finally:
            self.telemetry.judge_latency.observe(time.perf_counter() - started)
        if any(not (m.cached or m.error) for m in verdict.metrics):
            self._last_judge_success = time.monotonic()
        return verdict

    async def _judge_until_available(self, messages: list[InputMessage]) -> list[RedteamMetrics]:
        """Judge a batch; while the judge is down, hold it (unacked) and retry
        (see the module text)."""
        delay, partial_rounds, previous_round = 1.0, 0, time.monotonic()
        while True:
            round_started = time.monotonic()
            # The first configuration error cancels the rest of the batch.
            verdicts = await gather_or_cancel(*(self._judge(m) for m in messages))
            share = unavailable_share(verdicts)
            if self.worker.outage_policy != "pause" or share == 0:
                self.telemetry.paused.set(0)
                return verdicts
            judge_down = (share >= self.worker.outage_threshold
                          and self._last_judge_success < previous_round)
            previous_round = round_started
            if not judge_down:
                if partial_rounds >= PARTIAL_OUTAGE_RETRIES:
                    self.telemetry.paused.set(0)
                    return verdicts
                partial_rounds += 1
            reason = next(m.error for v in verdicts for m in v.metrics if m.error)
            log.warning("judge unavailable for %.0f%% of the calls of a batch of %d%s; "
                        "pausing %.0fs: %s", 100 * share, len(messages),
                        "" if judge_down else f" (retry {partial_rounds})", delay, reason)
            self.telemetry.paused.set(1)
            self.telemetry.outage_pauses.inc()
            await self._pause(delay)
            delay = min(delay * 2, self.worker.outage_max_backoff)

    async def _pause(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
