"""Anthropic's Message Batches API, for ``--batch-api`` with an ``anthropic/`` judge.

::

    api = MessageBatches(MessageBatchClient("https://api.anthropic.com", api_key=key),
                         spool=Path("out/.batch-api-state.json.staged"), say=print)
    collector = BatchCollector(api, state, settings=settings.batch_api)   # as for OpenAI

- A chunk is one POST ``/v1/messages/batches`` of ``{"requests": [{"custom_id",
  "params"}]}``, ``params`` being the Messages request litellm writes for the
  synchronous call (:mod:`~guardrail.batch_api.anthropic_format`); the
  ``anthropic-beta`` header names the features those requests use.
- It is polled (GET ``/v1/messages/batches/{id}``) until its
  ``processing_status`` is ``ended``; then ``results_url`` has one line per
  request, in any order: succeeded, errored, canceled or expired.
- Anthropic keeps no files: the create request is staged in a local file
  beside the state file, so a restart can still create the batch, and deleted
  once the batch id is recorded. A staged chunk without a batch id (a run
  stopped between creating the batch and recording it) is first looked for
  among the batches created since it was staged: one of the chunk's size that
  no other chunk holds is adopted, not paid for again.

Not litellm's batch calls: in litellm 1.110 they only retrieve a batch
(creating one raises ``NotImplementedError``) and read results by summing
every line's usage, not as each request's answer; the HTTP is this client's.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import orjson

from ..errors import JudgeConfigError
from ..judges.answers import Completion
from .anthropic_format import MessagesFormat, read_results
from .api import Results
from .client import BatchHTTPError, JSONClient
from .results import AGAIN, BatchRequestError, fill_missing, short
from .state import Chunk, write_atomically

__all__ = ["MessageBatchClient", "MessageBatches", "ANTHROPIC_API_BASE", "messages_root"]

ANTHROPIC_API_BASE = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
_BATCHES = "/v1/messages/batches"
#: How much earlier than the chunk's staging a batch may look created (clocks differ).
CLOCK_SLACK_SECONDS = 600.0
#: Pages of 100 batches read when looking for an unrecorded one (newest first).
_LIST_PAGES = 10


def messages_root(api_base: str) -> str:
    """The API root of ``judge_api_base``, which litellm's synchronous calls
    also take as the full ``…/v1/messages`` URL."""
    base = api_base.rstrip("/")
    return base.removesuffix("/v1/messages")


class MessageBatchClient(JSONClient):
    """``{api_base}/v1/messages/batches``: create, retrieve, list, results."""

    def __init__(self, api_base: str, *, api_key: str | None, timeout: float = 120.0) -> None:
        headers = {"anthropic-version": API_VERSION, **({"x-api-key": api_key} if api_key else {})}
        super().__init__(messages_root(api_base), headers=headers, timeout=timeout)

    async def create(self, body: bytes, *, betas: list[str]) -> dict[str, Any]:
        """Create a batch of ``body`` (``{"requests": [...]}``, JSON)."""
        headers = {"content-type": "application/json",
                   **({"anthropic-beta": ",".join(betas)} if betas else {})}
        return await self._json("POST", _BATCHES, data=body, headers=headers)

    async def retrieve(self, batch_id: str) -> dict[str, Any]:
        return await self._json("GET", f"{_BATCHES}/{quote(batch_id, safe='')}")

    async def page(self, after_id: str | None) -> dict[str, Any]:
        """One page of the workspace's batches, newest first, after ``after_id``."""
        params = {"limit": "100", **({"after_id": after_id} if after_id else {})}
        return await self._json("GET", _BATCHES, params=params)

    async def results(self, url: str) -> bytes:
        """The results file at ``url``: only on the API's own host, where the key goes."""
        mine, theirs = urlsplit(self.api_base), urlsplit(url)
        if (theirs.scheme, theirs.netloc) != (mine.scheme, mine.netloc):
            raise BatchRequestError(f"batch results not read: results_url {short(url)} is not "
                                    f"on judge_api_base's host, and the key goes nowhere else")
        return await self._request("GET", url)


