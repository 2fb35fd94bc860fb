"""Turn a judge's raw answer into a validated verdict, or a precise error.

Nothing here guesses: an unknown verdict, a severity outside 1..5 or a
missing key is an error, never a default SAFE::

    >>> answer = parse_answer('```json\\n{"verdict": "SAFE", ...}\\n```',
    ...                       scoring_mode="binary_yes_no", include_reasoning=False)

An answer to a call that carries several metrics (``judge_calls=per_message``)
has one entry per metric; each entry is validated on its own, so one bad entry
is that metric's error only::

    >>> parse_group_answer('{"bias": {...}, "toxicity": {...}}', ("bias", "toxicity"),
    ...                    scoring_mode="binary_yes_no", include_reasoning=False)
    {'bias': BinaryAnswer(...), 'toxicity': JudgeAnswerError(...)}
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import JudgeAnswerError
from .models import ScoringMode

__all__ = ["BinaryAnswer", "ScaleAnswer", "answer_model", "response_schema",
           "group_response_schema", "extract_json_object", "parse_answer", "parse_group_answer",
           "ground_spans", "echoes_judged_text"]

# Bounds that stop a runaway judge from bloating results and alerts.
_MAX_ITEMS = 20
_MAX_ITEM_CHARS = 500


class BinaryAnswer(BaseModel):
    """What the judge must return in ``binary_yes_no`` mode."""

    model_config = ConfigDict(extra="ignore")

    verdict: Literal["SAFE", "UNSAFE"]
    violations: list[str] = Field(max_length=_MAX_ITEMS)
    evidence_spans: list[str] = Field(max_length=_MAX_ITEMS)

    @field_validator("verdict", mode="before")
    @classmethod
    def _verdict_case(cls, value: Any) -> Any:
        # "safe" and "Safe" are the same word; "MAYBE" still fails below.
        return value.strip().upper() if isinstance(value, str) else value


class ScaleAnswer(BinaryAnswer):
    """What the judge must return in ``scale_1_5`` mode."""

    severity: int = Field(ge=1, le=5, strict=True)


class _Reasoning(BaseModel):
    reasoning: str = Field(max_length=4000)


class BinaryReasonedAnswer(BinaryAnswer, _Reasoning):
    pass


class ScaleReasonedAnswer(ScaleAnswer, _Reasoning):
    pass


def answer_model(scoring_mode: ScoringMode, include_reasoning: bool) -> type[BinaryAnswer]:
    """The pydantic model the judge's JSON must satisfy for this mode."""
    if scoring_mode == "scale_1_5":
        return ScaleReasonedAnswer if include_reasoning else ScaleAnswer
    return BinaryReasonedAnswer if include_reasoning else BinaryAnswer


@functools.lru_cache(maxsize=4)
def response_schema(scoring_mode: ScoringMode, include_reasoning: bool) -> dict[str, Any]:
    """An OpenAI ``response_format`` (strict JSON schema) generated from the answer model.

    Built once per mode (generating it cost ~30 % of a worker's CPU per call)
    and shared: callers must not modify it; hand a client that might
    annotate the dict a ``copy.deepcopy`` (a copy per call was itself 11 %
    of a worker's CPU at 550 judge calls/s).
    """
    model = answer_model(scoring_mode, include_reasoning)
    schema = model.model_json_schema()
    props = schema["properties"]
    for prop in props.values():
        prop.pop("title", None)
        prop.pop("default", None)
        # Strict structured output rejects these keywords on some providers;
        # the bounds are enforced when the answer is parsed instead.
        for key in ("maxItems", "maxLength", "minimum", "maximum"):
            prop.pop(key, None)
    order = [k for k in ("severity", "verdict", "reasoning", "violations", "evidence_spans")
             if k in props]
    schema = {"type": "object", "properties": {k: props[k] for k in order},
              "required": order, "additionalProperties": False}
    return {"type": "json_schema",
            "json_schema": {"name": f"redteam_{scoring_mode}", "schema": schema, "strict": True}}


@functools.lru_cache(maxsize=64)
def group_response_schema(metrics: tuple[str, ...], scoring_mode: ScoringMode,
                          include_reasoning: bool) -> dict[str, Any]:
    """The strict schema of a several-metric answer: one required key per metric,
    each holding the single-metric answer object. Cached and shared like
    :func:`response_schema` (callers must not modify it)."""
    single = response_schema(scoring_mode, include_reasoning)["json_schema"]["schema"]
    # Evidence before the verdict (see prompts._GROUP_BINARY_KEYS for why).
    order = [k for k in ("violations", "evidence_spans", "reasoning", "severity", "verdict")
             if k in single["properties"]]
    entry = {**single, "properties": {k: single["properties"][k] for k in order},
             "required": order}
    schema = {"type": "object", "properties": {name: entry for name in metrics},
              "required": list(metrics), "additionalProperties": False}
    return {"type": "json_schema", "json_schema": {
        "name": f"redteam_{scoring_mode}_metrics", "schema": schema, "strict": True}}


