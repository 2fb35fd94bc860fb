"""Windowed unsafe rates and alerts.

Judgment events (in bundles: one record per key and window per batch) are
keyed by metric + group *without* the version label, so
one table partition owns a group family: counts are exact across partitions
and workers, and a version can be compared with its baseline version locally.
Windows are tumbling, by event time (the judgment event's Kafka timestamp is
the input's event time), and expire after ``window_expires_seconds``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import faust

from .window_cells import changelog_topic, live_horizon_seconds
from ..stream.settings import AlertRule, WindowSettings
from ..stream.alerts import AlertDispatcher, Cooldown, WindowCounts, check_rule, rule_for
from ..stream.dedup import Ledger
from .._event_time import utc_iso
from ..stream.events import (JudgmentEvent, UnknownEvent, decode_events, mark_position,
                             mark_value, unit_of, window_key)
from ..stream.telemetry import Telemetry

if TYPE_CHECKING:
    from .runtime import WorkerRuntime as GuardrailApp

__all__ = ["register", "window_bounds", "TABLE_NAME", "WindowCounter", "count_record",
           "ReadOrder", "from_earlier_generation"]

log = logging.getLogger("guardrail.windows")

TABLE_NAME = "window-counts"
COUNT_BATCH = 500


def window_bounds(timestamp: float, size: float) -> tuple[float, float]:
    start = math.floor(timestamp / size) * size
    return start, start + size


class WindowCounter:
    """Apply one judgment event to the table and decide whether to alert.

    Every event counts as seen; a ``not_sampled`` one only as seen (the
    message was not judged), the rest also in the judged counts.

    Duplicates are skipped: each cell keeps, per origin and input partition,
    which input positions (offset, and case index inside a many-case record)
    it counted, as a floor and the positions above it
    (:class:`~guardrail.stream.dedup.Ledger`), so a redelivered judgment
    (after a crash or rebalance, on either side) is not counted twice and one
    read again late still is. The ledger lives in the cell itself, so counts
    and ledger are written — and recovered from the changelog — as one value.
    """

    def __init__(self, windows: WindowSettings, windowed: Any, *, telemetry: Telemetry,
                 dispatcher: AlertDispatcher) -> None:
        self.windows = windows
        self.windowed = windowed
        self.telemetry = telemetry
        self.dispatcher = dispatcher
        self.cooldown = Cooldown()

    def apply(self, event: JudgmentEvent, timestamp: float, *, in_order: bool = True) -> None:
        self.apply_many([event], timestamp, in_order=in_order)

    def apply_many(self, events: list[JudgmentEvent], timestamp: float, *,
                   in_order: bool = True) -> None:
        """Count events of one window cell (one window key, one window), in
        input order: the cell is read once and written once, and the alert
        rule checked once, on the counts after all of them. ``in_order``: the
        judgments record holding them was read in order (see :mod:`.dedup`)."""
        key = events[0].window_key
        counts = WindowCounts.from_dict(self.windowed[key].current())
        ledgers: dict[str, Ledger] = {}
        counted = [event for event in events
                   if self._count(counts, ledgers, event, in_order=in_order)]
        changed = {stream: ledger for stream, ledger in ledgers.items() if ledger.changed}
        if not counted and not changed:
            return
        for stream, ledger in changed.items():
            counts.ledgers[stream] = ledger.stored()
            if ledger.highest is not None and (  # the mark, for older releases' readers
                    ledger.highest > mark_position(counts.marks.get(stream))):
                counts.marks[stream] = mark_value(ledger.highest)
        self.windowed[key] = counts.as_dict()
        unsafe = [event for event in counted if event.status == "unsafe"]
        rule = rule_for(self.windows.alert_rules, events[0].metric)
        if rule is not None and unsafe:
            self._check(rule, unsafe[-1], counts, timestamp)

    def _count(self, counts: WindowCounts, ledgers: dict[str, Ledger],
               event: JudgmentEvent, *, in_order: bool) -> bool:
        """Add ``event`` to ``counts``; False for a duplicate (already counted)."""
        mark = event.dedup_mark
        if mark is not None:
            stream, position = mark
            ledger = ledgers.get(stream)
            if ledger is None:
                ledger = ledgers[stream] = Ledger.from_cell(counts.ledgers.get(stream),
                                                            counts.marks.get(stream))
            if not ledger.admit(position, floor=event.floor, in_order=in_order):
                self.telemetry.duplicate_judgments.inc()
                return False
        counts.seen += 1
        if event.status == "not_sampled":  # seen, not judged: no verdict to count
            return True
        counts.total += 1
        counts.unsafe += event.status == "unsafe"
        counts.errors += event.status == "error"
        if event.status == "unsafe" and len(counts.examples) < self.windows.alert_examples:
            counts.examples.append({"case_id": event.case_id,
                                    "evidence_spans": list(event.evidence_spans)})
        return True

    def _previous(self, key: str, windows: int, include_current: bool) -> WindowCounts:
        total = WindowCounts()
        size = self.windows.window_seconds
        if include_current:
            total = total + WindowCounts.from_dict(self.windowed[key].current())
        for i in range(1, windows + 1):
            total = total + WindowCounts.from_dict(self.windowed[key].delta(size * i))
        return total

    def _baseline(self, rule: AlertRule, event: JudgmentEvent,
                  ) -> tuple[WindowCounts | None, dict[str, Any]]:
        version_label = self.windows.version_label
        baseline_version = rule.baseline_version
        if baseline_version is not None and event.group.get(version_label) != baseline_version:
            other = window_key(event.metric, {**event.group, version_label: baseline_version})
            counts = self._previous(other, rule.baseline_windows, include_current=True)
            return counts, {"kind": "version", version_label: baseline_version}
        if rule.baseline_windows:
            counts = self._previous(event.window_key, rule.baseline_windows,
                                    include_current=False)
            return counts, {"kind": "previous_windows", "windows": rule.baseline_windows}
        return None, {}

    def _check(self, rule: AlertRule, event: JudgmentEvent, counts: WindowCounts,
               timestamp: float) -> None:
        baseline, baseline_info = self._baseline(rule, event)
        reasons = check_rule(rule, counts, baseline)
        if not reasons:
            return
        if not self.cooldown.ready(event.window_key, time.monotonic(), rule.cooldown_seconds):
            return
        start, end = window_bounds(timestamp, self.windows.window_seconds)
        alert = {
            "alert_id": uuid.uuid4().hex, "kind": "regression", "metric": event.metric,
            "group": event.group, "unit": unit_of(event.group), "reasons": reasons,
            "window": {"start": utc_iso(start * 1000), "end": utc_iso(end * 1000)},
            # The rules read judged counts; seen tells how much was sampled.
            "counts": {"total": counts.total, "unsafe": counts.unsafe, "errors": counts.errors,
                       "judged": counts.judged, "seen": counts.seen},
            "rate": counts.rate,
            "baseline": None if baseline is None else {
                **baseline_info, "total": baseline.total, "unsafe": baseline.unsafe,
                "judged": baseline.judged, "rate": baseline.rate},
            "rule": rule.model_dump(), "examples": counts.examples,
            "fired_at": utc_iso(time.time() * 1000),
        }
        self.telemetry.alerts.labels(metric=event.metric).inc()
        self.dispatcher.dispatch(alert)


def changelog_configs(horizon_seconds: float) -> dict[str, str]:
    """Topic configs of the window changelog as Faust creates it.

    Faust creates a windowed table's changelog ``compact,delete`` with
    ``retention.ms`` = the windows' ``expires``: the delete half would then
    drop a live cell's only record up to a window's length before the cell
    expires (its last write can come at the window's start). Retention is
    set to the live horizon instead, so only expired cells age out; the
    tombstones written on expiry let compaction remove them sooner."""
    return {"cleanup.policy": "compact,delete",
            "retention.ms": str(int(horizon_seconds * 1000))}


def register(runtime: GuardrailApp) -> None:
    """Add the windowed table and the counting agent to the app."""
    app, s = runtime.app, runtime.settings
    topic = app.topic(s.kafka.judgments_topic, key_type=bytes, value_type=bytes,
                      key_serializer="raw", value_serializer="raw")
    horizon = live_horizon_seconds(s.windows.window_seconds, s.windows.window_expires_seconds)
    table = app.tables.add(ConfirmedTable(app, name=TABLE_NAME, default=dict,
                                          beacon=app.tables.beacon,
                                          partitions=s.kafka.topic_partitions,
                                          extra_topic_configs=changelog_configs(horizon)))
    windowed = table.tumbling(timedelta(seconds=s.windows.window_seconds),
                              expires=timedelta(seconds=s.windows.window_expires_seconds)
                              ).relative_to_stream()
    counter = WindowCounter(s.windows, windowed, telemetry=runtime.telemetry,
                            dispatcher=runtime.dispatcher)
    runtime.state["table"] = table
    # Recovery starts at the first changelog record that can hold a live window.
    app.changelog_horizons[changelog_topic(s.kafka.app_id)] = horizon
    unknown = UnknownRecords(runtime.telemetry, "judgments")

    # Acked by hand once counted: the records Faust's stream skips are never committed.
    mark_counted = app.mark_processed_on(s.kafka.judgments_topic)

    # Writes tables, so concurrency stays 1 (faust-streaming caveat).
    @app.agent(topic, name="guardrail.windows", concurrency=1)
    async def count(stream: Any) -> None:
        async for events in stream.noack_take(COUNT_BATCH, within=0.05):
            order = ReadOrder(app.consumer)
            for event in events:
                if from_earlier_generation(app, event):
                    continue  # acked below uncounted; the partition's owner refetches it
                # Window tables take the time and changelog partition from the
                # current event, which buffered events must set themselves.
                stream._set_current_event(event)
                count_record(counter, unknown, event.message,
                             in_order=order.in_order(event.message))
            stream._set_current_event(None)
            # The changelog must be durable before these offsets may commit: Faust
            # commits on stop/rebalance before it flushes its producer buffer,
            # which would lose counts the next owner never recovers.
            await table.confirm_changelog()
            mark_counted([event.message for event in events
                          if not from_earlier_generation(app, event)])
            for event in events:
                await stream.ack(event)


class ReadOrder:
    """Whether each judgments record of a batch is read in order: every record
    of its partition before it was counted (by this batch or acked before it).
    A record the consumer reads again late is not, and must not raise the
    cells' de-duplication floors (:mod:`guardrail.stream.dedup`). A consumer
    that cannot tell (not :class:`~.consumer.ProcessedOnlyConsumer`): in order,
    the rule of releases before the floors."""

    def __init__(self, consumer: Any) -> None:
        self._done_below = getattr(consumer, "done_below", None)
        self._next: dict[Any, int | None] = {}

    def in_order(self, message: Any) -> bool:
        if self._done_below is None:
            return True
        tp = message.tp
        expected = self._next[tp] if tp in self._next else self._done_below(tp)
        if expected is None or message.offset != expected:
            return False
        self._next[tp] = self._done_below(tp, message.offset + 1)
        return True


def count_record(counter: WindowCounter, unknown: UnknownRecords, message: Any, *,
                 in_order: bool = True) -> None:
    """Count one judgments record (a bundle, or a single event), cell by cell;
    what cannot be read is skipped and said, the rest still counts.
    ``in_order``: see :class:`ReadOrder`."""
    events, problems = decode_events(message.value)
    for problem in problems:
        if isinstance(problem, UnknownEvent):  # a newer worker's: skipped, counted, said once
            unknown.skip(problem)
        else:  # skipped: one bad event must not stop counting
            log.error("could not count judgment event at offset %s: %s", message.offset,
                      problem)
    cells: dict[str, list[JudgmentEvent]] = {}
    for event in events:
        cells.setdefault(event.window_key, []).append(event)
    for cell in cells.values():
        try:
            counter.apply_many(cell, message.timestamp, in_order=in_order)
        except Exception:  # with the traceback: this one is a bug
            log.exception("could not count judgment events at offset %s", message.offset)


class UnknownRecords:
    """Records of a kind or version this release does not know: counted on
    ``/metrics`` (``guardrail_unknown_records``) and logged once per kind and
    version, so a rolling upgrade neither stops a worker nor floods its log."""

    def __init__(self, telemetry: Telemetry, topic: str) -> None:
        self.telemetry, self.topic = telemetry, topic
        self._said: set[tuple[str, str]] = set()

    def skip(self, exc: UnknownEvent) -> None:
        self.telemetry.unknown_records.labels(topic=self.topic, kind=exc.kind,
                                              schema_version=exc.version).inc()
        if (exc.kind, exc.version) not in self._said:
            self._said.add((exc.kind, exc.version))
            log.warning("skipping %s records this release does not know (counted in "
                        "guardrail_unknown_records): %s", self.topic, exc)


def from_earlier_generation(app: Any, event: Any) -> bool:
    """An event fetched in an earlier consumer generation must not touch the
    table: after the new assignment its partition may be gone from this worker,
    its table state purged, and a write would overwrite the real count in the
    changelog with a smaller one. Like Faust's own streams, ack it unprocessed:
    the assignment already seeked to the committed offset, so the partition's
    owner refetches it, and the consumer keeps stale acks out of the commits
    (:mod:`.consumer`). (During the revoke phase itself the generation is
    unchanged and the table intact, so counting then is safe.)"""
    return event.message.generation_id != app.consumer_generation_id


class ConfirmedTable(faust.Table):
    """A table that can wait until every changelog write so far is on the broker.

    Faust's own ``producer.flush()`` is not that: its buffer flush gives up
    after 0.1 s without a send (under load, writes are still queued when it
    returns), so acking after it could commit offsets whose counts a crash
    then loses. Here every write's future is kept and awaited; a failed write
    is sent again with the key's *current* value (a later write may have
    superseded it, and the changelog must end on the newest).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._unconfirmed: list[Any] = []

    def send_changelog(self, *args: Any, **kwargs: Any) -> Any:
        fut = super().send_changelog(*args, **kwargs)
        self._unconfirmed.append(fut)
        return fut

    def apply_changelog_batch(self, batch: Any) -> None:
        """Recovery: Faust fills the cells but tracks expiry for live writes only,
        so recovered cells would never expire (nor get their tombstones).
        Each recovered cell is tracked like a written one."""
        events = list(batch)
        super().apply_changelog_batch(events)
        for event in events:
            key = self._to_key(event.key)
            if key in self.data:
                self._maybe_set_key_ttl(key, event.message.partition)

    async def _del_old_keys(self) -> None:
        """Faust drops expired window cells from memory only; a tombstone per
        dropped cell also deletes it from the changelog (real Kafka's compaction
        then removes it, and no reader ever restores it)."""
        now = time.time()  # the moment Faust's own staleness check uses
        placed = {key: partition for (partition, end), keys in
                  list(self._partition_timestamp_keys.items())
                  if self.window is not None and self.window.stale(end, now) for key in keys}
        await super()._del_old_keys()
        gone = [(key, partition) for key, partition in placed.items() if key not in self.data]
        for key, partition in gone:
            self.send_changelog(partition, key, None, value_serializer="raw")
        if gone:
            log.info("expired %d window cells (tombstones written)", len(gone))

    async def confirm_changelog(self) -> None:
        """Return once every changelog write made so far is acknowledged."""
        delay = 0.5
        while self._unconfirmed:
            pending, self._unconfirmed = self._unconfirmed, []
            await asyncio.wait(pending)
            failed = [fut for fut in pending if fut.exception() is not None]
            if not failed:
                continue
            log.error("%d window changelog writes failed (%s); writing again in %.1fs",
                      len(failed), failed[0].exception(), delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
            for fut in failed:
                self._resend(fut.message)

    def _resend(self, message: Any) -> None:
        key = message.key
        if key in self.data:
            self.send_changelog(message.partition, key, self.data[key])
        else:  # deleted (expired) since: the deletion is the newest state
            self.send_changelog(message.partition, key, None, value_serializer="raw")
