"""What a judge is: the protocol every judge meets, and what it answers.

The evaluator (:mod:`guardrail.judging.evaluate`) asks a :class:`Judge` and
knows nothing of who answers: the LLM judge over litellm or direct HTTP, a
guard model, a test double (:mod:`guardrail.judges` holds the real ones)::

    reply = await judge(prompt, scoring_mode="binary_yes_no", include_reasoning=False)
    reply.answer.verdict, reply.probability, reply.usage.cost
    group = await judge.judge_group(group_prompt, scoring_mode="binary_yes_no",
                                    include_reasoning=False)
    group.answers["toxicity"]        # the metric's answer, or the JudgeError it failed with
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..errors import JudgeError
from .models import ScoringMode
from .parsing import BinaryAnswer
from .prompts import JudgePrompt

__all__ = ["Judge", "JudgeReply", "GroupReply", "Usage"]


@dataclass
class Usage:
    """Tokens and price spent on one metric (across a repair retry).

    ``cached_tokens`` is the part of ``input_tokens`` the provider served from
    its prompt cache (already priced at the cached rate in ``cost``).
    ``seconds`` is time spent in the transport call itself, measured inside the
    concurrency limit: what the judge took, not time queued behind other calls.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = 0.0
    cached_tokens: int = 0
    seconds: float = 0.0

    def add(self, input_tokens: int, output_tokens: int, cost: float | None,
            cached_tokens: int = 0, seconds: float = 0.0) -> None:
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.cached_tokens += cached_tokens
        self.seconds += seconds
        self.cost = None if cost is None or self.cost is None else self.cost + cost

    def split(self, parts: int) -> list[Usage]:
        """Equal shares of one call's spend whose sums are exactly this usage:
        integer counts give their remainder to the first shares, and the last
        share's cost is what the others leave."""
        shares = [Usage(seconds=self.seconds / parts) for _ in range(parts)]
        for name in ("input_tokens", "output_tokens", "cached_tokens"):
            whole, rest = divmod(getattr(self, name), parts)
            for i, share in enumerate(shares):
                setattr(share, name, whole + (i < rest))
        if self.cost is None:
            for share in shares:
                share.cost = None
        else:
            each = self.cost / parts
            for share in shares[:-1]:
                share.cost = each
            shares[-1].cost = self.cost - each * (parts - 1)
        return shares


@dataclass(frozen=True)
class JudgeReply:
    answer: BinaryAnswer
    usage: Usage = field(default_factory=Usage)
    #: P(UNSAFE) read from the judge's token log-probabilities at the verdict
    #: (None: the provider returned none; the sampled verdict stands).
    probability: float | None = None
    #: scale_1_5 only: P(severity = k) for k in 1..5, when known.
    severity_probs: dict[int, float] | None = None
    #: The judge said it is unsure (a guard's Controversial or Low confidence):
    #: a cascade with ``escalate_on: unsure`` judges it again.
    unsure: bool = False


@dataclass(frozen=True)
class GroupReply:
    """One several-metric call: each metric's answer or error, and its share of the spend."""

    answers: dict[str, BinaryAnswer | JudgeError]
    usage: dict[str, Usage]
    #: Per metric, as :attr:`JudgeReply.probability` / ``severity_probs``.
    probabilities: dict[str, float | None] = field(default_factory=dict)
    severity_probs: dict[str, dict[int, float] | None] = field(default_factory=dict)


class Judge(Protocol):
    """Judge one rendered prompt. Raise :class:`JudgeError` (with ``.usage``)."""

    model: str

    async def __call__(self, prompt: JudgePrompt, *, scoring_mode: ScoringMode,
                       include_reasoning: bool) -> JudgeReply: ...

    async def judge_group(self, prompt: JudgePrompt, *, scoring_mode: ScoringMode,
                          include_reasoning: bool) -> GroupReply: ...
