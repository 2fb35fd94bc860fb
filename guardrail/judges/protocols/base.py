"""What every guard protocol shares: the request, the answer, the errors, the input.

A guard protocol is a small object that knows one model family's card: how to
ask (:meth:`GuardProtocol.request`) and how to read the answer
(:meth:`GuardProtocol.parse`)::

    source = GuardInput.from_case(case)              # the turns the guard reads
    request = protocol.request(source, rubric)       # GuardRequest(messages, extra_body)
    verdict = protocol.parse(text, tokens)           # GuardVerdict, or GuardAnswerError
    verdict.verdict, verdict.categories, verdict.p_unsafe

Nothing here guesses: an answer outside the card's format raises
:class:`GuardAnswerError` (a :class:`~guardrail.errors.JudgeAnswerError`),
never a SAFE verdict. A metric the guard cannot judge raises
:class:`GuardCoverageError`, naming the judge and the metric.

Reasoning text is never read as a verdict: :func:`final_answer` drops
``<think>…</think>`` blocks and, in harmony-formatted text (gpt-oss), keeps
the ``final`` channel only. Servers that separate reasoning (vLLM's
``reasoning_content``, Ollama's ``reasoning``) never hand it to the parser at
all: the transports read ``message.content`` only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ...errors import JudgeAnswerError
from ...judging.models import Case, MetricRubric
from ...judging.probability import AnswerToken

__all__ = ["GuardAnswerError", "GuardCoverageError", "GuardCategory", "GuardVerdict",
           "GuardRequest", "GuardInput", "GuardProtocol", "Label", "final_answer", "excerpt",
           "rubric_definition", "CONTEXT_CHARS"]

#: What a guard said: SAFE, UNSAFE, or UNSURE (Qwen3Guard's ``Controversial``).
Label = Literal["SAFE", "UNSAFE", "UNSURE"]
#: Characters of earlier turns sent as context before the judged exchange
#: (the same default budget as the rubric judge's ``conversation`` field).
CONTEXT_CHARS = 8000

_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_HARMONY_FINAL = re.compile(r"<\|channel\|>\s*final\s*(?:<\|constrain\|>\s*\S*\s*)?<\|message\|>")
_HARMONY_END = re.compile(r"<\|(?:end|return|call)\|>")


class GuardAnswerError(JudgeAnswerError):
    """The guard answered outside its card's format (a refusal, garbage, nothing)."""


class GuardCoverageError(JudgeAnswerError):
    """The guard cannot judge this metric: the caller escalates it or records the error."""

    #: Read by the evaluator: the metric goes to a cascade's second stage.
    uncovered = True

    def __init__(self, judge: str, metric: str, why: str = "") -> None:
        reason = f": {why}" if why else ""
        super().__init__(f"guard judge {judge} does not cover metric {metric!r}{reason}")
        self.judge, self.metric = judge, metric


@dataclass(frozen=True)
class GuardCategory:
    """A category the guard named: its code as answered and its name."""

    code: str
    name: str

    @property
    def label(self) -> str:
        """``S10: Hate``, or the name alone when the guard answers with names."""
        return self.name if self.code == self.name else f"{self.code}: {self.name}"


@dataclass(frozen=True)
class GuardVerdict:
    """One parsed guard answer, exactly what the model said.

    ``p_unsafe``: P(UNSAFE) from the answer's first-token log-probabilities,
    normalised over the classes the card defines (None: none sent). For
    Qwen3Guard, ``p_unsure`` is P(Controversial) on the same scale. For a
    moderation endpoint ``scores`` holds every category score and
    ``categories`` the flagged ones. ``confidence`` is Granite Guardian 3.2's
    verbalised confidence, ``refusal`` Qwen3Guard's refusal line, ``rationale``
    a policy model's own justification from its final answer.
    """

    verdict: Label
    categories: tuple[GuardCategory, ...] = ()
    p_unsafe: float | None = None
    p_unsure: float | None = None
    scores: tuple[tuple[str, float], ...] = ()
    confidence: str | None = None
    refusal: bool | None = None
    rationale: str | None = None
    answer: str = field(default="", repr=False)


