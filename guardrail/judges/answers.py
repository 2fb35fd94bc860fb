"""A chat-completions answer decoded straight into a :class:`Completion`.

An answer with log-probabilities is mostly its tokens: every token with its
bytes and its top alternatives, ~9 KB and over a thousand Python objects for a
two-metric verdict, of which only the few tokens at a verdict are ever read.
Decoding it into dicts was the largest single cost of a judged message. Here
the answer is decoded into typed records, and each token's alternatives stay
undecoded JSON (:class:`msgspec.Raw`) until :func:`~.probability.top_pairs`
reads them::

    completion = decode_completion(200, raw_body)   # -> Completion(content, tokens, ...)

An answer of another shape (a missing field, a token that is not a string, a
body that is not an object) falls back to the plain decoder and
:func:`~.transports.completion_from_json`, so what it yields, and every error
it raises, is what it was before this fast path existed.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from .probability import TokenLogprob, _token_bytes
from .transports import Completion, _cached_count, _count, answer_object, completion_from_json

__all__ = ["decode_completion"]


class _Token(msgspec.Struct, gc=False):
    token: str
    logprob: float
    bytes: list[int] | None = None
    #: As sent (``null`` too): read by top_pairs only at a verdict.
    top_logprobs: msgspec.Raw = msgspec.Raw(b"[]")


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
    """The :class:`~.transports.Completion` of one answer body (``status``:
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


def _tokens(logprobs: _Logprobs | None) -> tuple[TokenLogprob, ...] | None:
    """As :func:`~.probability.read_logprobs` reads them: None when absent,
    empty, or any token's log-probability is not finite."""
    if logprobs is None or not logprobs.content:
        return None
    tokens = []
    for item in logprobs.content:
        if not math.isfinite(item.logprob):
            return None
        tokens.append(TokenLogprob(item.token, item.logprob, item.top_logprobs,
                                   _token_bytes(item.token, item.bytes)))
    return tuple(tokens)
