"""What the collector asks of a provider's batch API, and the OpenAI-compatible one.

A :class:`BatchAPI` turns a judge request into a line of a batch, stages a
chunk of lines, creates, finds and polls a batch and reads its results; the
collector (chunks, state file, waiting) is the same for every provider::

    api = OpenAIBatches(BatchClient(base, api_key=key), completion_window="24h")
    line = api.line("r-3f…", body)                # bytes: one line of a chunk
    ref = await api.stage(["r-3f…"], line)        # kept as the chunk's file_id
    batch = await api.create(chunk)               # {"id", "status", "output_file_id", ...}
    batch = await api.retrieve(batch["id"])
    answers, problems = await api.results(chunk)  # by custom_id
    completion = api.completion(answers["r-3f…"], body)

``body`` is always the OpenAI chat body :func:`~guardrail.judges.transports.chat_body`
builds; a provider with another request shape translates it in ``line``.
Anthropic's Message Batches: :mod:`~guardrail.batch_api.anthropic`.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from ..judges.answers import Completion, completion_from_json
from .client import ENDPOINT, BatchClient
from .results import BatchRequestError, chunk_results
from .state import Chunk

__all__ = ["BatchAPI", "OpenAIBatches", "Results"]

#: (answers, problems) by custom_id: a finished chunk's results.
Results = tuple[dict[str, dict[str, Any]], dict[str, BatchRequestError]]


class BatchAPI(Protocol):
    """One provider's batch API, as the collector uses it (see module doc).

    Batches come back as dicts with ``id``, ``status`` (a status of
    :data:`~guardrail.batch_api.state.TERMINAL` once it ended),
    ``output_file_id`` and ``error_file_id`` (where its results are read).
    """

    #: Whether answers can carry log-probabilities (asked for when ``judge_logprobs``).
    takes_logprobs: bool

    def line(self, custom_id: str, body: dict[str, Any]) -> bytes:
        """One request as a line of a chunk (``\\n``-terminated); raises
        :class:`BatchRequestError` for a request it cannot express."""
        ...

    async def stage(self, custom_ids: list[str], content: bytes) -> str:
        """Keep a chunk's lines where a batch can be created from them, also after a
        restart; what ``create`` needs again, recorded as the chunk's ``file_id``."""
        ...

    async def create(self, chunk: Chunk) -> dict[str, Any]: ...

    async def created(self, chunk: Chunk) -> None:
        """The chunk's batch id is recorded: its staged lines are needed no more."""
        ...

    async def find(self, chunk: Chunk, taken: set[str]) -> dict[str, Any] | None:
        """The batch an earlier run created for ``chunk`` without recording it, if
        any (``taken``: batch ids other chunks recorded)."""
        ...

    async def retrieve(self, batch_id: str) -> dict[str, Any]: ...

    async def results(self, chunk: Chunk) -> Results: ...

    def completion(self, answer: dict[str, Any], body: dict[str, Any]) -> Completion:
        """An answer of ``results`` as the synchronous path would have read it."""
        ...

    async def aclose(self) -> None: ...


class OpenAIBatches:
    """The OpenAI-compatible ``/files`` and ``/batches`` endpoints."""

    takes_logprobs = True

    def __init__(self, client: BatchClient, *, completion_window: str) -> None:
        self.client, self.completion_window = client, completion_window

    def line(self, custom_id: str, body: dict[str, Any]) -> bytes:
        return orjson.dumps({"custom_id": custom_id, "method": "POST", "url": ENDPOINT,
                             "body": body}) + b"\n"

    async def stage(self, custom_ids: list[str], content: bytes) -> str:
        # An uploaded file: a restart creates the batch from it (files cost nothing).
        return await self.client.upload(content, name=f"guardrail-{custom_ids[0]}.jsonl")

    async def create(self, chunk: Chunk) -> dict[str, Any]:
        return await self.client.create(str(chunk.file_id),
                                        completion_window=self.completion_window,
                                        metadata={"guardrail_chunk": str(chunk.number)})

    async def created(self, chunk: Chunk) -> None:
        """Nothing to do: the uploaded file stays with the provider."""

    async def find(self, chunk: Chunk, taken: set[str]) -> dict[str, Any] | None:
        return await self.client.find(input_file_id=str(chunk.file_id))

    async def retrieve(self, batch_id: str) -> dict[str, Any]:
        return await self.client.retrieve(batch_id)

    async def results(self, chunk: Chunk) -> Results:
        return await chunk_results(self.client, chunk)

    def completion(self, answer: dict[str, Any], body: dict[str, Any]) -> Completion:
        return completion_from_json(answer)

    async def aclose(self) -> None:
        await self.client.aclose()
