"""The judgment event: one metric's verdict on one message, from the judging
side to the window counter (over the judgments topic).

Typed on both sides, JSON on the wire; the keys are built and read only here::

    event = JudgmentEvent(metric="toxicity", group={"model": "m", "model_version": "v2"},
                          status="unsafe", case_id="c1", event_time_ms=1_700_000_000_000,
                          evidence_spans=("you idiot",), source=Source("in", 0, 42))
    value = event.encode()                      # the judgments-topic value
    key = event.partition_key("model_version")  # b"toxicity|model=m"
    JudgmentEvent.decode(value) == event        # MalformedEvent on bad input
    event.window_key                            # "toxicity|model=m,model_version=v2"
    parse_window_key(event.window_key)          # ("toxicity", "model=m,model_version=v2")

The worker writes bundles, one record per partition key and window per batch
(the events of one key and window in input order); readers take both::

    value = encode_bundle([event, later_event])      # kind "judgments"
    events, problems = decode_events(value)          # problems: the items not read

A message the worker did not sample (``sample_rate``, see
:mod:`.sampling`) is still counted as *seen*: one event per metric with status
``"not_sampled"``, no verdict, no spans. Counters read it as seen, not judged.

The wire format predates this class and must stay readable both ways (events
in flight during an upgrade, tools reading the topic): the same JSON keys,
including the redundant ``table_key``, and the key format ``metric|k=v,k=v``,
which is also the window table's key in existing changelogs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import orjson

from .envelope import Source

__all__ = ["JudgmentEvent", "MalformedEvent", "UnknownEvent", "Status", "window_key",
           "partition_key", "parse_window_key", "mark_value", "mark_position", "KIND",
           "SCHEMA_VERSION", "BUNDLE_KIND", "encode_bundle", "bundled", "decode_events",
           "labels_of", "UNIT_LABEL", "UNITS", "unit_of"]

#: The group label that sets a session's window cells apart from its turns'
#: (:mod:`.session_turns`); a cell without it counts turns.
UNIT_LABEL = "unit"
#: What a window cell counts: answers (turns, agent runs) or whole conversations.
UNITS = ("turn", "session")

#: ``not_sampled``: the message was seen but not judged (added with sampling;
#: a counter from before sampling skipped it as malformed). The statuses of
#: schema version 1 are fixed: a release that adds one writes a new version,
#: which older counters skip and count instead of misreading.
Status = Literal["safe", "unsafe", "error", "not_sampled"]
_STATUSES: tuple[str, ...] = get_args(Status)


class MalformedEvent(ValueError):
    """A judgments-topic value that is not a judgment event; the message says why."""


class UnknownEvent(ValueError):
    """A well-formed event of a kind, schema version or status this release does
    not know (written by a newer worker during a rolling upgrade): skipped and
    counted, not an error. ``kind`` and ``version`` name it for the count."""

    def __init__(self, kind: str, version: str, detail: str) -> None:
        super().__init__(f"unknown {kind} event (schema version {version}): {detail}")
        self.kind, self.version = kind, version


#: What this release writes and reads on the judgments topic. Events without
#: ``kind`` / ``schema_version`` (written before they existed) are version 1
#: judgments. A change a reader of this version could misread (a new status, a
#: field with a new meaning) gets a new version; new optional fields do not.
KIND, SCHEMA_VERSION = "judgment", 1
#: A record of many events (see :func:`encode_bundle`); a reader from before
#: bundles skips and counts it as an unknown kind.
BUNDLE_KIND = "judgments"


def _known(data: dict[str, Any], *, expected: str = KIND) -> None:
    """Raise :class:`UnknownEvent` for kinds, versions and statuses of a newer release."""
    kind, version = data.get("kind", expected), data.get("schema_version", SCHEMA_VERSION)
    if not isinstance(kind, str) or not _is_int(version):
        raise MalformedEvent(f"kind must be a string and schema_version an integer, "
                             f"got {kind!r:.40} and {version!r:.40}")
    if kind != expected or version > SCHEMA_VERSION:
        raise UnknownEvent(kind[:40], str(version), "written by a newer release?")


def _labels_text(labels: dict[str, str]) -> str:
    # Not escaped: '=' or ',' inside a label make the text ambiguous to read
    # back, but escaping now would change the keys of existing table cells.
    return ",".join(f"{k}={v}" for k, v in labels.items())


def mark_value(position: tuple[int, int]) -> int | list[int]:
    """A de-duplication mark as a window cell stores it: the offset alone for
    the first (or only) case of a record, as cells always held it, else
    ``[offset, index]``."""
    offset, index = position
    return offset if index == 0 else [offset, index]


def mark_position(value: Any) -> tuple[int, int]:
    """The ``(offset, index)`` a stored mark stands for; no mark: before any."""
    if value is None:
        return (-1, 0)
    if isinstance(value, list):
        return int(value[0]), int(value[1])
    return int(value), 0


def window_key(metric: str, labels: dict[str, str]) -> str:
    """Window-table key: one metric for one full group (version included)."""
    return f"{metric}|{_labels_text(labels)}"


def partition_key(metric: str, labels: dict[str, str], version_label: str) -> str:
    """Kafka key for judgment events: the group *without* its version label, so a
    group's versions share a partition and can be compared with each other."""
    family = {k: v for k, v in labels.items() if k != version_label}
    return window_key(metric, family)


