"""Windowed unsafe rates and alerts.

Judgment events are keyed by metric + group *without* the version label, so
one table partition owns a group family: counts are exact across partitions
and workers, and a version can be compared with its baseline version locally.
Windows are tumbling, by event time (the judgment event's Kafka timestamp is
the input's event time), and expire after ``window_expires_seconds``.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import orjson

from ..alerts import Cooldown, WindowCounts, check_rule, rule_for
from ..envelope import utc_iso
from ..processing import table_key
from ..settings import AlertRule

if TYPE_CHECKING:
    from .app import GuardrailApp

__all__ = ["register", "window_bounds", "TABLE_NAME", "MARKS_TABLE", "WindowCounter"]

log = logging.getLogger("guardrail.windows")

TABLE_NAME = "window-counts"
MARKS_TABLE = "counted-offsets"


def window_bounds(timestamp: float, size: float) -> tuple[float, float]:
    start = math.floor(timestamp / size) * size
    return start, start + size


class WindowCounter:
    """Apply one judgment event to the table and decide whether to alert.

    Duplicates are skipped: judgment events of one input partition arrive in
    input-offset order per event key (the judging agent publishes in order), so
    ``marks`` keeps the highest input offset counted per event key, origin and
    input partition, and a redelivered judgment (after a crash or rebalance, on
    either side) is not counted twice.
    """

    def __init__(self, runtime: GuardrailApp, windowed: Any, marks: Any) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.windowed = windowed
        self.marks = marks
        self.cooldown = Cooldown()

    @staticmethod
    def _mark_key(event_key: str, judgment: dict[str, Any]) -> str | None:
        source = judgment.get("source") or {}
        if "offset" not in source:
            return None
        return (f"{event_key}|{judgment.get('origin', 'live')}|{source.get('topic')}"
                f"|{source.get('partition')}")

    def apply(self, judgment: dict[str, Any], timestamp: float, event_key: str = "") -> None:
        mark_key = self._mark_key(event_key, judgment)
        offset = (judgment.get("source") or {}).get("offset", -1)
        if mark_key is not None and offset <= self.marks.get(mark_key, -1):
            self.runtime.telemetry.duplicate_judgments.inc()
            return
        self._count(judgment, timestamp)
        if mark_key is not None:
            # After the count: a crash in between can double count, never drop one.
            self.marks[mark_key] = offset

    def _count(self, judgment: dict[str, Any], timestamp: float) -> None:
        key = judgment["table_key"]
        counts = WindowCounts.from_dict(self.windowed[key].current())
        counts.total += 1
        status = judgment["status"]
        counts.unsafe += status == "unsafe"
        counts.errors += status == "error"
        if status == "unsafe" and len(counts.examples) < self.settings.alert_examples:
            counts.examples.append({"case_id": judgment.get("case_id"),
                                    "evidence_spans": judgment.get("evidence_spans", [])})
        self.windowed[key] = counts.as_dict()
        rule = rule_for(self.settings.alert_rules, judgment["metric"])
        if rule is not None and status == "unsafe":
            self._check(rule, judgment, counts, timestamp)

    def _previous(self, key: str, windows: int, include_current: bool) -> WindowCounts:
        total = WindowCounts()
        size = self.settings.window_seconds
        if include_current:
            total = total + WindowCounts.from_dict(self.windowed[key].current())
        for i in range(1, windows + 1):
            total = total + WindowCounts.from_dict(self.windowed[key].delta(size * i))
        return total

    def _baseline(self, rule: AlertRule, judgment: dict[str, Any]) -> tuple[WindowCounts | None, dict[str, Any]]:
        group = judgment["group"]
        version_label = self.settings.version_label
        if rule.baseline_version is not None and group.get(version_label) != rule.baseline_version:
            other = table_key(judgment["metric"], {**group, version_label: rule.baseline_version})
            counts = self._previous(other, rule.baseline_windows, include_current=True)
            return counts, {"kind": "version", version_label: rule.baseline_version}
        if rule.baseline_windows:
            counts = self._previous(judgment["table_key"], rule.baseline_windows,
                                    include_current=False)
            return counts, {"kind": "previous_windows", "windows": rule.baseline_windows}
        return None, {}

    def _check(self, rule: AlertRule, judgment: dict[str, Any], counts: WindowCounts,
               timestamp: float) -> None:
        baseline, baseline_info = self._baseline(rule, judgment)
        reasons = check_rule(rule, counts, baseline)
        if not reasons:
            return
        if not self.cooldown.ready(judgment["table_key"], time.monotonic(), rule.cooldown_seconds):
            return
        start, end = window_bounds(timestamp, self.settings.window_seconds)
        alert = {
            "alert_id": uuid.uuid4().hex, "metric": judgment["metric"],
            "group": judgment["group"], "reasons": reasons,
            "window": {"start": utc_iso(start * 1000), "end": utc_iso(end * 1000)},
            "counts": {"total": counts.total, "unsafe": counts.unsafe, "errors": counts.errors,
                       "judged": counts.judged},
            "rate": counts.rate,
            "baseline": None if baseline is None else {
                **baseline_info, "total": baseline.total, "unsafe": baseline.unsafe,
                "judged": baseline.judged, "rate": baseline.rate},
            "rule": rule.model_dump(), "examples": counts.examples,
            "fired_at": utc_iso(time.time() * 1000),
        }
        self.runtime.telemetry.alerts.labels(metric=judgment["metric"]).inc()
        self.runtime.dispatcher.dispatch(alert)


def register(runtime: GuardrailApp) -> None:
    """Add the windowed table and the counting agent to the app."""
    app, s = runtime.app, runtime.settings
    topic = app.topic(s.judgments_topic, key_type=bytes, value_type=bytes,
                      key_serializer="raw", value_serializer="raw")
    table = app.Table(TABLE_NAME, default=dict, partitions=s.topic_partitions)
    windowed = table.tumbling(timedelta(seconds=s.window_seconds),
                              expires=timedelta(seconds=s.window_expires_seconds)
                              ).relative_to_stream()
    marks = app.Table(MARKS_TABLE, partitions=s.topic_partitions)  # no default: missing = unseen
    counter = WindowCounter(runtime, windowed, marks)
    runtime.state["table"] = table

    # Writes tables, so concurrency stays 1 (faust-streaming caveat).
    @app.agent(topic, name="guardrail.windows", concurrency=1)
    async def count(stream: Any) -> None:
        async for event in stream.events():
            try:
                key = (event.message.key or b"").decode("utf-8", "replace")
                counter.apply(orjson.loads(event.message.value), event.message.timestamp, key)
            except Exception:  # a malformed event must not stop counting
                log.exception("could not count judgment event at offset %s",
                              event.message.offset)
