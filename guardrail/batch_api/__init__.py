"""Judge requests through a provider's batch API (``run --batch-api``), at the batch price.

The OpenAI-compatible files and batches endpoints, or Anthropic's Message
Batches for an ``anthropic/`` judge: the judge's requests are written as the
lines of a batch, submitted in chunks under the provider's limits, polled with
backoff, and each answer is parsed as a synchronous one would be. A state file
keeps every chunk's batch id, so a restart resumes polling instead of paying
twice::

    from guardrail.batch.batch_api import run_batch_api
    summary, stats = await run_batch_api(cases, settings=settings, output_dir=Path("out"))

- :mod:`~guardrail.batch_api.settings`: ``batch_*`` settings (chunk limits, polling, discount).
- :mod:`~guardrail.batch_api.api`: what a provider's batch API does; the OpenAI-compatible one.
- :mod:`~guardrail.batch_api.client`: the HTTP client of ``/files`` and ``/batches``.
- :mod:`~guardrail.batch_api.anthropic`: Anthropic's Message Batches (client and API).
- :mod:`~guardrail.batch_api.anthropic_format`: Messages requests and results, via litellm.
- :mod:`~guardrail.batch_api.state`: the state file (atomic writes).
- :mod:`~guardrail.batch_api.collector`: the judge transport, chunks and polling.
- :mod:`~guardrail.batch_api.results`: output and error files into answers and errors.

Who drives it: ``run --batch-api`` (:mod:`guardrail.batch.batch_api`: the endpoint
and the batch price) and ``replay --batch-api`` (:mod:`guardrail.replay.batch_api`).
This wing knows the judges' requests and answers, never Kafka or a file of cases.

Names are imported on first use: the settings import this package's settings module.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_HOMES = {
    "BatchApiSettings": ".settings", "BatchAPI": ".api", "OpenAIBatches": ".api",
    "MessageBatches": ".anthropic", "BatchClient": ".client", "BatchHTTPError": ".client",
    "BatchCollector": ".collector", "BatchTransport": ".collector", "BatchState": ".state",
    "StateMismatch": ".state", "BatchRequestError": ".results",
}

__all__ = list(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)