def labels_of(group: str) -> dict[str, str]:
    """``"model=m,model_version=v1"`` → ``{"model": "m", "model_version": "v1"}``.

    Labels are not escaped in window keys, so a value holding ',' or '=' reads
    back split; the text is only ever shown, never used to look a window up."""
    labels: dict[str, str] = {}
    for part in group.split(",") if group else []:
        key, sep, value = part.partition("=")
        if sep:
            labels[key] = value
        elif labels:  # a ',' inside the previous value
            last = next(reversed(labels))
            labels[last] += "," + part
        else:
            labels[part] = ""
    return labels


def unit_of(labels: dict[str, str]) -> str:
    """What a group's window cells count: ``session`` for the ``unit=session``
    cells of session judgments, else ``turn`` (cells without the label)::

        unit_of({"model": "m"})                     # 'turn'
        unit_of(labels_of("model=m,unit=session"))  # 'session'
    """
    return "session" if labels.get(UNIT_LABEL) == "session" else "turn"


def parse_window_key(key: str) -> tuple[str, str]:
    """``(metric, group_text)`` of a window (or partition) key.

    Exact because metric names cannot contain '|' (see ``MetricRubric.name``);
    the group text is returned as written, since labels are not escaped."""
    metric, _, group_text = key.partition("|")
    return metric, group_text


@dataclass(frozen=True, slots=True)
class JudgmentEvent:
    """One metric's verdict on one input message, as counted in a window."""

    metric: str
    #: The message's alerting group: label → value ('-' where the input had none).
    group: dict[str, str]
    status: Status
    case_id: str | None
    event_time_ms: int
    #: Up to three spans quoted by an unsafe verdict; empty otherwise.
    evidence_spans: tuple[str, ...] = ()
    #: The input's coordinates (only topic, partition and offset travel).
    source: Source | None = None
    #: "live", or the id of the replay run that produced it.
    origin: str = "live"
    #: Every record of the source partition below this offset was judged and
    #: its events published before this event was built (the window counter's
    #: de-duplication floor, :mod:`.dedup`); None: not known (older releases,
    #: replays), and the event's own offset serves.
    floor: int | None = None

    # The bodies below call the module's key functions of the same names
    # (a method's scope does not include the class's attributes).
    @property
    def window_key(self) -> str:
        return window_key(self.metric, self.group)

    def partition_key(self, version_label: str) -> bytes:
        return partition_key(self.metric, self.group, version_label).encode()

    @property
    def dedup_mark(self) -> tuple[str, tuple[int, int]] | None:
        """``(stream, (offset, index))`` for the window counter's
        de-duplication: the stream is one origin's input partition, whose
        events arrive in offset order, and within one record (an OTLP batch
        holds many cases at one offset) in case order. None (no source
        offset): counted without de-duplication."""
        if self.source is None:
            return None
        src = self.source
        return f"{self.origin}|{src.topic}|{src.partition}", src.position

    def as_dict(self) -> dict[str, Any]:
        """The event as the wire carries it (alone, or as an item of a bundle)."""
        item: dict[str, Any] = {
            "kind": KIND, "schema_version": SCHEMA_VERSION, "metric": self.metric,
            "group": self.group, "table_key": self.window_key,
            "status": self.status, "case_id": self.case_id,
            "event_time_ms": self.event_time_ms, "evidence_spans": list(self.evidence_spans),
            "source": None if self.source is None else self.source.as_dict(),
            "origin": self.origin}
        if self.floor is not None:  # absent when not known, as before floors
            item["floor"] = self.floor
        return item

    def encode(self) -> bytes:
        return orjson.dumps(self.as_dict())

    @classmethod
    def decode(cls, raw: bytes | None) -> JudgmentEvent:
        """Read a judgments-topic value; :class:`MalformedEvent` says what is wrong."""
        return cls.from_dict(_loads(raw, "judgment event"))

    @classmethod
    def from_dict(cls, data: Any) -> JudgmentEvent:
        """Read one decoded event; :class:`MalformedEvent` says what is wrong."""
        if not isinstance(data, dict):
            raise MalformedEvent(f"judgment event must be a JSON object, "
                                 f"got {type(data).__name__}")
        _known(data)
        event = cls(metric=_metric(data.get("metric")), group=_group(data.get("group")),
                    status=_status(data.get("status")), case_id=_case_id(data.get("case_id")),
                    event_time_ms=_event_time(data.get("event_time_ms")),
                    evidence_spans=_spans(data.get("evidence_spans")),
                    source=_source(data.get("source")), origin=_origin(data.get("origin")),
                    floor=_floor(data.get("floor")))
        written_key = data.get("table_key")
        if written_key is not None and written_key != event.window_key:
            # The key is redundant on the wire; a different one means a foreign
            # or broken producer, and counting it would file it under one key
            # while its alerts name another group.
            raise MalformedEvent(f"table_key {str(written_key)[:200]!r} does not match "
                                 f"metric and group ({event.window_key[:200]!r})")
        return event


