"""The worker's liveness check: samples the lag and committed offset of every
partition it commits and tells a stalled worker from a busy one
(:mod:`guardrail.stream.liveness` decides; this module only samples and reports)::

    register(runtime)           # a timer: check(runtime) every few seconds
    report = check(runtime)     # also on each /metrics scrape, for a fresh lag
    stalled_now(runtime)        # what /health and /dashboard show

Each check sets ``guardrail_consumer_lag`` and ``guardrail_seconds_since_progress``
per partition and ``guardrail_stalled_partitions``; it logs one WARNING when a
partition becomes stalled and one INFO line when it moves again. While the
judge is paused on an outage (``runtime.judge_paused()``) nothing counts as
stalled: the outage explains the wait, and ``/health`` says ``paused``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from ..stream.liveness import Liveness, LivenessReport, PartitionStatus, Sample

if TYPE_CHECKING:
    from .runtime import WorkerRuntime

__all__ = ["check", "check_interval", "committed_lag", "register", "stalled_now"]

log = logging.getLogger("guardrail.worker")

#: Longest wait between two checks: the stall is seen within this of stall_seconds.
MAX_INTERVAL_SECONDS = 5.0


def check_interval(stall_seconds: float) -> float:
    """Seconds between two checks: a quarter of ``stall_seconds``, 0.5 s to 5 s."""
    return min(MAX_INTERVAL_SECONDS, max(0.5, stall_seconds / 4))


def committed_lag(runtime: WorkerRuntime) -> list[Sample]:
    """``(topic, partition, lag, committed)`` of each assigned partition of the
    topics the worker commits, whose highwater is known. Faust's internal ones
    (table changelogs, the assignor's leader topic) are read but never
    committed: their "lag" would be their size, so they are left out."""
    app = runtime.app
    consumer = app.consumer
    internal = set(app.tables.changelog_topics) | set(consumer.randomly_assigned_topics)
    samples: list[Sample] = []
    for tp in consumer.assignment():
        if (tp.topic in internal or tp.topic.endswith("-changelog")
                or tp.topic.endswith("__assignor-__leader")):
            continue
        highwater = consumer.highwater(tp)
        committed = consumer._committed_offset.get(tp)  # no public accessor in 0.15.3
        if highwater is not None:
            samples.append((tp.topic, tp.partition, max(0, highwater - (committed or 0)),
                            committed))
    return samples


def check(runtime: WorkerRuntime, now: float | None = None) -> LivenessReport:
    """Sample, judge, export and log once; the report is kept in ``runtime.state``."""
    liveness = runtime.state.get("liveness")
    if not isinstance(liveness, Liveness):  # a runtime built without register()
        liveness = runtime.state["liveness"] = Liveness(runtime.settings.worker.stall_seconds)
    report = liveness.update(committed_lag(runtime),
                             time.monotonic() if now is None else now,
                             excused=runtime.judge_paused())
    _export(runtime.telemetry, report)
    _log(report, liveness.stall_seconds)
    runtime.state["liveness_report"] = report
    return report


def stalled_now(runtime: Any) -> tuple[PartitionStatus, ...]:
    """The stalled partitions of the last check; none before the first check, nor
    while the judge is paused (the outage explains the wait, whatever the last
    check saw)."""
    report = getattr(runtime, "state", {}).get("liveness_report")
    if report is None or runtime.telemetry.paused._value.get() == 1:
        return ()
    return report.stalled


def _export(telemetry: Any, report: LivenessReport) -> None:
    for s in report.partitions:
        labels = {"topic": s.topic, "partition": str(s.partition)}
        telemetry.lag.labels(**labels).set(s.lag)
        telemetry.seconds_since_progress.labels(**labels).set(round(s.seconds_since_progress, 1))
    for topic, partition in report.forgotten:  # assigned elsewhere now: no stale series
        for gauge in (telemetry.lag, telemetry.seconds_since_progress):
            try:
                gauge.remove(topic, str(partition))
            except KeyError:
                pass
    telemetry.stalled_partitions.set(len(report.stalled))


def _log(report: LivenessReport, stall_seconds: float) -> None:
    for s in report.became_stalled:
        log.warning("partition %s[%d] stalled: lag %d and its committed offset (%s) has not "
                    "moved for %.0f s (stall_seconds %g); the worker holds it and makes no "
                    "progress on it", s.topic, s.partition, s.lag, s.committed,
                    s.seconds_since_progress, stall_seconds)
    for s in report.progressed:
        log.info("partition %s[%d] progresses again: committed offset %s, lag %d",
                 s.topic, s.partition, s.committed, s.lag)
    for s in report.excused:
        log.info("partition %s[%d] no longer counted as stalled: the judge is paused on an "
                 "outage (lag %d, no progress for %.0f s)", s.topic, s.partition, s.lag,
                 s.seconds_since_progress)
    for topic, partition in report.forgotten_stalled:
        log.info("partition %s[%d] was stalled and is no longer assigned to this worker",
                 topic, partition)


def register(runtime: WorkerRuntime) -> None:
    """Check every :func:`check_interval` seconds, whether or not /metrics is scraped."""
    stall_seconds = runtime.settings.worker.stall_seconds
    runtime.state["liveness"] = Liveness(stall_seconds)

    @runtime.app.timer(check_interval(stall_seconds))
    async def liveness_check() -> None:
        try:
            check(runtime)
        except Exception:  # partitions move during a rebalance: the next check sees them
            log.debug("liveness check skipped", exc_info=True)
