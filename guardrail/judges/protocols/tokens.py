"""P(class) at a guard's verdict word, from the answer's token log-probabilities.

Guard model cards score with the first token's probability: Llama Guard's
card takes P of the ``unsafe`` first token as the classifier score; Granite
Guardian's cookbooks softmax the ``Yes`` and ``No`` mass. Here the token
that carries the verdict word is found by its character offset in the answer,
and its top alternatives are sorted into the card's classes by their leading
word (a non-empty prefix of exactly one class word: ``un`` counts for
``unsafe``, ``Y`` for ``yes``)::

    class_probabilities(tokens, "\\n\\nunsafe\\nS10", 2, {"UNSAFE": "unsafe", "SAFE": "safe"})
    # {"UNSAFE": 0.93, "SAFE": 0.07}

The answer is located inside the tokens' text, so tokens of a reasoning
channel before it (vLLM may return them) do not shift the offsets. None when
the tokens cannot be aligned with the answer or carry no alternative of any
class: the sampled verdict then stands.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Mapping, Sequence

from ...judging.probability import AnswerToken, top_pairs

__all__ = ["class_probabilities"]

_LEAD = re.compile(r"[\s\"'`:*_<>]*([A-Za-z]+|[0-9]+)")


def class_probabilities(tokens: Sequence[AnswerToken] | None, answer: str, offset: int,
                        classes: Mapping[str, str]) -> dict[str, float] | None:
    """P of each class at the token covering ``answer[offset]`` (``classes``:
    label → the word the card answers), normalised over the classes seen."""
    if not tokens:
        return None
    text = "".join(t.token for t in tokens)
    base = text.rfind(answer)
    if base < 0:
        return None
    at = base + offset
    starts, position = [], 0
    for token in tokens:
        starts.append(position)
        position += len(token.token)
    index = bisect.bisect_right(starts, at) - 1
    if index < 0 or at >= position:
        return None
    token = tokens[index]
    before = text[starts[index]:at]
    mass = _mass(_alternatives(token, before), classes)
    total = sum(mass.values())
    return {label: p / total for label, p in mass.items()} if total > 0 else None


def _alternatives(token: AnswerToken, before: str) -> list[tuple[str, float]]:
    """The token's alternatives (the sampled one too) with the text that precedes
    the verdict inside the token removed; spacing-only differences still count."""
    top = top_pairs(token.top)
    if not top:  # the sampled token alone says nothing of the other classes
        return []
    if token.token not in {text for text, _ in top}:
        top.append((token.token, token.logprob))
    out = []
    for text, logprob in top:
        if text.startswith(before):
            out.append((text[len(before):], logprob))
        elif not before.strip():
            out.append((text, logprob))
    return out


def _mass(alternatives: list[tuple[str, float]], classes: Mapping[str, str],
          ) -> dict[str, float]:
    words = {label: word.upper() for label, word in classes.items()}
    mass = dict.fromkeys(classes, 0.0)
    for text, logprob in alternatives:
        match = _LEAD.match(text)
        if not match:
            continue
        lead = match.group(1).upper()
        hits = [label for label, word in words.items() if word.startswith(lead)]
        if len(hits) == 1:  # a prefix of two class words decides nothing
            mass[hits[0]] += math.exp(logprob)
    return mass
