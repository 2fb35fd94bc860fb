"""P(UNSAFE) read from the judge's token log-probabilities at its verdict.

A sampled verdict is one token drawn from a distribution; the distribution
itself says how sure the judge was. OpenAI-compatible servers (OpenAI, vLLM,
llama.cpp) return it when asked (``logprobs: true, top_logprobs: 5``) as
``choices[0].logprobs.content``: one entry per answer token with its top
alternatives. This module rebuilds where each token stands in the answer,
finds the token that starts a metric's ``"verdict"`` value (``"severity"``
in ``scale_1_5`` mode) and sums the probability of the alternatives::

    tokens = read_logprobs(response["choices"][0]["logprobs"])
    answer = AnswerTokens(tokens)
    answer.reading("binary_yes_no")               # Reading(unsafe=0.79, severity=None)
    answer.reading("scale_1_5", metric="bias")    # an entry of a several-metric answer
    expected_severity({1: 0.5, 4: 0.5})           # 2.5

Binary: an alternative counts for UNSAFE when, case-insensitively and after
leading spaces and quotes, it begins with a non-empty prefix of ``UNSAFE``
(``UN``, ``Unsafe``), for SAFE likewise (``S``, ``safe``);
P(UNSAFE) = u / (u + s). ``scale_1_5``: P(k) from the alternatives ``1`` … ``5``
at the severity digit, normalised; P(UNSAFE) = P(3) + P(4) + P(5), because
``passed`` (score ≥ 0.6) means severity ≤ 2. Unknown (None) when the answer
has no such value or no alternative of either kind: the sampled verdict stands.
Pure: no I/O, no provider knowledge beyond the OpenAI response shape.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import msgspec
import orjson

from ..errors import JudgeAnswerError
from .parsing import extract_json_object

__all__ = ["AnswerToken", "TokenLogprob", "Reading", "AnswerTokens", "read_logprobs",
           "expected_severity", "locate_value", "TOP_LOGPROBS", "top_pairs", "token_bytes"]

#: Alternatives asked for per token: OpenAI's maximum was 5 for years (now 20),
#: and the verdict's two classes rarely need more.
TOP_LOGPROBS = 5

_SPACE_QUOTES = " \t\r\n\"'"
_LEAD = re.compile(r"[\s\"']*([A-Za-z]+|[0-9]+)")
_JSON_SPACE = " \t\r\n"
_DECODER = json.JSONDecoder()


class AnswerToken(Protocol):
    """What is read of one answer token (:class:`TokenLogprob`, or the typed
    reader's record in :mod:`guardrail.judges.answers`)."""

    @property
    def token(self) -> str: ...
    @property
    def logprob(self) -> float: ...
    @property
    def top(self) -> Any: ...
    @property
    def raw(self) -> Any: ...


class TokenLogprob(NamedTuple):
    """One answer token: its text, log-probability and top alternatives.

    ``raw`` holds the token's UTF-8 bytes as the server sent them (OpenAI and
    llama.cpp do; a list of byte values, as JSON carries them, or ``bytes``),
    read with :func:`token_bytes`: a character split over two tokens has a
    partial or empty ``token`` string but exact bytes. A tuple, not a
    dataclass: an answer has a hundred or more of them."""

    token: str
    logprob: float
    #: ``(text, logprob)`` pairs, or the provider's alternatives as sent
    #: (read with :func:`top_pairs` when needed).
    top: Sequence[Any] = ()
    raw: Sequence[int] | bytes | None = None


class Reading(NamedTuple):
    """What the tokens say at one verdict: P(UNSAFE) and, in ``scale_1_5``
    mode, P(severity = k) for k in 1..5 (None: unknown)."""

    unsafe: float | None
    severity: dict[int, float] | None = None


def _get(obj: Any, name: str) -> Any:
    # The direct HTTP client hands dicts (checked first: an ABC check is not
    # free, and this runs for every alternative read); litellm hands pydantic objects.
    if type(obj) is dict or isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _raw_bytes(value: Any) -> bytes | None:
    if not isinstance(value, (list, tuple)):
        return None
    try:
        return bytes(value)
    except (TypeError, ValueError):
        return None


def read_logprobs(logprobs: Any) -> tuple[TokenLogprob, ...] | None:
    """The tokens of ``choices[0].logprobs`` (a dict or litellm's object);
    None when the response carries none or they are malformed."""
    content = _get(logprobs, "content") if logprobs is not None else None
    if not isinstance(content, (list, tuple)) or not content:
        return None
    tokens = []
    for item in content:
        if isinstance(item, dict):  # the direct HTTP client's shape: no per-field dispatch
            token, logprob = item.get("token"), item.get("logprob")
            top, raw = item.get("top_logprobs"), item.get("bytes")
        else:
            token, logprob = _get(item, "token"), _get(item, "logprob")
            top, raw = _get(item, "top_logprobs"), _get(item, "bytes")
        if not isinstance(token, str) or not _number(logprob):
            return None
        # The alternatives stay as sent: only the few tokens at a verdict are
        # ever read (see top_pairs), and converting all of them was most of
        # the worker's cost of a response with log-probabilities.
        sent = raw if isinstance(raw, (list, tuple, bytes)) else None
        tokens.append(TokenLogprob(token, float(logprob), top or (), sent))
    return tuple(tokens)


def token_bytes(token: AnswerToken) -> bytes | None:
    """A token's bytes as sent (None: not sent, or not byte values). An ASCII
    token with as many bytes as characters is its own encoding (a judge's JSON
    is nearly all such tokens), so its byte values are not converted one by one."""
    text, raw = token.token, token.raw
    if isinstance(raw, bytes):
        return raw
    if text and text.isascii() and isinstance(raw, (list, tuple)) and len(raw) == len(text):
        return text.encode()
    return _raw_bytes(raw)


def top_pairs(top: Any) -> list[tuple[str, float]]:
    """A token's alternatives as ``(text, logprob)`` pairs: pairs pass as they
    are, a provider's objects or dicts are read; malformed ones are skipped."""
    if isinstance(top, msgspec.Raw):  # left undecoded by guardrail.judges.answers
        try:
            top = orjson.loads(bytes(top))
        except orjson.JSONDecodeError:
            return []
        if not isinstance(top, list):
            return []
    pairs = []
    for alt in top:
        if isinstance(alt, tuple):
            text, value = alt
        else:
            text, value = _get(alt, "token"), _get(alt, "logprob")
        if isinstance(text, str) and _number(value):
            pairs.append((text, float(value)))
    return pairs


def expected_severity(probs: Mapping[int, float]) -> float:
    """Σ k·P(k) over a severity distribution (normalised here, to be safe)."""
    total = sum(probs.values())
    return sum(k * p for k, p in probs.items()) / total if total > 0 else math.nan


class AnswerTokens:
    """An answer rebuilt from its tokens, ready to be read at any verdict.

    Offsets are rebuilt from the tokens' bytes when every token has them, else
    from their strings (exact for the ASCII JSON a judge writes)."""

    def __init__(self, tokens: Sequence[AnswerToken]) -> None:
        self.tokens = tokens
        texts = [t.token for t in tokens]
        text, lengths = "".join(texts), list(map(len, texts))
        if text.isascii() and _as_many_bytes(tokens, lengths):
            # Nearly every answer: each token is its own encoding, whether or
            # not its bytes were sent, so nothing is converted token by token.
            self._data = text.encode()
        else:
            sent = [token_bytes(t) for t in tokens]
            exact = all(piece is not None for piece in sent)
            pieces = [piece if exact else t.token.encode()  # type: ignore[misc]
                      for piece, t in zip(sent, tokens)]
            self._data, lengths = b"".join(pieces), list(map(len, pieces))
        self._starts = list(itertools.accumulate(lengths, initial=0))[:-1]
        # surrogateescape: a stray byte keeps its place, so offsets stay exact.
        self.text = self._data.decode("utf-8", "surrogateescape")
        self._ascii = self.text.isascii()  # then a character's offset is its byte's
        self._object = _object_start(self.text)
        #: The members of each object read so far, by its offset: a
        #: several-metric answer is read once per metric.
        self._objects: dict[int, dict[str, int]] = {}

    def reading(self, scoring_mode: str, metric: str | None = None) -> Reading:
        """P(UNSAFE) at the answer's verdict, or at ``metric``'s entry of a
        several-metric answer. ``Reading(None)`` when it cannot be read."""
        key = "severity" if scoring_mode == "scale_1_5" else "verdict"
        path = (metric, key) if metric is not None else (key,)
        at = locate_value(self.text, path, start=self._object, objects=self._objects)
        # A verdict is a string, a severity a bare number: anything else is not ours.
        if at is None or (key == "verdict") != (self.text[at] == '"'):
            return Reading(None)
        first = at + 1 if key == "verdict" else at
        alternatives = self._alternatives(first)
        if alternatives is None:
            return Reading(None)
        if key == "severity":
            return _severity_reading(alternatives)
        return Reading(_unsafe_share(alternatives))

    def _alternatives(self, char: int) -> list[tuple[str, float]] | None:
        """The alternatives of the token covering character ``char``, each
        with that token's text before ``char`` removed (a token may begin
        with the quote or the space before the value)."""
        at = char if self._ascii else len(self.text[:char].encode("utf-8", "surrogateescape"))
        index = bisect.bisect_right(self._starts, at) - 1
        if index < 0:
            return None
        token = self.tokens[index]
        top = top_pairs(token.top)
        if not top:  # the sampled token alone says nothing of the other class
            return None
        before = self._data[self._starts[index]:at].decode("utf-8", "surrogateescape")
        seen = {text for text, _ in top}
        pairs = top + ([] if token.token in seen else [(token.token, token.logprob)])
        out = []
        for text, logprob in pairs:
            if text.startswith(before):
                out.append((text[len(before):], logprob))
            elif not before.strip(_SPACE_QUOTES):  # only spacing differs: still this value
                out.append((text, logprob))
        return out


def _as_many_bytes(tokens: Sequence[AnswerToken], lengths: list[int]) -> bool:
    """Whether every token that came with its bytes has one per character."""
    raws = [t.raw for t in tokens]
    if None not in raws:
        return list(map(len, raws)) == lengths
    return [length if raw is None else len(raw) for raw, length in zip(raws, lengths)] == lengths


def _lead(text: str) -> str | None:
    match = _LEAD.match(text)
    return match.group(1).upper() if match else None


def _unsafe_share(alternatives: list[tuple[str, float]]) -> float | None:
    unsafe = safe = 0.0
    for text, logprob in alternatives:
        word = _lead(text)
        if not word:
            continue
        if "UNSAFE".startswith(word):
            unsafe += math.exp(logprob)
        elif "SAFE".startswith(word):
            safe += math.exp(logprob)
    return unsafe / (unsafe + safe) if unsafe + safe > 0 else None


def _severity_reading(alternatives: list[tuple[str, float]]) -> Reading:
    mass: dict[int, float] = {}
    for text, logprob in alternatives:
        word = _lead(text)
        if word is not None and word in {"1", "2", "3", "4", "5"}:
            mass[int(word)] = mass.get(int(word), 0.0) + math.exp(logprob)
    total = sum(mass.values())
    if total <= 0:
        return Reading(None)
    probs = {k: mass.get(k, 0.0) / total for k in range(1, 6)}
    return Reading(probs[3] + probs[4] + probs[5], probs)


def locate_value(text: str, path: tuple[str, ...], *, start: int | None = -1,
                 objects: dict[int, dict[str, int]] | None = None) -> int | None:
    """Where the value at ``path`` begins in the JSON object of an answer
    (``("verdict",)``, or ``("toxicity", "verdict")`` in a several-metric
    answer); None when it has none. ``start``: the object's offset, if known;
    ``objects``: the members of the objects read so far, by offset, kept
    between calls on one text (filled as they are read)."""
    start = _object_start(text) if start == -1 else start
    if start is None:
        return None
    try:
        return _member(text, start, path, {} if objects is None else objects)
    except (IndexError, ValueError):  # not the JSON it parsed as: say nothing
        return None


def _object_start(text: str) -> int | None:
    """Where the JSON object the parser reads (bare, fenced or amid prose) begins."""
    lead = len(text) - len(text.lstrip())
    if text.startswith("{", lead):  # a bare object, where the parser looks first
        try:
            if isinstance(json.loads(text), dict):
                return lead
        except ValueError:
            pass
    try:
        data = extract_json_object(text)
    except JudgeAnswerError:
        return None
    for match in re.finditer(r"\{", text):
        try:
            value, _ = _DECODER.raw_decode(text, match.start())
        except ValueError:
            continue
        if value == data:
            return match.start()
    return None


def _skip(text: str, i: int) -> int:
    while text[i] in _JSON_SPACE:
        i += 1
    return i


def _member(text: str, start: int, path: tuple[str, ...],
            objects: dict[int, dict[str, int]]) -> int | None:
    """Offset of the value at ``path`` inside the object at ``start`` (the last
    occurrence of a repeated key, as ``json.loads`` keeps), or None; each
    object's members read once into ``objects``."""
    members = objects.get(start)
    if members is None:
        members = objects[start] = _members(text, start)
    at = members.get(path[0])
    if at is None or len(path) == 1:
        return at
    return _member(text, at, path[1:], objects) if text[at] == "{" else None


def _members(text: str, start: int) -> dict[str, int]:
    """Each key of the object at ``start`` and where its value begins (a
    repeated key: its last occurrence). Raises ValueError or IndexError on
    what is not a JSON object."""
    found: dict[str, int] = {}
    i = _skip(text, start + 1)
    if text[i] == "}":
        return found
    while True:
        if text[i] != '"':
            raise ValueError("expected a key")
        key, i = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
        i = _skip(text, i)
        if text[i] != ":":
            raise ValueError("expected ':'")
        found[key] = i = _skip(text, i + 1)
        _, i = _DECODER.raw_decode(text, i)
        i = _skip(text, i)
        if text[i] != ",":
            return found
        i = _skip(text, i + 1)
