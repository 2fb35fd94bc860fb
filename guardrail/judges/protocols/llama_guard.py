"""Llama Guard 3 / 4: the conversation as turns; ``safe``, or ``unsafe`` and its codes.

Checked against Meta's model cards (meta-llama/PurpleLlama,
``Llama-Guard3/8B/MODEL_CARD.md``, ``Llama-Guard3/1B/MODEL_CARD.md``,
``Llama-Guard4/12B/MODEL_CARD.md``), the Llama Guard 3 prompt-format page on
llama.com and the Ollama library page of ``llama-guard3``:

- Request: the conversation as ``user`` / ``assistant`` messages; the server
  applies the model's chat template, which writes the task, the S1–S14
  hazard list and the instruction to assess the last turn. The guard
  classifies the last turn; a user turn before the judged answer is its
  context. Categories can be left out where the server runs the Hugging Face
  template (``excluded_category_keys`` in ``chat_template_kwargs`` on vLLM /
  SGLang); Ollama's template takes none.
- Answer: a first line ``safe`` or ``unsafe``; after ``unsafe`` a line of
  comma-separated codes (``S1``…``S14``). Llama Guard 3 8B usually starts
  with a blank line or two.
- Score: the card takes P of the first token ``unsafe`` as the classifier
  score; :attr:`GuardVerdict.p_unsafe` is that P, normalised over
  ``unsafe`` and ``safe`` among the token's top alternatives.

Anything else (a refusal, prose, ``safe`` followed by codes, an unknown code)
is a :class:`GuardAnswerError`::

    protocol = LlamaGuard()
    protocol.request(GuardInput.from_case(case)).messages   # user, assistant turns
    protocol.parse("unsafe\\nS10").categories               # (GuardCategory("S10", "Hate"),)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ...judging.models import MetricRubric
from ...judging.probability import AnswerToken
from .base import (GuardAnswerError, GuardCategory, GuardInput, GuardProtocol, GuardRequest,
                   GuardVerdict, excerpt)
from .tokens import class_probabilities

__all__ = ["LlamaGuard"]

_CODE = re.compile(r"^S[0-9]{1,2}$")
_CLASSES = {"UNSAFE": "unsafe", "SAFE": "safe"}


class LlamaGuard(GuardProtocol):
    """The ``llama_guard`` protocol. ``excluded_categories``: codes the template
    should leave out (sent as ``chat_template_kwargs``; needs a server that
    applies the Hugging Face template)."""

    name = "llama_guard"
    min_max_tokens = 16

    def __init__(self, *, excluded_categories: Sequence[str] = ()) -> None:
        bad = [code for code in excluded_categories if not _CODE.match(code)]
        if bad:
            raise ValueError(f"llama_guard excluded_categories must be codes like S6, got {bad}")
        self.excluded_categories = tuple(excluded_categories)
        self.needs_extra_body = bool(self.excluded_categories)

    def request(self, source: GuardInput, rubric: MetricRubric | None = None,
                criteria: str | None = None) -> GuardRequest:
        extra = ({"chat_template_kwargs": {"excluded_category_keys":
                                           list(self.excluded_categories)}}
                 if self.excluded_categories else None)
        return GuardRequest(messages=source.turns, extra_body=extra)

    def parse(self, text: Any, tokens: Sequence[AnswerToken] | None = None,
              catalog: Mapping[str, str] | None = None) -> GuardVerdict:
        if not isinstance(text, str) or not text.strip():
            raise GuardAnswerError("llama_guard guard returned an empty answer")
        names = catalog if catalog is not None else _default_catalog()
        lines = [(m.start(), m.group(0).strip()) for m in re.finditer(r"[^\n]+", text)
                 if m.group(0).strip()]
        at, first = lines[0]
        word = first.lower()
        if word not in ("safe", "unsafe"):
            raise GuardAnswerError(f"llama_guard answer does not start with safe or unsafe: "
                                   f"{excerpt(text)}")
        rest = [line for _, line in lines[1:]]
        if word == "safe" and rest:
            raise GuardAnswerError(f"llama_guard answered safe followed by more text: "
                                   f"{excerpt(text)}")
        if len(rest) > 1:
            raise GuardAnswerError(f"llama_guard answer has more than one line of categories: "
                                   f"{excerpt(text)}")
        categories = _categories(rest[0], names, text) if rest else ()
        offset = at + text[at:].index(first[0])
        probs = class_probabilities(tokens, text, offset, _CLASSES)
        return GuardVerdict(verdict="UNSAFE" if word == "unsafe" else "SAFE",
                            categories=categories,
                            p_unsafe=probs["UNSAFE"] if probs else None, answer=text)


def _categories(line: str, names: Mapping[str, str], text: str) -> tuple[GuardCategory, ...]:
    codes = [code.strip().upper() for code in line.split(",")]
    found = []
    for code in codes:
        if not _CODE.match(code):
            raise GuardAnswerError(f"llama_guard category line is not a list of codes: "
                                   f"{excerpt(text)}")
        if code not in names:
            raise GuardAnswerError(f"llama_guard answered an unknown category {code}: "
                                   f"{excerpt(text)}")
        category = GuardCategory(code, names[code])
        if category not in found:
            found.append(category)
    return tuple(found)


def _default_catalog() -> Mapping[str, str]:
    from ..categories import load_category_map  # the shipped map names the codes

    return load_category_map("llama_guard").names