def encode_bundle(events: Sequence[JudgmentEvent]) -> bytes:
    """One judgments-topic value for many events of one partition key and one
    window, in input order. The judging side writes one per key and window per
    batch, so a message's metrics and a batch's messages cost one record."""
    return orjson.dumps({"kind": BUNDLE_KIND, "schema_version": SCHEMA_VERSION,
                         "events": [event.as_dict() for event in events]})


def bundled(events: Sequence[JudgmentEvent], version_label: str, window_seconds: float,
            ) -> list[tuple[bytes, list[JudgmentEvent]]]:
    """``events`` grouped as the judging side bundles them: by partition key
    and window, each group in input order (de-duplication needs it)."""
    size_ms = window_seconds * 1000
    groups: dict[tuple[bytes, int], list[JudgmentEvent]] = {}
    for e in events:
        groups.setdefault((e.partition_key(version_label), int(e.event_time_ms // size_ms)),
                          []).append(e)
    return [(key, group) for (key, _), group in groups.items()]


def decode_events(raw: bytes | None) -> tuple[list[JudgmentEvent], list[ValueError]]:
    """The events of a judgments-topic value, a bundle or a single event, in
    order, and what could not be read: :class:`MalformedEvent` or
    :class:`UnknownEvent` per bad item (the rest still count), or one for a
    value that is neither."""
    try:
        data = _loads(raw, "judgments record")
        if not (isinstance(data, dict) and data.get("kind") == BUNDLE_KIND):
            return [JudgmentEvent.from_dict(data)], []
        _known(data, expected=BUNDLE_KIND)
        items = data.get("events")
        if not isinstance(items, list):
            raise MalformedEvent(f"a judgments bundle needs a list of events, "
                                 f"got {items!r:.60}")
    except (MalformedEvent, UnknownEvent) as exc:
        return [], [exc]
    events: list[JudgmentEvent] = []
    problems: list[ValueError] = []
    for item in items:
        try:
            events.append(JudgmentEvent.from_dict(item))
        except (MalformedEvent, UnknownEvent) as exc:
            problems.append(exc)
    return events, problems


def _loads(raw: bytes | None, what: str) -> Any:
    if raw is None:
        raise MalformedEvent(f"{what} has no value (tombstone)")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MalformedEvent(f"{what} is not valid JSON: {str(exc)[:200]}") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _metric(value: Any) -> str:
    if not isinstance(value, str) or not value or "|" in value:
        raise MalformedEvent(f"metric must be a non-empty string without '|', got {value!r:.60}")
    return value


def _group(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise MalformedEvent(f"group must be an object of string labels, got {value!r:.100}")
    return value


def _status(value: Any) -> Status:
    if value not in _STATUSES:
        raise MalformedEvent(f"status must be one of {', '.join(_STATUSES)}, got {value!r:.60}")
    return value  # type: ignore[no-any-return]


def _case_id(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise MalformedEvent(f"case_id must be a string or null, got {value!r:.60}")
    return value


def _event_time(value: Any) -> int:
    if not _is_int(value):
        raise MalformedEvent(f"event_time_ms must be an integer, got {value!r:.60}")
    return int(value)


def _spans(value: Any) -> tuple[str, ...]:
    if value is None:  # absent: nothing quoted
        return ()
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise MalformedEvent(f"evidence_spans must be a list of strings, got {value!r:.100}")
    return tuple(value)


def _source(value: Any) -> Source | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise MalformedEvent(f"source must be an object or null, got {value!r:.100}")
    if not _is_int(value.get("offset")):
        return None  # as before: without an offset the event is counted undeduplicated
    topic, partition = value.get("topic"), value.get("partition")
    if not isinstance(topic, str) or not _is_int(partition):
        raise MalformedEvent(f"source needs a string topic and an integer partition, "
                             f"got {value!r:.100}")
    index = value.get("index")
    if index is not None and not _is_int(index):
        raise MalformedEvent(f"source.index must be an integer, got {index!r:.60}")
    return Source(topic=topic, partition=partition, offset=value["offset"], index=index)


def _floor(value: Any) -> int | None:
    if value is not None and not _is_int(value):
        raise MalformedEvent(f"floor must be an integer or null, got {value!r:.60}")
    return value  # type: ignore[no-any-return]


def _origin(value: Any) -> str:
    if value is None:  # absent (older producers): the live stream, as before
        return "live"
    if not isinstance(value, str):
        raise MalformedEvent(f"origin must be a string, got {value!r:.60}")
    return value
