"""Token log-probabilities for the stand-in rule judge, with a P(UNSAFE) tests set.

A request with ``logprobs: true`` gets ``choices[0].logprobs.content`` the way
OpenAI and llama.cpp send it: one entry per answer token (``token``,
``logprob``, ``bytes``, ``top_logprobs`` cut to the request's
``top_logprobs``). Tokens are words, digits, single marks and runs of
spacing, with ``UNSAFE`` written ``UN`` + ``SAFE`` as the bundled llama.cpp
judge writes it. Every token is certain except where a verdict is read::

    probability_for("toxicity", {"output": "p_unsafe=0.7 text"}, {})   # 0.7
    steer_answer(answer, body, {"toxicity": 0.7})    # the rule answer, verdict UNSAFE
    choice_logprobs(body, content, {"*": 0.2})       # the ``logprobs`` object

P(UNSAFE) of a metric, first found wins:

1. a marker in the judged output: ``p_unsafe.toxicity=0.7`` (that metric) or
   ``p_unsafe=0.7`` (every metric) — one text, one probability, also for
   worker subprocesses;
2. the server's ``p_unsafe`` table: ``{"toxicity": 0.7, "*": 0.2}``;
3. otherwise the answer's own verdict, held with :data:`DEFAULT_CONFIDENCE`.

At a ``"verdict"`` value the alternatives are ``UN`` (P) and ``SAFE`` (1 − P);
at a ``"severity"`` digit the unsafe mass P sits on the answer's severity when
it is 3..5 (else on 4) and the safe mass on it when 1..2 (else on 1).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from typing import Any

from ..judging.probability import locate_value
from .rule_answers import answer_shape, parse_prompt, requested_metrics

__all__ = ["DEFAULT_CONFIDENCE", "probability_for", "steer_answer", "choice_logprobs",
           "tokenize"]

#: P of the answer's own verdict when nothing sets P(UNSAFE).
DEFAULT_CONFIDENCE = 0.98
#: P of the answer's own severity (the rest spread evenly) when nothing sets P.
_SEVERITY_CONFIDENCE = 0.96
#: OpenAI's stand-in for "too unlikely to list".
_UNLIKELY = -9999.0
_TOKEN = re.compile(r"UN(?=SAFE)|[A-Za-z]+|[0-9]|\s+|.", re.DOTALL)
_MARKER = re.compile(r"p_unsafe(?:\.([A-Za-z0-9_.-]+?))?=((?:0|1)(?:\.[0-9]+)?)(?![0-9])")


def probability_for(metric: str, fields: Mapping[str, str],
                    table: Mapping[str, float]) -> float | None:
    """P(UNSAFE) set for ``metric`` by a marker in the output or by ``table``."""
    generic = None
    for name, value in _MARKER.findall(fields.get("output", "")):
        if name == metric:
            return min(1.0, float(value))
        if not name and generic is None:
            generic = min(1.0, float(value))
    if generic is not None:
        return generic
    value = table.get(metric, table.get("*"))
    return float(value) if value is not None else None


def _metrics(body: Mapping) -> tuple[tuple[str | None, str], ...]:
    """(key in the answer, metric name) for each verdict the answer holds."""
    metrics = requested_metrics(body)
    if metrics is None:
        return ((None, parse_prompt(body)[0]),)
    return tuple((m, m) for m in metrics)


def steer_answer(answer: Any, body: Mapping, table: Mapping[str, float]) -> Any:
    """The rule judge's answer with each verdict a set P decides, as sampling at
    temperature 0 would (UNSAFE iff P ≥ 0.5; severity 4 or 1)."""
    if not isinstance(answer, dict):
        return answer
    _, fields = parse_prompt(body)
    steered = dict(answer)
    for key, metric in _metrics(body):
        entry = steered if key is None else steered.get(key)
        p = probability_for(metric, fields, table)
        if p is None or not isinstance(entry, dict):
            continue
        entry = dict(entry, verdict="UNSAFE" if p >= 0.5 else "SAFE")
        if "severity" in entry:
            entry["severity"] = 4 if p >= 0.5 else 1
        if key is None:
            steered = entry
        else:
            steered[key] = entry
    return steered


def tokenize(content: str) -> list[str]:
    """The stand-in tokenizer (joined, the tokens are ``content``)."""
    return _TOKEN.findall(content)


def choice_logprobs(body: Mapping, content: str, table: Mapping[str, float]) -> dict:
    """``choices[0].logprobs`` for ``content`` answering ``body``."""
    top_n = body.get("top_logprobs")
    top_n = max(0, min(20, top_n)) if isinstance(top_n, int) else 0
    _, fields = parse_prompt(body)
    mode, _ = answer_shape(body)
    spots: dict[int, dict[str, float]] = {}
    for key, metric in _metrics(body):
        path = (key,) if key else ()
        p = probability_for(metric, fields, table)
        verdict = locate_value(content, (*path, "verdict"))
        if verdict is not None and content[verdict] == '"':
            sampled = content[verdict + 1:verdict + 7].upper().startswith("UNSAFE")
            spots[verdict + 1] = _verdict_alternatives(p, sampled)
        severity = locate_value(content, (*path, "severity"))
        if mode == "scale_1_5" and severity is not None and content[severity].isdigit():
            spots[severity] = _severity_alternatives(p, int(content[severity]))
    entries, at = [], 0
    for token in tokenize(content):
        probs = spots.get(at)
        entries.append(_entry(token, probs, top_n) if probs else _certain(token, top_n))
        at += len(token)
    return {"content": entries, "refusal": None}


def _verdict_alternatives(p: float | None, sampled_unsafe: bool) -> dict[str, float]:
    if p is None:
        p = DEFAULT_CONFIDENCE if sampled_unsafe else 1.0 - DEFAULT_CONFIDENCE
    return {"UN": p, "SAFE": 1.0 - p}


def _severity_alternatives(p: float | None, sampled: int) -> dict[str, float]:
    if p is None:
        rest = (1.0 - _SEVERITY_CONFIDENCE) / 4
        return {str(k): _SEVERITY_CONFIDENCE if k == sampled else rest for k in range(1, 6)}
    unsafe_at = sampled if sampled >= 3 else 4
    safe_at = sampled if sampled <= 2 else 1
    return {str(safe_at): 1.0 - p, str(unsafe_at): p}


def _log(p: float) -> float:
    return math.log(p) if p > 0 else _UNLIKELY


@functools.lru_cache(maxsize=4096)
def _certain(token: str, top_n: int) -> dict:
    """The entry of a token without alternatives; shared between answers (the
    benchmarks' judge writes ~75 of them per answer), so read-only."""
    return _entry(token, {token: 1.0}, top_n)


def _entry(token: str, probs: Mapping[str, float], top_n: int) -> dict:
    ranked = sorted(((t, q) for t, q in probs.items() if q > 0), key=lambda tq: -tq[1])
    return {"token": token, "logprob": _log(probs.get(token, 0.0)),
            "bytes": list(token.encode()),
            "top_logprobs": [{"token": t, "logprob": _log(q), "bytes": list(t.encode())}
                             for t, q in ranked[:top_n]]}
