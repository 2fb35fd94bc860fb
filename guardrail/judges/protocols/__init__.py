"""Guard judge protocols: one module per model family's request and answer format.

    protocol = make_protocol("qwen3guard")
    protocol = make_protocol("yes_no", flavor="granite3.3", policy_via="system")
    sorted(PROTOCOLS)   # ['llama_guard', 'moderation', 'policy', 'qwen3guard', 'yes_no']

Each protocol builds the request its model card specifies and parses exactly
what the model answers into a :class:`GuardVerdict`, or raises
:class:`GuardAnswerError` (never a SAFE verdict for an answer it cannot read).
"""

from __future__ import annotations

from typing import Any

from .base import (CONTEXT_CHARS, GuardAnswerError, GuardCategory, GuardCoverageError,
                   GuardInput, GuardProtocol, GuardRequest, GuardVerdict, Label, excerpt,
                   final_answer, rubric_definition)
from .llama_guard import LlamaGuard
from .moderation import FLAG_AT, Moderation
from .policy import Policy, render_policy
from .qwen3guard import Qwen3Guard
from .tokens import class_probabilities
from .yes_no import Flavor, YesNo, criteria_category

__all__ = ["PROTOCOLS", "make_protocol", "GuardProtocol", "GuardVerdict", "GuardCategory",
           "GuardRequest", "GuardInput", "GuardAnswerError", "GuardCoverageError", "Label",
           "LlamaGuard", "YesNo", "Flavor", "Qwen3Guard", "Policy", "Moderation", "FLAG_AT",
           "class_probabilities", "final_answer", "excerpt", "rubric_definition",
           "render_policy", "criteria_category", "CONTEXT_CHARS"]

#: The guard protocols by their ``judge_protocol`` name.
PROTOCOLS: dict[str, type[GuardProtocol]] = {
    "llama_guard": LlamaGuard, "yes_no": YesNo, "qwen3guard": Qwen3Guard,
    "policy": Policy, "moderation": Moderation}


def make_protocol(name: str, **options: Any) -> GuardProtocol:
    """The protocol called ``name`` with its options; ValueError naming the
    known ones for an unknown name or option."""
    try:
        kind = PROTOCOLS[name]
    except KeyError:
        raise ValueError(f"unknown guard protocol {name!r} (known: "
                         f"{', '.join(sorted(PROTOCOLS))})") from None
    try:
        return kind(**options)
    except TypeError as exc:
        raise ValueError(f"guard protocol {name}: {exc}") from None
