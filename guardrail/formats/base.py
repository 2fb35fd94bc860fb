"""What every input format hands the stream: zero, one or many case records.

A decoder turns one input record (a Kafka value, or one JSON item of a file)
into :class:`Decoded`: the cases to judge, as plain dicts in the case schema,
plus what it held that is not to be judged, counted by outcome::

    decoded = decoder.decode(raw_bytes, headers)      # a Kafka record
    decoded = decoder.decode_json({"request": ...})   # one item of a file
    decoded.cases     # [{"case_id": "4bf9…:00f0…", "output": "…", "messages": [...], ...}]
    decoded.skipped   # {"no_genai_span": 3}
    decoded.notices   # one-off log lines, each logged once per key by the worker

A record that cannot be read at all raises :class:`UndecodableRecord` with the
reason (it goes to the DLQ); a record that is readable but holds nothing to
judge returns no cases and counts why in ``skipped`` (never the DLQ).

The case schema of the dicts (every key optional but ``output`` or
``messages``; see :class:`guardrail.judging.models.Case`): ``case_id``, ``output``,
``input``, ``context``, ``reference``, ``messages`` (``[{"role": ..,
"content": str | parts}]``), ``timestamp`` (epoch ms, s or ISO-8601),
``metadata`` (label → scalar), ``redteam``, and ``trace``
(``{"trace_id": 32 hex, "span_id": 16 hex}``), which is not part of the case
but travels with it to the result record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..judging.conversation import json_type

__all__ = ["Decoded", "Notice", "UndecodableRecord", "InputDecoder", "Headers", "load_json",
           "json_type"]

#: Kafka record headers by name (the last value of a repeated name).
Headers = Mapping[str, bytes | None]


class UndecodableRecord(ValueError):
    """A record the format cannot read; the message is the DLQ reason."""


@dataclass(frozen=True)
class Notice:
    """A log line worth saying once per ``key`` (e.g. once per service whose
    spans carry no content), not once per record."""

    key: str
    text: str


@dataclass(frozen=True)
class Decoded:
    """The cases of one record, and what it held that is not judged."""

    cases: list[dict[str, Any]] = field(default_factory=list)
    #: Outcome → count of items not judged (``no_genai_span``, ``no_content``,
    #: ``unreadable_content``, ``tool_calls`` …): counted on ``/metrics``, never DLQ'd.
    skipped: dict[str, int] = field(default_factory=dict)
    notices: tuple[Notice, ...] = ()
    #: Spans of agent runs (:class:`guardrail.assembly.runs.RunSpan`), assembled into
    #: runs elsewhere and judged once per run (``otlp`` with ``agent_runs``).
    run_spans: tuple[Any, ...] = ()
    #: Convention → spans whose answer it held (``otel_genai``, ``langfuse`` …): what
    #: ``guardrail inputs check`` names; empty for formats without conventions.
    conventions: dict[str, int] = field(default_factory=dict)


@runtime_checkable
class InputDecoder(Protocol):
    """One input format. Implementations are pure: no I/O, no Kafka."""

    #: The ``input_format`` setting's value for this format.
    name: str
    #: True when one record can hold several cases (results then carry the
    #: case's position inside its record).
    many_per_record: bool

    def decode(self, raw: bytes, headers: Headers) -> Decoded:
        """Decode one Kafka record value (already checked: not None, within size)."""
        ...

    def decode_json(self, record: Any) -> Decoded:
        """Decode one already-parsed JSON item (a line or an array item of a file)."""
        ...


def load_json(raw: bytes) -> Any:
    """Parse a record's bytes as JSON; :class:`UndecodableRecord` says why not.

    The reasons are the ones the case format has always put on the DLQ."""
    import orjson  # local: keeps this interface module free of imports

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UndecodableRecord(f"value is not valid UTF-8 (byte {exc.start})") from None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise UndecodableRecord(f"value is not valid JSON: {str(exc)[:200]}") from None

