"""Re-judging a time range of a topic (backfill), as a consumer of its own: after a
rubric or judge change, into a results topic of its own, with a judgment cache
so a second replay pays nothing::

    from guardrail.replay import replay
    summary = await replay(settings, start_ms=..., end_ms=None, results_topic="replayed")

- :mod:`.backfill` — one process: the range planned per partition, judged in
  batches through the stream's :class:`~guardrail.stream.processing.MessageJudge`.
- :mod:`.processes` — a replay spread over several processes, each its own partitions.
- :mod:`.batch_api` — ``replay --batch-api``: the range judged through the
  provider's batch API at the batch price.

It composes the stream, Kafka's clients, the judges and the batch APIs; nothing
below imports it (the command line starts it).
"""

from __future__ import annotations

from .._lazy import lazy_exports

_HOMES = {
    "replay": ".backfill", "ReplaySummary": ".backfill", "plan_ranges": ".backfill",
    "replay_in_processes": ".processes", "replay_batch_api": ".batch_api",
}

__all__ = list(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)
