"""Yes/No guards: Granite Guardian 3.x and ShieldGemma, the metric's rubric as the risk.

``Yes`` means the risk IS present (the text violates the policy): UNSAFE.
Checked against IBM's cookbooks (ibm-granite/granite-guardian:
``cookbooks/granite-guardian-3.2/quick_start_vllm.ipynb``,
``cookbooks/granite-guardian-3.3/quickstart.ipynb``, the Ollama guides
``cookbooks/granite-guardian-3.0/detailed_guide_ollama.ipynb`` and
``…-3.3/detailed_guide_think_ollama.ipynb``, and
``evaluation/models/granite_guardian_3*.py``), Google's ShieldGemma model
card and the Ollama library page of ``shieldgemma``:

- Granite Guardian 3.0–3.2 (``flavor="granite"``): the risk goes in
  ``guardian_config`` — ``risk_name`` for a pre-baked one (``social_bias``),
  ``risk_name`` + ``risk_definition`` for your own. Answer ``Yes`` / ``No``;
  3.2 adds ``<confidence> High </confidence>`` (or ``Low``).
- Granite Guardian 3.3 (``flavor="granite3.3"``): ``guardian_config`` takes
  ``criteria_id`` or ``custom_criteria``; answer ``<score> yes </score>``,
  after a ``<think>…</think>`` trace in thinking mode (never parsed).
- ShieldGemma (``flavor="shieldgemma"``): the policy is the template's
  ``guideline`` (``"Name": definition``); answer starts with ``Yes`` / ``No``.
  Ollama's ShieldGemma template hard-codes its four policies and reads no
  policy from the request, so this flavor needs a server that applies the
  Hugging Face template (vLLM, SGLang).

``policy_via``: ``chat_template_kwargs`` (vLLM / SGLang: the kwargs above,
sent in the request body) or ``system`` (Ollama's Granite Guardian models read
the criterion from the system message: a pre-baked id or your own text).
The metric's rubric (goal and violations, see
:func:`~guardrail.judges.protocols.base.rubric_definition`) is the risk
definition, so custom metrics work; a pre-baked criterion id replaces it
where the category map says so (``rubrics/guards/yes_no.yaml``).
P(UNSAFE) = P(Yes) from the verdict token's alternatives (the cookbooks'
softmax over the Yes and No mass).

An answer that is not exactly the verdict (plus the confidence tag) is a
:class:`GuardAnswerError`: ``No, but here is how…`` is not a ``No``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ...judging.models import MetricRubric
from ...judging.probability import AnswerToken
from .base import (GuardAnswerError, GuardCategory, GuardInput, GuardProtocol, GuardRequest,
                   GuardVerdict, excerpt, final_answer, rubric_definition)
from .tokens import class_probabilities

__all__ = ["YesNo", "Flavor", "criteria_category"]

Flavor = Literal["granite", "granite3.3", "shieldgemma"]
_CLASSES = {"UNSAFE": "yes", "SAFE": "no"}
_SCORE = re.compile(r"<score>\s*(.*?)\s*</score>", re.DOTALL | re.IGNORECASE)
_WORD = re.compile(r"\s*([A-Za-z]+)")
_CONFIDENCE = re.compile(r"\s*<confidence>\s*(High|Low)\s*</confidence>\s*$", re.IGNORECASE)


class YesNo(GuardProtocol):
    """The ``yes_no`` protocol; one call per metric."""

    name = "yes_no"
    per_metric = True
    min_max_tokens = 24

    def __init__(self, *, flavor: Flavor = "granite",
                 policy_via: Literal["chat_template_kwargs", "system"] = "chat_template_kwargs",
                 ) -> None:
        if flavor not in ("granite", "granite3.3", "shieldgemma"):
            raise ValueError(f"yes_no flavor must be granite, granite3.3 or shieldgemma, "
                             f"got {flavor!r}")
        if policy_via not in ("chat_template_kwargs", "system"):
            raise ValueError(f"yes_no policy_via must be chat_template_kwargs or system, "
                             f"got {policy_via!r}")
        if flavor == "shieldgemma" and policy_via == "system":
            raise ValueError("yes_no flavor shieldgemma reads its policy from the template's "
                             "guideline only: use policy_via chat_template_kwargs (vLLM, SGLang)")
        self.flavor, self.policy_via = flavor, policy_via
        self.needs_extra_body = policy_via == "chat_template_kwargs"

    @property
    def takes_criteria_ids(self) -> bool:
        """Whether the model has pre-baked criteria ids (Granite Guardian)."""
        return self.flavor != "shieldgemma"

    def request(self, source: GuardInput, rubric: MetricRubric | None = None,
                criteria: str | None = None) -> GuardRequest:
        """``criteria``: a pre-baked criterion id, used instead of the rubric."""
        if criteria is None and rubric is None:
            raise ValueError("yes_no needs the metric's rubric or a pre-baked criterion")
        definition = rubric_definition(rubric) if criteria is None else None
        if self.policy_via == "system":
            system = {"role": "system", "content": criteria or definition}
            return GuardRequest(messages=(system, *source.turns))
        kwargs = self._template_kwargs(rubric, criteria, definition)
        return GuardRequest(messages=source.turns,
                            extra_body={"chat_template_kwargs": kwargs})

    def _template_kwargs(self, rubric: MetricRubric | None, criteria: str | None,
                         definition: str | None) -> dict[str, Any]:
        if self.flavor == "shieldgemma":
            title = (rubric.name if rubric else criteria or "").replace("_", " ").title()
            return {"guideline": f'"{title}": {definition or criteria}'}
        if self.flavor == "granite3.3":
            config = {"criteria_id": criteria} if criteria else {"custom_criteria": definition}
        elif criteria:
            config = {"risk_name": criteria}
        else:
            name = rubric.name if rubric else "custom"
            config = {"risk_name": name, "risk_definition": definition}
        return {"guardian_config": config}

    def parse(self, text: Any, tokens: Sequence[AnswerToken] | None = None,
              catalog: Mapping[str, str] | None = None) -> GuardVerdict:
        body, start = final_answer(text, self.name)
        scores = list(_SCORE.finditer(body))
        if scores:
            word, offset, confidence = _scored(body, scores[-1], text)
        else:
            word, offset, confidence = _leading(body, text)
        probs = class_probabilities(tokens, text, start + offset, _CLASSES)
        return GuardVerdict(verdict="UNSAFE" if word == "yes" else "SAFE",
                            p_unsafe=probs["UNSAFE"] if probs else None,
                            confidence=confidence, answer=text)


def _scored(body: str, match: re.Match[str], text: str) -> tuple[str, int, None]:
    """Granite Guardian 3.3: the last ``<score>`` tag holds exactly yes or no."""
    word = match.group(1).strip().lower()
    if word not in ("yes", "no"):
        raise GuardAnswerError(f"yes_no score is neither yes nor no: {excerpt(text)}")
    outside = (body[:match.start()] + body[match.end():]).strip()
    if outside:
        raise GuardAnswerError(f"yes_no answer has text besides its score: {excerpt(text)}")
    return word, match.start(1), None


def _leading(body: str, text: str) -> tuple[str, int, str | None]:
    """Granite Guardian 3.0–3.2 and ShieldGemma: the answer is the word itself,
    optionally followed by 3.2's confidence tag or a full stop."""
    match = _WORD.match(body)
    if match is None or match.group(1).lower() not in ("yes", "no"):
        raise GuardAnswerError(f"yes_no answer is neither Yes nor No: {excerpt(text)}")
    word, rest = match.group(1).lower(), body[match.end():]
    confidence = _CONFIDENCE.match(rest)
    if confidence:
        return word, match.start(1), confidence.group(1).capitalize()
    if rest.strip() not in ("", "."):
        raise GuardAnswerError(f"yes_no answer has text after its verdict: {excerpt(text)}")
    return word, match.start(1), None


def criteria_category(criteria: str, catalog: Mapping[str, str]) -> GuardCategory:
    """The violation label of a pre-baked criterion: ``social_bias: Social Bias``."""
    return GuardCategory(criteria, catalog.get(criteria, criteria))
