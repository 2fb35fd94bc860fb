"""Judge answers read into :class:`Completion`: the plain reader and a typed one.

``completion_from_json`` reads an answer already decoded into dicts (the
batch API's lines; litellm's objects are read by its transport).
``decode_completion`` reads an answer body as the direct HTTP transport
receives it. An answer with log-probabilities is mostly its tokens: every
token with its bytes and its top alternatives, ~9 KB and over a thousand
Python objects for a two-metric verdict, of which only the few tokens at a
verdict are ever read. Decoding it into dicts was the largest single cost of
a judged message, so it is decoded into typed records instead, each token's
alternatives left as undecoded JSON (:class:`msgspec.Raw`) until
:func:`~.probability.top_pairs` reads them::

    completion = decode_completion(200, raw_body)   # -> Completion(content, ...)
    completion = completion_from_json(orjson.loads(raw_body))   # the same

An answer of another shape (a missing field, a token that is not a string)
goes through the plain reader, so what it yields is what the plain reader
yields; a body that is not a JSON object is an :class:`HTTPStatusError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from ..judging.probability import AnswerToken, read_logprobs

__all__ = ["Completion", "HTTPStatusError", "decode_completion", "completion_from_json",
           "answer_object"]


@dataclass(frozen=True)
class Completion:
    """What one call returned: the answer text (None if absent) and token counts.

    ``cached_tokens`` is the part of ``prompt_tokens`` the provider read from
    its prompt cache (OpenAI, vLLM and llama.cpp report it as
    ``usage.prompt_tokens_details.cached_tokens``; Anthropic as
    ``cache_read_input_tokens``, which litellm maps there too). ``logprobs``:
    the answer's tokens from ``choices[0].logprobs.content`` (None: not
    asked for, or the provider sent none).
    """

    content: Any
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    logprobs: tuple[AnswerToken, ...] | None = None


class HTTPStatusError(Exception):
    """The server answered with an HTTP error status."""

    def __init__(self, status_code: int, body: str) -> None:
        super().__init__(" ".join(body.split())[:300])
        self.status_code = status_code


def answer_object(status: int, raw: bytes) -> dict[str, Any]:
    """An answer body decoded; one that is not a JSON object is an
    :class:`HTTPStatusError` with ``status``, quoting its start."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        raise HTTPStatusError(status, "response body is not a JSON object: "
                              + raw[:200].decode("utf-8", "replace"))
    return data


def completion_from_json(data: dict[str, Any]) -> Completion:
    """A chat-completions answer as a :class:`Completion` (missing parts None or 0)."""
    tokens = data["usage"] if isinstance(data.get("usage"), dict) else {}
    try:
        choice = data["choices"][0]
        content = choice["message"]["content"]
    except (KeyError, IndexError, TypeError):
        choice = content = None
    logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
    return Completion(content, _count(tokens.get("prompt_tokens")),
                      _count(tokens.get("completion_tokens")), _cached_count(data, tokens),
                      read_logprobs(logprobs))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def _cached_count(data: dict[str, Any], tokens: dict[str, Any]) -> int:
    """Cached prompt tokens: the OpenAI field, else llama.cpp's ``timings.cache_n``
    (older llama.cpp servers report only the latter; the bundled one both)."""
    details = tokens.get("prompt_tokens_details")
    if isinstance(details, dict) and "cached_tokens" in details:
        return _count(details["cached_tokens"])
    timings = data.get("timings")
    return _count(timings.get("cache_n")) if isinstance(timings, dict) else 0


class _Token(msgspec.Struct, gc=False):
    """One answer token as sent, read as an :class:`~.probability.AnswerToken`
    as it is: an answer has a hundred or more, and building a second record
    of each cost more than decoding the whole answer."""

    token: str
    logprob: float
    raw: list[int] | None = msgspec.field(default=None, name="bytes")
    #: As sent (``null`` too): read by top_pairs only at a verdict.
    top: msgspec.Raw = msgspec.field(default=msgspec.Raw(b"[]"), name="top_logprobs")


class _Logprobs(msgspec.Struct, gc=False):
    content: list[_Token] | None = None


# Required where the plain reader would fail on a missing part: such an
# answer takes the plain path, which says the same as before.
class _Message(msgspec.Struct, gc=False):
    content: Any


class _Choice(msgspec.Struct, gc=False):
    message: _Message
    logprobs: _Logprobs | None = None


class _Answer(msgspec.Struct, gc=False):
    choices: list[_Choice]
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None


_DECODER = msgspec.json.Decoder(_Answer)


def decode_completion(status: int, raw: bytes) -> Completion:
    """The :class:`Completion` of one answer body (``status``:
    its HTTP status, named in the error of a body that is not a JSON object)."""
    try:
        answer = _DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return completion_from_json(answer_object(status, raw))
    choice = answer.choices[0] if answer.choices else None
    usage = answer.usage or {}
    return Completion(choice.message.content if choice is not None else None,
                      _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")),
                      _cached_count({"timings": answer.timings}, usage),
                      _tokens(choice.logprobs if choice is not None else None))


def _tokens(logprobs: _Logprobs | None) -> tuple[_Token, ...] | None:
    """As :func:`~.probability.read_logprobs` reads them: None when absent,
    empty, or any token's log-probability is not finite."""
    if logprobs is None or not logprobs.content:
        return None
    if not all(map(math.isfinite, [item.logprob for item in logprobs.content])):
        return None
    return tuple(logprobs.content)
