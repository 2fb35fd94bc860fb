"""A finished batch's output and error files, read into answers and errors.

Every line is keyed by ``custom_id`` (in any order). A line with a 200
response gives that request's chat-completions body, parsed later exactly as a
synchronous answer is; anything else becomes :class:`BatchRequestError`,
which the judge records as the metric's ``error`` (never SAFE)::

    answers, problems = await chunk_results(client, chunk)
    answers["r-3f…"]            # {"choices": [...], "usage": {...}}
    problems["r-9a…"]           # BatchRequestError("batch request failed: HTTP 500: …")
    problems["r-9a…"].unanswered   # True: never run (expired, failed): submit again later
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from ..errors import JudgeError
from .client import BatchClient
from .state import Chunk

__all__ = ["BatchRequestError", "chunk_results", "read_lines", "keyed_lines", "not_run",
           "fill_missing", "short", "NOT_RUN_CODES"]

#: Error codes of requests the batch never ran: nothing was paid for them.
NOT_RUN_CODES = frozenset({"batch_expired", "batch_cancelled", "batch_failed"})
#: Said of a request a batch never ran: the state file gives it back.
AGAIN = "; a new run with the same batch state file submits it again"


class BatchRequestError(JudgeError):
    """One request of a batch got no usable answer. ``unanswered``: the batch
    never ran it (expired, cancelled or failed batch)."""

    def __init__(self, message: str, *, unanswered: bool = False) -> None:
        super().__init__(message)
        self.unanswered = unanswered


async def chunk_results(client: BatchClient, chunk: Chunk,
                        ) -> tuple[dict[str, dict[str, Any]], dict[str, BatchRequestError]]:
    """(answers, problems) by ``custom_id`` for a finished chunk; a request of
    the chunk in neither file is a problem too, marked unanswered when the batch
    did not complete."""
    answers: dict[str, dict[str, Any]] = {}
    problems: dict[str, BatchRequestError] = {}
    for file_id in (chunk.output_file_id, chunk.error_file_id):
        if file_id:
            read_lines(await client.content(file_id), answers, problems)
    fill_missing(chunk, answers, problems, unrun=chunk.status != "completed")
    return answers, problems


def fill_missing(chunk: Chunk, answers: dict[str, dict[str, Any]],
                 problems: dict[str, BatchRequestError], *, unrun: bool) -> None:
    """A problem for each request of the chunk with no result line; ``unrun``:
    the batch ended before running them all (they are given back)."""
    for cid in chunk.custom_ids:
        if cid not in answers and cid not in problems:
            problems[cid] = BatchRequestError(
                f"not judged: batch {chunk.batch_id} ended {chunk.status} without running "
                f"this request{AGAIN}" if unrun else
                f"batch {chunk.batch_id} {chunk.status} without a result for this request",
                unanswered=unrun)


def keyed_lines(content: bytes) -> Iterator[tuple[str, dict[str, Any]]]:
    """(custom_id, line) of each JSON object line of a results file; a line
    that names no custom_id is skipped (its request shows as missing)."""
    for raw in content.splitlines():
        if not raw.strip():
            continue
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(line, dict) and isinstance(line.get("custom_id"), str):
            yield line["custom_id"], line


def read_lines(content: bytes, answers: dict[str, dict[str, Any]],
               problems: dict[str, BatchRequestError]) -> None:
    """Sort the JSONL lines of an output or error file into the two dicts."""
    for custom_id, line in keyed_lines(content):
        body, problem = _line_answer(line)
        if problem is None:
            answers[custom_id] = body  # type: ignore[assignment]
        else:
            problems[custom_id] = problem


def not_run(why: str) -> BatchRequestError:
    """The error of a request its batch never ran (nothing paid): given back."""
    return BatchRequestError(f"not judged: the batch did not run this request ({why}){AGAIN}",
                             unanswered=True)


def _line_answer(line: dict[str, Any]) -> tuple[dict[str, Any] | None, BatchRequestError | None]:
    error = line.get("error")
    if error:
        code = error.get("code") if isinstance(error, dict) else None
        message = error.get("message") if isinstance(error, dict) else error
        if code in NOT_RUN_CODES:
            return None, not_run(f"{code}: {short(message)}")
        return None, BatchRequestError(f"batch request failed: {code or 'error'}: "
                                       f"{short(message)}")
    response = line.get("response")
    if not isinstance(response, dict):
        return None, BatchRequestError("batch request failed: the result line has no response")
    status, body = response.get("status_code"), response.get("body")
    if status != 200:
        return None, BatchRequestError(f"batch request failed: HTTP {status}: {short(body)}")
    if not isinstance(body, dict):
        return None, BatchRequestError(f"batch request failed: the response body is not a "
                                       f"JSON object: {short(body)}")
    return body, None


def short(value: Any) -> str:
    """A value as one line of at most 300 characters, for an error message."""
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return " ".join(text.split())[:300]
