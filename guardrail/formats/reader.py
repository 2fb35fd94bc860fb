"""Read cases from a JSON object, a JSON array or JSON Lines.

Bad records never stop a run: each becomes an :class:`InputProblem` that names
where it was (``line 7`` or ``item 3``) and why::

    cases, problems = read_cases(Path("sample.jsonl"))

A case that names no ``case_id`` gets one by the same rule in a file run and
in the stream (:func:`default_case_id`)::

    default_case_id(b"order-17", "in/0/42")   # 'order-17'  (the Kafka key)
    default_case_id(None, "in/0/42")          # 'in/0/42'   (topic/partition/offset)
    default_case_id(None, position_id("line 9", 1))  # 'case-9' (a file's line or item)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from .base import InputDecoder, UndecodableRecord
from ..judging.models import Case

__all__ = ["InputProblem", "InputRead", "read_cases", "read_inputs", "parse_records",
           "case_from_record",
           "describe_validation", "default_case_id", "position_id"]


@dataclass(frozen=True)
class InputProblem:
    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


def default_case_id(key: bytes | None, coordinates: str) -> str:
    """The one rule for a case without ``case_id``, in batch and stream alike.

    The Kafka key when there is one and it is UTF-8 text (producers key by
    case id, ``guardrail produce`` does); otherwise where the case came from:
    ``topic/partition/offset`` in the stream, ``case-N`` in a file run. A
    binary key is no readable id, so it falls back to the coordinates too.
    """
    if key:
        try:
            return key.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return coordinates


def position_id(where: str, index: int) -> str:
    """``case-N`` for a file's case at ``line N`` / ``item N`` (see :func:`parse_records`);
    ``case-<index>`` when ``where`` is no such position (cases built in code)."""
    kind, _, number = where.partition(" ")
    return f"case-{number}" if kind in ("line", "item") and number.isdigit() else f"case-{index}"


def describe_validation(exc: ValidationError, limit: int = 4) -> str:
    """One readable line for a pydantic error, without echoing the values."""
    parts = []
    for err in exc.errors()[:limit]:
        loc = ".".join(str(p) for p in err["loc"]) or "value"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def case_from_record(record: Any, *, conversation_max_chars: int | None = None) -> Case:
    """Validate one decoded record as a case (raises ``ValueError``)."""
    if not isinstance(record, dict):
        raise ValueError(f"a case must be a JSON object, got {_json_type(record)}")
    context = ({} if conversation_max_chars is None
               else {"conversation_max_chars": conversation_max_chars})
    try:
        return Case.model_validate(record, context=context)
    except ValidationError as exc:
        raise ValueError(describe_validation(exc)) from None


def _json_type(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def parse_records(data: bytes) -> tuple[list[tuple[str, Any]], list[InputProblem]]:
    """Split raw bytes into ``(where, record)`` pairs plus problems."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    head = data.lstrip()[:1]
    try:
        whole = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if head == b"[":
            return [], [InputProblem("file", f"invalid JSON array: {exc}")]
        return _parse_lines(data)
    if isinstance(whole, list):
        return [(f"item {i + 1}", record) for i, record in enumerate(whole)], []
    return [("item 1", whole)], []


def _parse_lines(data: bytes) -> tuple[list[tuple[str, Any]], list[InputProblem]]:
    records: list[tuple[str, Any]] = []
    problems: list[InputProblem] = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            records.append((where, orjson.loads(line)))
        except orjson.JSONDecodeError as exc:
            reason = ("not valid UTF-8" if "utf-8" in str(exc).lower()
                      else f"invalid JSON: {exc}")
            problems.append(InputProblem(where, reason))
    return records, problems


def read_cases(path: Path | str, *, limit: int | None = None
               ) -> tuple[list[tuple[str, Case]], list[InputProblem]]:
    """Read and validate cases from a file; stops after ``limit`` valid cases."""
    read = read_inputs(path, limit=limit)
    return read.cases, read.problems


@dataclass
class InputRead:
    """What a file held: its cases (with where each came from), the records
    that could not be read, and what was counted and not judged (a span
    without content, an OTLP batch with no GenAI span, …)."""

    cases: list[tuple[str, Case]] = field(default_factory=list)
    problems: list[InputProblem] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)


def read_inputs(path: Path | str, *, decoder: InputDecoder | None = None,
                limit: int | None = None, conversation_max_chars: int | None = None,
                ) -> InputRead:
    """Read a file's records in an input format (``case`` when ``decoder`` is
    None) and validate their cases; stops after ``limit`` valid cases::

        read = read_inputs("spans.jsonl", decoder=OtlpDecoder())
        read.cases, read.problems, read.skipped
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return InputRead(problems=[InputProblem(str(path),
                                                f"cannot read input: {exc.strerror or exc}")])
    records, problems = parse_records(data)
    read = InputRead(problems=problems)
    for where, record in records:
        if limit is not None and len(read.cases) >= limit:
            break
        for at, case in _record_cases(where, record, decoder, read):
            try:
                read.cases.append((at, case_from_record(
                    case, conversation_max_chars=conversation_max_chars)))
            except ValueError as exc:
                read.problems.append(InputProblem(at, str(exc)))
    if limit is not None:
        del read.cases[limit:]
    return read


def _record_cases(where: str, record: Any, decoder: InputDecoder | None,
                  read: InputRead) -> list[tuple[str, Any]]:
    """``(where, case dict)`` of one record; problems and skips go to ``read``."""
    if decoder is None or decoder.name == "case":
        return [(where, record)]  # validated as a case, with the case reasons
    try:
        decoded = decoder.decode_json(record)
    except UndecodableRecord as exc:
        read.problems.append(InputProblem(where, str(exc)))
        return []
    for outcome, count in decoded.skipped.items():
        read.skipped[outcome] = read.skipped.get(outcome, 0) + count
    if not decoder.many_per_record:
        return [(where, case) for case in decoded.cases]
    return [(f"{where} case {i + 1}", case) for i, case in enumerate(decoded.cases)]
