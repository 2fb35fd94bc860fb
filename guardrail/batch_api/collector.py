"""Gather judge requests into chunks, submit each as one batch, poll, hand back answers.

The judge's call path is the synchronous one (:class:`~guardrail.judges.llm.LLMJudge`
with :class:`BatchTransport`): each call's request body is the one
:class:`~guardrail.judges.transports.HTTPTransport` would post (for Anthropic,
litellm's translation of it), named by a hash of that chat body
(``custom_id``), and it waits here until its batch finished::

    collector = BatchCollector(api, state, settings=settings.batch_api, say=print)
    judge = LLMJudge(judge_settings, transport=BatchTransport(judge_settings, collector))
    ...                      # evaluate cases as usual: every call is a batch line
    await judge.aclose()     # closes the collector and its client

Requests go out as a chunk when ``batch_max_requests`` or ``batch_max_bytes``
is reached, or ``batch_gather_seconds`` after the last one arrived. The hash
naming is what makes a restart resume: the same case asks the same body, so
its ``custom_id`` is found in the state file and its batch is polled (or read)
again, never submitted again. Identical requests are one batch line.
``api`` is the provider's batch API (:class:`~guardrail.batch_api.api.BatchAPI`):
it writes the lines, stages and creates the batches and reads their answers.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson

from ..errors import JudgeConfigError, JudgeError
from ..judges.settings import JudgeSettings
from ..judges.transports import Completion, chat_body
from ..judging.prompts import FENCE_LINE
from .api import BatchAPI
from .client import BatchHTTPError
from .results import BatchRequestError
from .settings import BatchApiSettings
from .state import BatchState, Chunk

__all__ = ["BatchCollector", "BatchTransport", "request_id"]

Say = Callable[[str], None]
#: Tries of one batch API call that fails transiently before the chunk fails
#: (its requests then carry the error; the state file keeps the batch for a rerun).
TRANSIENT_ATTEMPTS = 8
#: The fence token in a serialized body (hex, after the prompt's label).
_FENCE = re.compile(re.escape(FENCE_LINE.encode()) + rb"([0-9a-f]{8,64})")


def request_id(body: dict[str, Any]) -> str:
    """The ``custom_id`` of a request: a hash of its body without the fence
    token. The token is drawn afresh for every call (:mod:`guardrail.judging.prompts`),
    so a rerun's body differs in it alone; without it the same case asks the
    same request, and a rerun finds it in the state file."""
    raw = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    token = _FENCE.search(raw)
    if token is not None:
        raw = raw.replace(token.group(1), b"")
    return "r-" + hashlib.sha256(raw).hexdigest()[:40]


class BatchTransport:
    """A judge transport whose calls are lines of a batch (see module doc)."""

    name = "batch"

    def __init__(self, settings: JudgeSettings, collector: BatchCollector) -> None:
        self._settings, self.collector = settings, collector
        # As the synchronous path: a provider without log-probabilities is not
        # asked for them, and its sampled verdicts stand.
        self.asks_logprobs = settings.logprobs and collector.api.takes_logprobs

    async def complete(self, messages: list[dict[str, str]],
                       response_format: dict[str, Any] | None,
                       max_tokens: int | None = None) -> Completion:
        body = chat_body(self._settings, messages, response_format, max_tokens,
                         logprobs=self.asks_logprobs)
        answer = await self.collector.request(request_id(body), body)
        return self.collector.api.completion(answer, body)

    def is_transient(self, exc: BaseException) -> bool:
        return False  # a batch line is not retried: it had its day (or 24 hours)

    def config_setting(self, exc: BaseException) -> str | None:
        return None  # the collector raises JudgeConfigError itself

    async def aclose(self) -> None:
        await self.collector.aclose()


class BatchCollector:
    """Chunks, batches and the requests waiting for them."""

    def __init__(self, api: BatchAPI, state: BatchState, *, settings: BatchApiSettings,
                 say: Say | None = None) -> None:
        self.api, self.state, self.settings = api, state, settings
        self._say = say or (lambda line: None)
        self._pending: dict[str, bytes] = {}
        self._pending_bytes = 0
        self._waiters: dict[str, list[asyncio.Future[dict[str, Any]]]] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._cuts: set[asyncio.Task[None]] = set()
        self._timer: asyncio.Task[None] | None = None
        self._last_arrival = self._last_request = 0.0
        self._fresh: set[int] = set()
        #: Requests asked, chunks submitted by this run, chunks resumed from the state.
        self.requests = self.submitted = self.resumed = 0

    async def request(self, custom_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """The response body of this request, once its batch has finished; raises
        :class:`BatchRequestError` when the batch has none for it."""
        future = asyncio.get_running_loop().create_future()
        self._last_request = asyncio.get_running_loop().time()
        first = custom_id not in self._waiters
        self._waiters.setdefault(custom_id, []).append(future)
        if first:
            self.requests += 1
            chunk = self.state.chunk_of(custom_id)
            if chunk is not None:
                self._follow(chunk)
            else:
                try:
                    self._queue(custom_id, body)
                except BatchRequestError as exc:  # a request the provider cannot take
                    self._fail([custom_id], exc)
        return await future

    def _queue(self, custom_id: str, body: dict[str, Any]) -> None:
        line = self.api.line(custom_id, body)
        full = (len(self._pending) + 1 > self.settings.max_requests
                or self._pending_bytes + len(line) > self.settings.max_bytes)
        if full and self._pending:
            self._cut()
        self._pending[custom_id] = line
        self._pending_bytes += len(line)
        if len(self._pending) >= self.settings.max_requests:
            self._cut()
            return
        self._last_arrival = asyncio.get_running_loop().time()
        if self._timer is None or self._timer.done():
            self._timer = asyncio.create_task(self._gather())

    async def _gather(self) -> None:
        """Cut what is pending once no request came for ``gather_seconds``."""
        loop = asyncio.get_running_loop()
        while self._pending:
            due = self._last_arrival + self.settings.gather_seconds
            if loop.time() >= due:
                self._cut()
                return
            await asyncio.sleep(due - loop.time())

    def _cut(self) -> None:
        ids, content = list(self._pending), b"".join(self._pending.values())
        self._pending, self._pending_bytes = {}, 0
        task = asyncio.create_task(self._submit(ids, content))
        self._cuts.add(task)
        task.add_done_callback(self._cuts.discard)

    def _follow(self, chunk: Chunk) -> None:
        """Wait for a chunk recorded by an earlier run (or this one)."""
        task = self._tasks.get(chunk.number)
        if task is None:
            self.resumed += 1
            self._say(f"batch chunk {chunk.number}: resumed ({chunk.batch_id or 'no batch yet'}, "
                      f"{chunk.status}), not submitted again")
        if task is None or task.done():  # done: its results are read again for this one
            self._tasks[chunk.number] = asyncio.create_task(self._guarded(chunk, self._finish))

    async def _submit(self, ids: list[str], content: bytes) -> None:
        try:
            # Recorded only once staged: a stop before that leaves an unused file
            # (files cost nothing); a stop after it resumes with this file.
            staged_at = time.time()  # before the batch is created: how find() knows it
            file_id = await self.api.stage(ids, content)
        except Exception as exc:  # noqa: BLE001 - every waiter of the chunk is told
            self._fail(ids, _failure(exc, "staging the batch's requests"))
            return
        chunk = self.state.add_chunk(ids)
        self.state.update(chunk, file_id=file_id, staged_at=staged_at)
        self.submitted += 1
        self._fresh.add(chunk.number)
        self._tasks[chunk.number] = asyncio.create_task(self._guarded(chunk, self._finish))

    async def _guarded(self, chunk: Chunk, work: Callable[[Chunk], Any]) -> None:
        try:
            await work(chunk)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - every waiter of the chunk is told
            mine, failure = self._mine(chunk), _failure(exc, f"batch chunk {chunk.number}")
            if isinstance(failure, BatchRequestError) and failure.unanswered:
                self.state.release(chunk, mine)  # never sent: a new run submits them
            self._fail(mine, failure)

    async def _finish(self, chunk: Chunk) -> None:
        if chunk.batch_id is None:
            await self._create(chunk)
        if not chunk.finished or (chunk.status != "failed" and chunk.output_file_id is None
                                  and chunk.error_file_id is None):
            await self._poll(chunk)
        else:  # finished in an earlier run: let this run's requests for it come in first
            await self._quiet()
        mine = self._mine(chunk)
        answers, problems = await self._patient(
            f"reading {chunk.batch_id}'s results", lambda: self.api.results(chunk))
        unanswered = [cid for cid in mine if cid in problems and problems[cid].unanswered]
        if unanswered:
            self.state.release(chunk, unanswered)
        for cid in mine:
            if cid in answers:
                self._resolve(cid, answers[cid])
            else:
                self._fail([cid], problems.get(cid) or BatchRequestError(
                    f"batch {chunk.batch_id} ({chunk.status}) has no result for this request"))
        self.state.update(chunk, published=True)
        self._say(f"batch chunk {chunk.number} ({chunk.batch_id}): {chunk.status}, "
                  f"{len(answers)} answered, {len(chunk.custom_ids) - len(answers)} not"
                  + (f" ({len(unanswered)} given back: a new run submits them again)"
                     if unanswered else ""))

    def _mine(self, chunk: Chunk) -> list[str]:
        """The chunk's requests, less those given back (they belong to a newer one now)."""
        return [cid for cid in chunk.custom_ids if self.state.chunk_of(cid) is chunk]

    async def _quiet(self) -> None:
        """Wait until no request came for ``gather_seconds``: a finished chunk's
        results are read once for all its requests, not once per late one."""
        loop = asyncio.get_running_loop()
        while (due := self._last_request + self.settings.gather_seconds) > loop.time():
            await asyncio.sleep(due - loop.time())

    async def _create(self, chunk: Chunk) -> None:
        assert chunk.file_id is not None
        # A chunk of an earlier run without a batch id: that run may have been
        # stopped between creating the batch and recording it. Look before paying.
        taken = {c.batch_id for c in self.state.chunks if c.batch_id}
        batch = None if chunk.number in self._fresh else await self._patient(
            f"looking for chunk {chunk.number}'s batch", lambda: self.api.find(chunk, taken))
        if batch is None:
            batch = await self._patient("creating a batch", lambda: self.api.create(chunk))
        self._record(chunk, batch)
        await self.api.created(chunk)
        self._say(f"batch chunk {chunk.number}: {len(chunk.custom_ids)} requests submitted "
                  f"as {chunk.batch_id}")

    async def _poll(self, chunk: Chunk) -> None:
        delay = self.settings.poll_seconds
        while True:
            self._record(chunk, await self._patient(
                f"checking {chunk.batch_id}", lambda: self.api.retrieve(str(chunk.batch_id))))
            if chunk.finished:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.settings.poll_max_seconds)

    async def _patient(self, doing: str, call: Callable[[], Awaitable[Any]]) -> Any:
        """``call()``, again after a transient failure (a lost connection, 429,
        5xx): a poll lasting hours must outlive a blip, not fail the chunk."""
        delay, attempt = self.settings.poll_seconds, 1
        while True:
            try:
                return await call()
            except (aiohttp.ClientConnectionError, asyncio.TimeoutError, BatchHTTPError) as exc:
                if not _transient(exc) or attempt == TRANSIENT_ATTEMPTS:
                    raise
                self._say(f"batch API: {doing} failed ({type(exc).__name__}: {exc}); "
                          f"again in {delay:g} s")
            await asyncio.sleep(delay)
            delay, attempt = min(delay * 2, self.settings.poll_max_seconds), attempt + 1

    def _record(self, chunk: Chunk, batch: dict[str, Any]) -> None:
        changes = {"batch_id": batch.get("id"), "status": str(batch.get("status") or "unknown"),
                   "output_file_id": batch.get("output_file_id"),
                   "error_file_id": batch.get("error_file_id")}
        if any(getattr(chunk, k) != v for k, v in changes.items()):
            self.state.update(chunk, **changes)

    def _resolve(self, custom_id: str, body: dict[str, Any]) -> None:
        for future in self._waiters.pop(custom_id, ()):
            if not future.done():
                future.set_result(body)

    def _fail(self, ids: list[str], exc: JudgeError) -> None:
        for cid in ids:
            for future in self._waiters.pop(cid, ()):
                if not future.done():
                    future.set_exception(_fresh_copy(exc))

    async def aclose(self) -> None:
        """Stop gathering and polling (the state file keeps what was submitted)."""
        tasks = [t for t in (self._timer, *self._cuts, *self._tasks.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.api.aclose()


def _failure(exc: BaseException, doing: str) -> JudgeError:
    """What a chunk's waiters get when the batch API itself fails: a refused key
    stops the run (as a refused key does on the synchronous path)."""
    if isinstance(exc, JudgeError):
        return exc
    if isinstance(exc, BatchHTTPError) and exc.status_code in (401, 403):
        return JudgeConfigError(f"judge configuration error: the batch API refused the key "
                                f"({exc}); check judge_api_key", setting="judge_api_key")
    if isinstance(exc, BatchHTTPError) and exc.status_code == 404 and "staging" in doing:
        return JudgeConfigError("judge configuration error: the judge endpoint has no batch "
                                f"API (/files answered {exc}); check judge_api_base",
                                setting="judge_api_base")
    return BatchRequestError(f"batch API failed {doing}: {type(exc).__name__}: {exc}")


def _transient(exc: BaseException) -> bool:
    status = getattr(exc, "status_code", None)
    return status is None or status == 429 or status >= 500


def _fresh_copy(exc: JudgeError) -> JudgeError:
    """An exception of its own for each waiter: one raised in thousands of
    tasks would collect all their tracebacks."""
    if isinstance(exc, JudgeConfigError):
        return JudgeConfigError(str(exc), setting=exc.setting)
    if isinstance(exc, BatchRequestError):
        return BatchRequestError(str(exc), unanswered=exc.unanswered)
    return type(exc)(str(exc))
