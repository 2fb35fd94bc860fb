"""How much of a session's consecutive judge prompts a provider's prompt cache
can reuse: each judgment's prompt against the one before it::

    prompts = session_prompts(turns, session_id="conv-42", every=3)
    share = prefix_share(prompts)
    share.prompt_chars, share.shared_chars, share.share     # e.g. 412_000, 371_000, 0.90

A prefix-caching judge (OpenAI, vLLM, llama.cpp) bills or computes only what
follows the shared prefix anew, so ``prompt_chars - shared_chars`` is what such
a judge reads fresh; without a cache, all of ``prompt_chars``. Used by
``bench/runs_sessions/session_prefix.py`` and the prefix tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...judging.models import Case, MetricRubric, ScoringMode
from ...judging.prompts import render_group_prompt
from ...judging.rubrics import session_metrics
from .case import session_case
from .transcript import ordered_turns
from .turns import Turn

__all__ = ["PrefixShare", "prompt_text", "shared_prefix", "prefix_share", "session_prompts"]


@dataclass(frozen=True)
class PrefixShare:
    """Characters of ``judgments`` prompts, and of them those each shares with the
    prompt before it (the first prompt shares nothing)."""

    judgments: int
    prompt_chars: int
    shared_chars: int

    @property
    def share(self) -> float:
        return self.shared_chars / self.prompt_chars if self.prompt_chars else 0.0

    @property
    def fresh_chars(self) -> int:
        """What a prefix-caching judge reads anew."""
        return self.prompt_chars - self.shared_chars


def prompt_text(messages: Sequence[dict[str, str]]) -> str:
    """A prompt's messages as the one text a prefix cache compares."""
    return "".join(f"\x00{m['role']}\x00{m['content']}" for m in messages)


def shared_prefix(a: str, b: str) -> int:
    """Characters at the start of ``a`` and ``b`` that are the same (a binary
    search on slices: prompts are tens of thousands of characters)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def prefix_share(prompts: Sequence[str]) -> PrefixShare:
    """The prefix each prompt shares with the one before it, summed."""
    shared = sum(shared_prefix(before, after) for before, after in zip(prompts, prompts[1:]))
    return PrefixShare(len(prompts), sum(len(p) for p in prompts), shared)


def session_prompts(turns: Sequence[Turn], *, session_id: str, every: int = 3,
                    max_chars: int = 24_000, metrics: Sequence[MetricRubric] | None = None,
                    scoring_mode: ScoringMode = "binary_yes_no") -> list[str]:
    """The group prompt of each judgment of a session judged after every
    ``every`` turns and at its last turn (as ``session_judge_every`` does)."""
    ordered = ordered_turns(turns)
    points = [n for n in range(every, len(ordered) + 1, every)]
    if not points or points[-1] != len(ordered):
        points.append(len(ordered))
    rubrics = list(metrics or session_metrics())
    prompts = []
    for n in points:
        case = Case.model_validate(session_case(ordered[:n], session_id=session_id,
                                                max_chars=max_chars))
        prompt = render_group_prompt(rubrics, case, scoring_mode=scoring_mode,
                                     include_reasoning=False)
        prompts.append(prompt_text(prompt.messages))
    return prompts
