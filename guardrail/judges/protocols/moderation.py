"""OpenAI-compatible moderation endpoints: ``POST /v1/moderations``.

Checked against the OpenAI moderation object (``results[]`` with ``flagged``,
``categories`` — booleans — and ``category_scores``, e.g. ``harassment``,
``hate/threatening``, ``illicit/violent``, ``self-harm/intent``) as the
OpenAI SDKs type it, and Mistral's moderation docs (``/v1/moderations``, the
same ``results[].categories`` / ``category_scores`` with its own names —
``hate_and_discrimination``, ``violence_and_threats``, ``selfharm``, ``pii``
… — and no ``flagged``):

- Request: ``{"model": …, "input": text}`` with the judged text (the output);
  a moderation endpoint classifies text, not a conversation. Several messages
  judged at once share a request, ``"input": [text, …]``
  (:class:`~guardrail.judges.guard_transport.ModerationTransport`), whose
  ``results[i]`` answers ``input[i]``: :func:`split_results` makes it one
  body per message, so each is parsed alone, as if it had been sent alone.
- Answer: the JSON body. A category is flagged when the endpoint says so in
  ``categories``; an endpoint that sends scores only flags a score ≥ 0.5.
- Per metric (in :mod:`guardrail.judges.categories`): P(UNSAFE) = the highest
  score among the categories mapped to the metric, UNSAFE when one of them is
  flagged. A metric none of whose categories the answer holds is not covered.

The body is kept as the "answer" text, so the judge's machinery (retries,
errors, timing) is the same as for chat guards; cost is 0 unless priced.
A body without ``results``, scores or with non-numeric scores is a
:class:`GuardAnswerError`::

    Moderation().parse('{"results": [{"flagged": true, "categories": {"hate": true}, '
                       '"category_scores": {"hate": 0.91}}]}').categories
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ...judging.models import MetricRubric
from ...judging.probability import AnswerToken
from .base import (GuardAnswerError, GuardCategory, GuardInput, GuardProtocol, GuardRequest,
                   GuardVerdict, excerpt)

__all__ = ["Moderation", "FLAG_AT", "split_results", "share_tokens"]

#: The score from which a category counts as flagged when the endpoint sends
#: scores without its own booleans.
FLAG_AT = 0.5


class Moderation(GuardProtocol):
    """The ``moderation`` protocol: one call per case, categories mapped to metrics."""

    name = "moderation"

    def request(self, source: GuardInput, rubric: MetricRubric | None = None,
                criteria: str | None = None) -> GuardRequest:
        return GuardRequest(messages=({"role": "user", "content": source.judged},))

    def parse(self, text: Any, tokens: Sequence[AnswerToken] | None = None,
              catalog: Mapping[str, str] | None = None) -> GuardVerdict:
        result = _result(text)
        scores = _scores(result.get("category_scores"), text)
        flags = result.get("categories")
        names = catalog or {}
        if flags is None:
            flagged = [key for key, score in scores if score >= FLAG_AT]
        elif isinstance(flags, dict) and all(isinstance(v, bool) for v in flags.values()):
            flagged = [key for key, value in flags.items() if value]
        else:
            raise GuardAnswerError(f"moderation categories are not booleans: {excerpt(text)}")
        overall = result.get("flagged")
        if overall is not None and not isinstance(overall, bool):
            raise GuardAnswerError(f"moderation flagged is not a boolean: {excerpt(text)}")
        unsafe = bool(flagged) or overall is True
        return GuardVerdict(
            verdict="UNSAFE" if unsafe else "SAFE",
            categories=tuple(GuardCategory(key, names.get(key, key)) for key in flagged),
            p_unsafe=max((score for _, score in scores), default=None),
            scores=scores, answer=text)


def _result(text: Any) -> dict[str, Any]:
    if not isinstance(text, str) or not text.strip():
        raise GuardAnswerError("moderation endpoint returned an empty answer")
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise GuardAnswerError(f"moderation answer is not JSON: {excerpt(text)}") from None
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list) or not results or not isinstance(results[0], dict):
        raise GuardAnswerError(f"moderation answer has no results: {excerpt(text)}")
    return results[0]


def _scores(raw: Any, text: str) -> tuple[tuple[str, float], ...]:
    if not isinstance(raw, dict) or not raw:
        raise GuardAnswerError(f"moderation answer has no category_scores: {excerpt(text)}")
    scores = []
    for key, value in raw.items():
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or not 0.0 <= value <= 1.0):
            raise GuardAnswerError(f"moderation score of {key!r} is not a probability: "
                                   f"{excerpt(text)}")
        scores.append((str(key), float(value)))
    return tuple(scores)


def split_results(data: Mapping[str, Any], count: int) -> list[dict[str, Any] | GuardAnswerError]:
    """The answer to ``count`` inputs sent together as one body per input, in the
    inputs' order, each what a request for that input alone would have got (its
    own ``results[i]``; the request's ``usage`` left out: see :func:`share_tokens`).
    A ``results`` list of another length cannot be matched to the inputs (which
    one is missing?), so every input gets the error, none a guessed result.
    An unreadable entry fails only its own input, when it is parsed."""
    results = data.get("results")
    if not isinstance(results, list) or len(results) != count:
        got = f"{len(results)} results" if isinstance(results, list) else "no results list"
        return [GuardAnswerError(
            f"moderation endpoint answered {got} for {count} inputs sent in one request, "
            f"so no result can be matched to its message (judge_batch_size: 1 sends one "
            f"message per request): {excerpt(orjson.dumps(data).decode())}")
            for _ in range(count)]
    rest = {key: value for key, value in data.items() if key not in ("results", "usage")}
    return [{**rest, "results": [entry]} for entry in results]


def share_tokens(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` tokens of a shared request split in proportion to ``weights`` (the
    inputs' lengths), whole tokens summing to ``total``: the largest remainders
    get the tokens left over. Weights all 0 split evenly."""
    if not weights:
        return []
    if sum(weights) <= 0:
        weights = [1] * len(weights)
    whole = sum(weights)
    shares = [total * weight // whole for weight in weights]
    by_remainder = sorted(range(len(weights)), key=lambda i: -(total * weights[i] % whole))
    for i in by_remainder[:total - sum(shares)]:
        shares[i] += 1
    return shares