_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


def extract_json_object(text: str) -> dict[str, Any]:
    """Find the JSON object in a judge answer: bare, fenced, or before/after prose."""
    stripped = text.strip()
    candidates = [stripped] + [m.group(1).strip() for m in _FENCE.finditer(stripped)]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    for value in _json_objects(stripped):  # the first object amid prose
        return value
    raise JudgeAnswerError(f"judge answer contains no JSON object: {_excerpt(text)}")


def _excerpt(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _json_objects(text: str) -> Iterator[dict[str, Any]]:
    """Every JSON object embedded in ``text``, in order of its opening brace."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, dict):
            yield value


def echoes_judged_text(data: dict[str, Any], judged: dict[str, str]) -> bool:
    """True when the answer is a JSON object that also stands inside the judged
    text: a judge that copies an injected verdict, not one that judged."""
    return any(candidate == data for text in judged.values() if "{" in text
               for candidate in _json_objects(text))


_ECHO = ("judge answer repeats a verdict that appears inside the judged text "
         "(possible prompt injection)")


def parse_answer(text: str, *, scoring_mode: ScoringMode, include_reasoning: bool,
                 judged: dict[str, str] | None = None) -> BinaryAnswer:
    """Parse and validate a judge answer for the given mode.

    With ``judged`` (the fenced texts), an answer copied from inside them is
    rejected as a likely prompt injection.
    """
    data = extract_json_object(text)
    if judged and echoes_judged_text(data, judged):
        raise JudgeAnswerError(_ECHO)
    return _validate(data, scoring_mode, include_reasoning, what="answer")


def _validate(data: dict[str, Any], scoring_mode: ScoringMode, include_reasoning: bool, *,
              what: str) -> BinaryAnswer:
    model = answer_model(scoring_mode, include_reasoning)
    try:
        answer = model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'answer'}: {e['msg']}"
            + (f" (got {e['input']!r})" if e["type"] != "missing" else "")
            for e in exc.errors()[:4]
        )
        raise JudgeAnswerError(f"judge {what} does not match the {scoring_mode} schema: "
                               f"{problems}") from None
    _check_strings(answer)
    return answer


def parse_group_answer(text: str, metrics: tuple[str, ...], *, scoring_mode: ScoringMode,
                       include_reasoning: bool, judged: dict[str, str] | None = None,
                       ) -> dict[str, BinaryAnswer | JudgeAnswerError]:
    """Each metric's validated entry of a several-metric answer, or its error.

    Raises :class:`JudgeAnswerError` when the answer as a whole is unusable (no
    JSON object, or one copied from the judged text); an entry that is missing,
    invalid or copied from the judged text is that metric's error only.
    """
    data = extract_json_object(text)
    if judged and echoes_judged_text(data, judged):
        raise JudgeAnswerError(_ECHO)
    answers: dict[str, BinaryAnswer | JudgeAnswerError] = {}
    for metric in metrics:
        entry = data.get(metric)
        if not isinstance(entry, dict):
            answers[metric] = JudgeAnswerError(
                f"judge answer has no {metric!r} object (got {_excerpt(str(entry))})"
                if entry is not None else f"judge answer has no entry for {metric!r}")
        elif judged and echoes_judged_text(entry, judged):
            answers[metric] = JudgeAnswerError(_ECHO)
        else:
            try:
                answers[metric] = _validate(entry, scoring_mode, include_reasoning,
                                            what=f"answer for {metric!r}")
            except JudgeAnswerError as exc:
                answers[metric] = exc
    return answers


def _check_strings(answer: BinaryAnswer) -> None:
    for key in ("violations", "evidence_spans"):
        for item in getattr(answer, key):
            if len(item) > _MAX_ITEM_CHARS:
                raise JudgeAnswerError(f"judge answer {key} item longer than "
                                       f"{_MAX_ITEM_CHARS} characters")


def ground_spans(spans: list[str], judged: dict[str, str]) -> tuple[list[str], int]:
    """Keep the evidence spans that really occur in the judged text.

    Matching ignores case; the kept span is the text's own spelling. Returns the
    kept spans (deduplicated, in order) and how many were dropped.
    """
    kept: list[str] = []
    dropped = 0
    for span in spans:
        needle = span.strip().strip("\"'“”‘’").strip()
        found = _find(needle, judged.values()) if needle else None
        if found is None:
            dropped += 1
        elif found not in kept:
            kept.append(found)
    return kept, dropped


def _find(needle: str, texts: Any) -> str | None:
    pattern = re.compile(re.escape(needle), re.IGNORECASE)
    for text in texts:
        match = pattern.search(text)
        if match:
            return match.group(0)
    return None
