"""What the judgments of published results cost, summed for run summaries::

    tally = JudgeTally()
    tally.add(metrics)          # a RedteamMetrics
    tally.judged, tally.cost
    unavailable_share(verdicts)  # judge-side failures among a round's calls: an outage?
"""

from __future__ import annotations

from dataclasses import dataclass

from ..judging.models import RedteamMetrics

__all__ = ["JudgeTally", "unavailable_share"]


@dataclass
class JudgeTally:
    """What the metric judgments of published results cost, for run summaries.

    ``judged`` counts judgments asked of the judge (errors included),
    ``cached`` those served from the cache; ``cost`` is USD at known prices and
    ``unpriced`` counts judgments whose price is unknown.
    """

    judged: int = 0
    cached: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    unpriced: int = 0

    def add(self, metrics: RedteamMetrics) -> None:
        for m in metrics.metrics:
            self.cached += m.cached
            self.judged += not m.cached
            self.errors += m.error is not None
            self.input_tokens += m.input_tokens
            self.output_tokens += m.output_tokens
            if m.cost is None:
                self.unpriced += 1
            else:
                self.cost += m.cost


def unavailable_share(verdicts: list[RedteamMetrics]) -> float:
    """Judge-side failures among the calls a round made (cache hits excluded)."""
    asked = [m for v in verdicts for m in v.metrics if not m.cached]
    return sum(m.unavailable for m in asked) / len(asked) if asked else 0.0
