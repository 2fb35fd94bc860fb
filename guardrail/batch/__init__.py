"""Judging files: ``run redteam`` (and ``run eval``) write one result per case and a
``summary.json``; ``estimate redteam`` prices a run before it is made; ``run
--batch-api`` sends it through the provider's batch API at the batch price::

    from guardrail.batch import run_batch, estimate_cases
    summary = await run_batch(cases, settings=settings, output_dir=Path("out"))
    report = estimate_cases(cases, evaluator, judge=settings.judge)   # tokens and USD

- :mod:`.run` — the file run: concurrency, results, the summary, gate exit codes.
- :mod:`.estimate` — the real prompts rendered and counted, priced from the map;
  :mod:`.estimate_guard` — what a guard protocol really sends, and each stage's share.
- :mod:`.batch_api` — ``run --batch-api``: the endpoint, the batch price, the judge
  whose calls the collector gathers (:mod:`guardrail.batch_api`).

It sits above the settings it is started with (:mod:`guardrail.config`) and never
imports Kafka or the stream: a file run is the judging core around a file.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_HOMES = {
    "run_batch": ".run", "BatchSummary": ".run", "GATE_EXIT_CODES": ".run",
    "estimate_cases": ".estimate", "estimate_case": ".estimate", "EstimateReport": ".estimate",
    "run_batch_api": ".batch_api", "batch_settings": ".batch_api",
}

__all__ = list(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)