@dataclass(frozen=True)
class GuardRequest:
    """Chat messages for the server (which applies the model's chat template)
    and, when the card needs them, fields merged into the request body
    (``chat_template_kwargs`` on vLLM and SGLang)."""

    messages: tuple[dict[str, str], ...]
    extra_body: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class GuardInput:
    """The conversation a guard judges: alternating turns opening with a user
    turn, the last one the judged text (an assistant turn when the case has
    one, else the text alone as a user turn: chat templates require a
    conversation to open with the user)."""

    turns: tuple[dict[str, str], ...]

    @property
    def judged(self) -> str:
        return self.turns[-1]["content"]

    @classmethod
    def from_case(cls, case: Case, *, context_chars: int = CONTEXT_CHARS) -> GuardInput:
        """The case's user and assistant messages up to its input, the output last;
        ``input`` when it is not already the last user turn; earlier turns kept
        newest first within ``context_chars``. What came between the input and
        the output (an agent run's steps, its tool calls) is never sent. A session
        judgment (:func:`guardrail.assembly.sessions.session_case`) carries its turns as
        ``messages`` and its latest answer as ``output``: the guard reads the
        session's latest turns within the budget, the latest answer judged."""
        output = (case.output or "").strip()
        if not output:
            raise GuardAnswerError("nothing to judge: the case has no output")
        turns = [(m.role, m.text.strip()) for m in case.messages or ()
                 if m.role in ("user", "assistant") and m.text.strip()]
        while turns and turns[-1][0] != "user":  # the steps after the input: the trajectory
            turns.pop()
        given = (case.input or "").strip()
        users = [text for role, text in turns if role == "user"]
        if given and (not users or users[-1] != given):
            turns.append(("user", given))
        return cls._build(turns, output, context_chars)

    @classmethod
    def _build(cls, turns: list[tuple[str, str]], output: str, budget: int) -> GuardInput:
        merged: list[list[str]] = []
        for role, text in turns:  # templates want strict alternation: merge repeats
            if merged and merged[-1][0] == role:
                merged[-1][1] += "\n\n" + text
            else:
                merged.append([role, text])
        while merged and merged[0][0] == "assistant":  # a greeting before any user turn
            merged.pop(0)
        kept: list[list[str]] = []
        if merged:
            kept.append(merged.pop())  # the judged exchange's user turn always goes
        while merged and sum(len(t) for _, t in kept) + len(merged[-1][1]) <= budget:
            kept.insert(0, merged.pop())
        while kept and kept[0][0] == "assistant":
            kept.pop(0)
        last = "assistant" if kept else "user"
        return cls(tuple({"role": r, "content": t} for r, t in kept)
                   + ({"role": last, "content": output},))


class GuardProtocol:
    """One model family's request and answer format (subclasses fill these in).

    ``per_metric``: one call per metric, the metric's rubric as the policy
    (else one call per case, categories mapped to metrics).
    ``min_max_tokens``: the least answer budget the card's answers need.
    ``needs_extra_body``: requests carry ``chat_template_kwargs``.
    """

    name: str = ""
    per_metric: bool = False
    min_max_tokens: int = 16
    needs_extra_body: bool = False

    def request(self, source: GuardInput, rubric: MetricRubric | None = None,
                criteria: str | None = None) -> GuardRequest:
        raise NotImplementedError

    def parse(self, text: Any, tokens: Sequence[AnswerToken] | None = None,
              catalog: Mapping[str, str] | None = None) -> GuardVerdict:
        raise NotImplementedError


def final_answer(text: Any, protocol: str) -> tuple[str, int]:
    """The answer without reasoning, and where it starts in ``text``: harmony's
    ``final`` channel when the text is harmony-formatted (none: an error, the
    model only reasoned), ``<think>`` blocks blanked out otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise GuardAnswerError(f"{protocol} guard returned an empty answer")
    if "<|channel|>" in text:
        finals = list(_HARMONY_FINAL.finditer(text))
        if not finals:
            raise GuardAnswerError(f"{protocol} guard answered with reasoning only and no "
                                   f"final channel: {excerpt(text)}")
        start = finals[-1].end()
        end = _HARMONY_END.search(text, start)
        return text[start:end.start() if end else len(text)], start
    # Blank, not cut: offsets into the answer stay those of the tokens.
    blanked = _THINK.sub(lambda m: " " * len(m.group(0)), text)
    return blanked, 0


def excerpt(text: Any, limit: int = 120) -> str:
    """A one-line, bounded quote of an answer for error messages."""
    flat = " ".join(str(text).split())
    return repr(flat if len(flat) <= limit else flat[:limit] + "...")


def rubric_definition(rubric: MetricRubric) -> str:
    """A metric's rubric as one risk definition: its goal, then its violations."""
    text = rubric.goal.rstrip()
    if rubric.violations:
        text += " Violations include: " + "; ".join(v.rstrip(".") for v in rubric.violations)
        text += "."
    return text