class MessageBatches:
    """The :class:`~guardrail.batch_api.api.BatchAPI` of Anthropic's Message Batches."""

    takes_logprobs = False  # Anthropic answers carry none

    def __init__(self, client: MessageBatchClient, *, spool: Path | None,
                 say: Callable[[str], None] | None = None) -> None:
        self.client, self._spool = client, spool
        self._say = say or (lambda line: None)
        self._format = MessagesFormat()
        self._betas: set[str] = set()
        #: Create requests staged by this run, by their file name.
        self._staged: dict[str, bytes] = {}

    def line(self, custom_id: str, body: dict[str, Any]) -> bytes:
        params, betas = self._format.request(body)
        self._betas |= betas  # one judge's requests: the same features
        return orjson.dumps({"custom_id": custom_id, "params": params}) + b"\n"

    async def stage(self, custom_ids: list[str], content: bytes) -> str:
        # The features on the first line, then the create request on one line
        # (orjson escapes newlines in strings): re-sent as is, never re-parsed.
        staged = (orjson.dumps({"anthropic_beta": sorted(self._betas)}) + b'\n{"requests":['
                  + b",".join(content.splitlines()) + b"]}")
        # Unique: a request given back may come first in a later chunk too.
        name = f"guardrail-{custom_ids[0]}-{secrets.token_hex(4)}.json"
        self._staged[name] = staged
        if self._spool is not None:
            await asyncio.to_thread(write_atomically, self._spool / name, staged)
        return name

    async def create(self, chunk: Chunk) -> dict[str, Any]:
        head, _, body = (await self._read_staged(chunk)).partition(b"\n")
        try:
            betas = orjson.loads(head)["anthropic_beta"]
            batch = await self.client.create(body, betas=betas)
        except BatchHTTPError as exc:
            if exc.status_code == 404:
                raise JudgeConfigError(
                    "judge configuration error: the judge endpoint has no Message Batches "
                    f"API (POST {_BATCHES} answered {exc}); check judge_api_base",
                    setting="judge_api_base") from None
            raise
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise _unsent(chunk, "are damaged") from None
        return _batch(batch)

    async def _read_staged(self, chunk: Chunk) -> bytes:
        name = str(chunk.file_id)
        if name in self._staged:
            return self._staged[name]
        if self._spool is not None:
            with contextlib.suppress(OSError):
                return await asyncio.to_thread((self._spool / name).read_bytes)
        raise _unsent(chunk, "are gone")

    async def created(self, chunk: Chunk) -> None:
        name = str(chunk.file_id)
        self._staged.pop(name, None)
        if self._spool is not None:
            (self._spool / name).unlink(missing_ok=True)

    async def find(self, chunk: Chunk, taken: set[str]) -> dict[str, Any] | None:
        if chunk.staged_at is None:
            return None
        found = await self._candidates(chunk, taken)
        if len(found) == 1:
            self._say(f"batch chunk {chunk.number}: found its batch {found[0]['id']}, created "
                      "before the last run stopped; not submitted again")
            return _batch(found[0])
        if found:
            self._say(f"batch chunk {chunk.number}: {len(found)} batches could be its own ("
                      f"{', '.join(str(b.get('id')) for b in found)}); submitting it again: "
                      "cancel the one not needed")
        return None

    async def _candidates(self, chunk: Chunk, taken: set[str]) -> list[dict[str, Any]]:
        """Batches created since the chunk was staged, of its size, held by no chunk."""
        since = (chunk.staged_at or 0.0) - CLOCK_SLACK_SECONDS
        found, after = [], None
        for _ in range(_LIST_PAGES):
            page = await self.client.page(after)
            batches = [b for b in page.get("data") or () if isinstance(b, dict)]
            for batch in batches:
                created = _timestamp(batch.get("created_at"))
                if created is not None and created < since:
                    return found  # newest first: the rest are older still
                if (created is not None and batch.get("id") not in taken
                        and _size(batch) == len(chunk.custom_ids)):
                    found.append(batch)
            if not page.get("has_more") or not batches:
                break
            after = str(page.get("last_id") or batches[-1].get("id"))
        return found

    async def retrieve(self, batch_id: str) -> dict[str, Any]:
        return _batch(await self.client.retrieve(batch_id))

    async def results(self, chunk: Chunk) -> Results:
        answers: dict[str, dict[str, Any]] = {}
        problems: dict[str, BatchRequestError] = {}
        if chunk.output_file_id:
            read_results(await self.client.results(chunk.output_file_id), answers, problems)
        # An ended batch has a line for every request, run or not: one missing is an error.
        fill_missing(chunk, answers, problems, unrun=False)
        return answers, problems

    def completion(self, answer: dict[str, Any], body: dict[str, Any]) -> Completion:
        return self._format.completion(answer, body)

    async def aclose(self) -> None:
        await self.client.aclose()


def _unsent(chunk: Chunk, what: str) -> BatchRequestError:
    """A chunk with no batch (none was found either) whose staged requests
    cannot be sent: they were never run, so they are given back."""
    return BatchRequestError(f"not judged: batch chunk {chunk.number} has no batch and its "
                             f"staged requests ({chunk.file_id}) {what}{AGAIN}", unanswered=True)


def _batch(data: dict[str, Any]) -> dict[str, Any]:
    """A Message Batch in the collector's terms (``results_url`` where the
    results are read); anything else is an error, not a batch still running."""
    if (data.get("type") != "message_batch" or not isinstance(data.get("id"), str)
            or not isinstance(data.get("processing_status"), str)):
        raise BatchHTTPError(200, f"answer is not a message batch: {short(data)}")
    return {"id": data["id"], "status": data["processing_status"],
            "output_file_id": data.get("results_url"), "error_file_id": None}


def _size(batch: dict[str, Any]) -> int:
    counts = batch.get("request_counts")
    if not isinstance(counts, dict):
        return -1
    return sum(v for v in counts.values() if isinstance(v, int))


def _timestamp(value: Any) -> float | None:
    """Unix time of an RFC 3339 ``created_at``; None when it is not one."""
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return None
