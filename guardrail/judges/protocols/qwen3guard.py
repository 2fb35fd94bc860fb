"""Qwen3Guard-Gen: the conversation as turns; ``Safety:`` and ``Categories:`` lines.

Checked against the Qwen3Guard README (QwenLM/Qwen3Guard ``README.md``:
the Transformers and OpenAI-compatible examples, the vLLM / SGLang serving
commands and the "Safety Policy" section) and the model cards of
``Qwen/Qwen3Guard-Gen-0.6B`` … ``-8B``:

- Request: ``user`` (and, to moderate a response, ``assistant``) messages;
  the server applies the model's chat template. Nothing else is sent.
- Answer: a line ``Safety: Safe``, ``Safety: Unsafe`` or ``Safety:
  Controversial``; a line ``Categories: …`` (comma-separated names, or
  ``None``); for a response, a line ``Refusal: Yes`` or ``Refusal: No``.
- ``Controversial`` (harm that depends on context or policy) is the unsure
  band: :class:`GuardVerdict` says ``UNSURE`` and the caller decides whether
  it counts as UNSAFE or SAFE, or escalates it.
- P of each label from the label token's alternatives (``p_unsafe`` for
  Unsafe, ``p_unsure`` for Controversial, normalised over the three).

A missing or repeated ``Safety`` line, an unknown category or any other line
is a :class:`GuardAnswerError`::

    Qwen3Guard().parse("Safety: Unsafe\\nCategories: Violent").categories
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ...judging.models import MetricRubric
from ...judging.probability import AnswerToken
from .base import (GuardAnswerError, GuardCategory, GuardInput, GuardProtocol, GuardRequest,
                   GuardVerdict, Label, excerpt)
from .tokens import class_probabilities

__all__ = ["Qwen3Guard"]

_LINE = re.compile(r"^[ \t]*(Safety|Categories|Refusal)[ \t]*:[ \t]*(.*?)[ \t]*$")
_LABELS: dict[str, Label] = {"safe": "SAFE", "unsafe": "UNSAFE", "controversial": "UNSURE"}
_CLASSES = {"SAFE": "safe", "UNSAFE": "unsafe", "UNSURE": "controversial"}


class Qwen3Guard(GuardProtocol):
    """The ``qwen3guard`` protocol: one call per case, categories mapped to metrics."""

    name = "qwen3guard"
    min_max_tokens = 64

    def request(self, source: GuardInput, rubric: MetricRubric | None = None,
                criteria: str | None = None) -> GuardRequest:
        return GuardRequest(messages=source.turns)

    def parse(self, text: Any, tokens: Sequence[AnswerToken] | None = None,
              catalog: Mapping[str, str] | None = None) -> GuardVerdict:
        if not isinstance(text, str) or not text.strip():
            raise GuardAnswerError("qwen3guard guard returned an empty answer")
        names = catalog if catalog is not None else _default_catalog()
        fields = _fields(text)
        if "Safety" not in fields:
            raise GuardAnswerError(f"qwen3guard answer has no Safety line: {excerpt(text)}")
        value, offset = fields["Safety"]
        label = _LABELS.get(value.lower())
        if label is None:
            raise GuardAnswerError(f"qwen3guard Safety is not Safe, Unsafe or Controversial: "
                                   f"{excerpt(text)}")
        categories = _categories(fields.get("Categories", ("None", 0))[0], names, text)
        refusal = fields.get("Refusal")
        if refusal is not None and refusal[0].lower() not in ("yes", "no"):
            raise GuardAnswerError(f"qwen3guard Refusal is not Yes or No: {excerpt(text)}")
        probs = class_probabilities(tokens, text, offset, _CLASSES)
        return GuardVerdict(verdict=label, categories=categories,
                            p_unsafe=probs["UNSAFE"] if probs else None,
                            p_unsure=probs["UNSURE"] if probs else None,
                            refusal=None if refusal is None else refusal[0].lower() == "yes",
                            answer=text)


def _fields(text: str) -> dict[str, tuple[str, int]]:
    """Each known line's value and where the value starts; anything else fails."""
    fields: dict[str, tuple[str, int]] = {}
    for line in re.finditer(r"[^\n]+", text):
        if not line.group(0).strip():
            continue
        match = _LINE.match(line.group(0))
        if match is None:
            raise GuardAnswerError(f"qwen3guard answer has a line outside its format: "
                                   f"{excerpt(text)}")
        key = match.group(1)
        if key in fields:
            raise GuardAnswerError(f"qwen3guard answer repeats its {key} line: {excerpt(text)}")
        fields[key] = (match.group(2), line.start() + match.start(2))
    return fields


def _categories(value: str, names: Mapping[str, str], text: str) -> tuple[GuardCategory, ...]:
    found: list[GuardCategory] = []
    for part in (p.strip() for p in value.split(",")):
        if not part or part == "None":
            continue
        if part not in names:
            raise GuardAnswerError(f"qwen3guard answered an unknown category {part!r}: "
                                   f"{excerpt(text)}")
        category = GuardCategory(part, names[part])
        if category not in found:
            found.append(category)
    return tuple(found)


def _default_catalog() -> Mapping[str, str]:
    from ..categories import load_category_map  # the shipped map names the categories

    return load_category_map("qwen3guard").names
