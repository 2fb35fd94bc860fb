"""The judge's agreement with its reviewers, live in the worker (review on).

When ``review_users_file`` is set, every worker follows the labels topic from
its beginning (:class:`~guardrail.kafka.changelog.TopicFollower` feeding a
:class:`~guardrail.review.folds.LabelsFold`) and keeps each label in the cell
of its metric, alerting group and window (by the judged result's event time,
the window its verdict was counted in), expiring cells as the window table
does. From memory, at no Kafka request::

    curl 127.0.0.1:6066/agreement                  # every unexpired cell, newest first
    curl '127.0.0.1:6066/agreement?metric=toxicity'

Each row: reviewed counts, weighted precision, recall and specificity with
Wilson intervals, the window's observed unsafe rate (the group's ``/rates``
row) and the rate corrected for the judge's sensitivity and specificity
(:mod:`guardrail.stream.agreement` says how). ``/metrics`` carries
``guardrail_judge_precision``, ``guardrail_judge_recall`` and
``guardrail_reviewed_labels`` per metric and group (no window label: the
newest window with reviews; at most ``MAX_GAUGE_SERIES`` pairs, the most
recently reviewed), removed when the group's windows expire.

**The agreement alert.** Checked whenever labels of a cell change, on that
cell's window (the current one included, as regression alerts check the
window their event falls in): when precision or recall rests on at least
``agreement_min_reviews`` reviews (its own denominator: UNSAFE verdicts for
precision, reviewer-unsafe for recall) and is below its floor, one alert
(``kind: "agreement"``) goes through the worker's alert dispatcher (alerts
topic and webhook). One incident, one alert: none again for the same metric
and group within the metric's rule ``cooldown_seconds`` (900 s without a
rule). Labels read while catching up with the topic (a start or restart)
only arm the cooldown: an incident alerted before a restart is not alerted
again. With several workers every one keeps the same figures, and the one
assigned partition 0 of the judgments topic sends the alert.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..kafka.changelog import TopicFollower
from .window_cells import stale_before
from ..stream.agreement import (CellKey, Confusion, Corrected, agreement_row, cell_of,
                                corrected_rate, group_of)
from ..review.folds import LabelsFold
from ..review.records import LabelRecord
from ..config.settings import Settings
from ..stream.settings import AlertRule
from ..stream.alerts import AlertDispatcher, Cooldown, rule_for
from .._event_time import utc_iso
from ..stream.telemetry import Telemetry

if TYPE_CHECKING:
    from .runtime import WorkerRuntime

__all__ = ["AgreementTracker", "LabelsFollower", "register"]

log = logging.getLogger("guardrail.agreement")

#: Longest time one ``rows()`` call spends on new corrected-rate bootstraps (about
#: 10 ms each); past it a cell shows its previous corrected rate until the next call.
BOOTSTRAP_BUDGET_SECONDS = 0.15
#: Most metric × group series per gauge on /metrics (those with the newest reviews).
MAX_GAUGE_SERIES = 100


class LabelsFollower(TopicFollower):
    """The labels topic followed for the tracker; after each fetch round the
    tracker expires old cells, updates its gauges and checks for alerts."""

    name = "labels follower"

    def __init__(self, settings: Settings, tracker: AgreementTracker) -> None:
        super().__init__(settings.kafka, settings.review.labels_topic, tracker.fold,
                         fetch_wait_ms=settings.worker.consumer_fetch_wait_ms)
        self.tracker = tracker

    def after_poll(self) -> None:
        self.tracker.after_poll(caught_up=self.caught_up)


class AgreementTracker:
    """Labels by metric, group and window; ``/agreement`` rows, gauges, alerts."""

    def __init__(self, settings: Settings, *, telemetry: Telemetry | None = None,
                 dispatcher: AlertDispatcher | None = None,
                 rates: Callable[[], list[dict[str, Any]]] | None = None,
                 is_leader: Callable[[], bool] = lambda: True,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.review, self.windows = settings.review, settings.windows
        self.telemetry, self.dispatcher = telemetry, dispatcher
        self.rates, self.is_leader, self.clock = rates, is_leader, clock
        self.fold = LabelsFold(on_change=self._changed)
        self.follower = LabelsFollower(settings, self)
        self.cells: dict[CellKey, dict[str, LabelRecord]] = {}
        self._where: dict[str, CellKey] = {}
        self._touched: set[CellKey] = set()
        self._groups: dict[str, dict[str, str]] = {}
        self._gauged: set[tuple[str, str]] = set()
        #: Per cell: the inputs of its last corrected rate, and that rate.
        self._corrected: dict[CellKey, tuple[tuple[Any, ...], Corrected]] = {}
        self.cooldown = Cooldown()
        #: False until the first read of the topic reached its end: until then
        #: labels only arm the cooldown.
        self.live = False
        self.alerts_fired = 0

    async def start(self) -> None:
        await self.follower.start()

    async def stop(self) -> None:
        await self.follower.stop()

    # -- the cells --------------------------------------------------------------------

    def _stale_before(self) -> float:
        return stale_before(self.clock(), self.windows.window_seconds,
                            self.windows.window_expires_seconds)

    def _changed(self, key: str) -> None:
        """The fold applied a label (or withdrew one): move it to its cell."""
        old = self._where.pop(key, None)
        if old is not None:
            bucket = self.cells.get(old)
            if bucket is not None:
                bucket.pop(key, None)
                if not bucket:
                    del self.cells[old]
                    self._corrected.pop(old, None)
            self._touched.add(old)
        label = self.fold.by_key.get(key)
        if label is None:
            return
        cell = cell_of(label, window_seconds=self.windows.window_seconds,
                       group_labels=self.windows.group_labels)
        if cell.end <= self._stale_before():  # its window has expired: nothing to show
            del self.fold.by_key[key]
            return
        self.cells.setdefault(cell, {})[key] = label
        self._where[key] = cell
        self._touched.add(cell)
        if cell.group not in self._groups:
            self._groups[cell.group] = group_of(label.labels, self.windows.group_labels)

    def prune(self) -> int:
        """Forget cells whose window expired (and their labels); returns how many."""
        limit = self._stale_before()
        expired = [cell for cell in self.cells if cell.end <= limit]
        for cell in expired:
            self._corrected.pop(cell, None)
            for key in self.cells.pop(cell):
                self._where.pop(key, None)
                self.fold.by_key.pop(key, None)
        if expired:
            live = {cell.group for cell in self.cells}
            self._groups = {g: labels for g, labels in self._groups.items() if g in live}
        return len(expired)

    def after_poll(self, *, caught_up: bool) -> None:
        pruned = self.prune()
        touched, self._touched = self._touched, set()
        if touched or pruned:
            self._update_gauges()
        if not caught_up:
            return
        if not self.live:  # the history is read: arm the cooldown, send nothing
            for cell in sorted(self.cells):
                self._check(cell, send=False)
            self.live = True
            return
        for cell in sorted(touched):
            if cell in self.cells:
                self._check(cell, send=True)

    def confusion(self, cell: CellKey) -> Confusion:
        return Confusion.of(self.cells.get(cell, {}).values())

    # -- rows -------------------------------------------------------------------------

    def rows(self, *, metric: str | None = None) -> list[dict[str, Any]]:
        """``/agreement`` rows of every unexpired cell (of ``metric``), newest first."""
        observed: dict[tuple[str, str, str], dict[str, Any]] = {}
        if self.rates is not None:
            for row in self.rates():
                observed[(row["metric"], row["group"], row["window_start"])] = row
        limit = self._stale_before()
        deadline = time.monotonic() + BOOTSTRAP_BUDGET_SECONDS
        rows = []
        for cell in sorted(self.cells, key=lambda c: (c.start, c.metric, c.group),
                           reverse=True):
            if cell.end <= limit or (metric is not None and cell.metric != metric):
                continue
            confusion = self.confusion(cell)
            rates_row = observed.get((cell.metric, cell.group, cell.window_start))
            rows.append(agreement_row(
                cell, confusion, observed=rates_row,
                min_reviews=self.review.agreement_min_reviews,
                corrected_min_reviews=self.review.corrected_min_reviews,
                corrected=self._corrected_rate(cell, confusion, rates_row,
                                               compute=time.monotonic() < deadline)))
        return rows

    def _corrected_rate(self, cell: CellKey, confusion: Confusion,
                        rates_row: dict[str, Any] | None, *, compute: bool
                        ) -> Corrected | None:
        """The cell's corrected rate: kept while its inputs (traffic counts and
        reviews) are unchanged; recomputed when they changed and ``compute``
        allows (the call's bootstrap budget), else the previous one."""
        if rates_row is None:
            return None  # agreement_row says why
        judged = int(rates_row["total"]) - int(rates_row.get("errors", 0))
        unsafe = int(rates_row["unsafe"])
        inputs = (judged, unsafe, *((t.count, t.weight, t.weight_sq)
                                    for t in (confusion.tp, confusion.fp, confusion.fn,
                                              confusion.tn)))
        last = self._corrected.get(cell)
        if last is not None and (last[0] == inputs or not compute):
            return last[1]
        if not compute:
            return Corrected(None, note="corrected rate not computed yet (busy); shown on "
                                        "the next refresh")
        found = corrected_rate(unsafe, judged, confusion,
                               min_reviews=self.review.corrected_min_reviews)
        self._corrected[cell] = (inputs, found)
        return found

    def status(self) -> dict[str, Any]:
        return {"labels_topic": self.follower.topic, "caught_up": self.follower.caught_up,
                "labels": len(self._where), "skipped_records": self.fold.skipped}

    def settings_view(self) -> dict[str, Any]:
        review = self.review
        return {"min_reviews": review.agreement_min_reviews,
                "precision_floor": review.agreement_precision_floor,
                "recall_floor": review.agreement_recall_floor,
                "corrected_min_reviews": review.corrected_min_reviews}

    # -- gauges -----------------------------------------------------------------------

    def _update_gauges(self) -> None:
        t = self.telemetry
        if t is None:
            return
        newest: dict[tuple[str, str], CellKey] = {}
        for cell in self.cells:
            pair = (cell.metric, cell.group)
            if pair not in newest or cell.start > newest[pair].start:
                newest[pair] = cell
        if len(newest) > MAX_GAUGE_SERIES:  # keep the cardinality bounded
            kept = sorted(newest.items(), key=lambda kv: (-kv[1].start, kv[0]))
            newest = dict(kept[:MAX_GAUGE_SERIES])
        for pair in self._gauged - set(newest):
            for gauge in (t.judge_precision, t.judge_recall, t.reviewed_labels):
                _remove(gauge, pair)
        for pair, cell in newest.items():
            confusion = self.confusion(cell)
            t.reviewed_labels.labels(*pair).set(confusion.reviewed)
            for gauge, estimate in ((t.judge_precision, confusion.precision()),
                                    (t.judge_recall, confusion.recall())):
                if estimate is None:
                    _remove(gauge, pair)
                else:
                    gauge.labels(*pair).set(estimate.value)
        self._gauged = set(newest)

    # -- alerts -----------------------------------------------------------------------

    def breaches(self, confusion: Confusion) -> list[str]:
        """Why this cell's figures alert (empty: they do not)."""
        review, reasons = self.review, []
        for name, estimate, floor in (("precision", confusion.precision(),
                                       review.agreement_precision_floor),
                                      ("recall", confusion.recall(),
                                       review.agreement_recall_floor)):
            if floor is None or estimate is None:
                continue
            if estimate.reviews >= review.agreement_min_reviews and estimate.value < floor:
                reasons.append(f"judge {name} {estimate.value:.1%} below the floor {floor:.1%} "
                               f"({estimate.reviews} reviews; 95% interval "
                               f"{estimate.low:.1%}-{estimate.high:.1%})")
        return reasons

    def _check(self, cell: CellKey, *, send: bool) -> None:
        confusion = self.confusion(cell)
        reasons = self.breaches(confusion)
        if not reasons:
            return
        rule = rule_for(self.windows.alert_rules, cell.metric)
        seconds = (rule or AlertRule()).cooldown_seconds
        if not self.cooldown.ready(f"agreement|{cell.metric}|{cell.group}", time.monotonic(),
                                   seconds):
            return
        if not send or self.dispatcher is None or not self.is_leader():
            return  # armed: this incident is known (or another worker sends it)
        alert = self.alert(cell, confusion, reasons)
        self.alerts_fired += 1
        if self.telemetry is not None:
            self.telemetry.agreement_alerts.labels(metric=cell.metric).inc()
        self.dispatcher.dispatch(alert)

    def alert(self, cell: CellKey, confusion: Confusion, reasons: list[str]) -> dict[str, Any]:
        """The agreement alert of a cell (examples: disagreements, ids only)."""
        review = self.review
        disagreements = [
            {"case_id": label.case_id, "judge_verdict": label.judge_verdict,
             "label": label.label}
            for label in self.cells.get(cell, {}).values()
            if label.judge_verdict is not None
            and (label.judge_verdict == "UNSAFE") != (label.label == "unsafe")]
        estimates = {"precision": confusion.precision(), "recall": confusion.recall(),
                     "specificity": confusion.specificity()}
        return {
            "alert_id": uuid.uuid4().hex, "kind": "agreement", "metric": cell.metric,
            "group": dict(self._groups.get(cell.group, {})), "reasons": reasons,
            "window": {"start": cell.window_start, "end": cell.window_end},
            "figures": {"reviewed": confusion.reviewed,
                        "reviewed_verdicts": {"unsafe": confusion.unsafe_verdicts,
                                              "safe": confusion.safe_verdicts,
                                              "error": confusion.errors},
                        **{k: None if v is None else v.as_dict() for k, v in estimates.items()},
                        "confusion": confusion.as_dict()},
            "floors": {"precision": review.agreement_precision_floor,
                       "recall": review.agreement_recall_floor,
                       "min_reviews": review.agreement_min_reviews},
            "examples": disagreements[:self.windows.alert_examples],
            "fired_at": utc_iso(time.time() * 1000),
        }


def _remove(gauge: Any, pair: tuple[str, str]) -> None:
    try:
        gauge.remove(*pair)
    except KeyError:
        pass


def _owns_partition_zero(runtime: WorkerRuntime) -> bool:
    """This worker is assigned partition 0 of the judgments topic: it sends
    agreement alerts (every worker keeps the same figures)."""
    topic = runtime.settings.kafka.judgments_topic
    try:
        assignment = runtime.app.consumer.assignment()
    except Exception:  # no consumer yet
        return False
    return any(tp.topic == topic and tp.partition == 0 for tp in assignment)


def register(runtime: WorkerRuntime) -> AgreementTracker | None:
    """Follow the labels topic and add ``/agreement`` (review on only); the
    tracker is ``runtime.state["agreement"]`` (the dashboard's panel reads it)."""
    settings, app = runtime.settings, runtime.app
    if settings.review.review_users_file is None:
        return None

    def rates() -> list[dict[str, Any]]:
        if runtime.rates_view is not None:
            return runtime.rates_view.rows()
        from .web import current_rates
        return current_rates(runtime.state["table"])

    tracker = AgreementTracker(settings, telemetry=runtime.telemetry,
                               dispatcher=runtime.dispatcher, rates=rates,
                               is_leader=lambda: _owns_partition_zero(runtime))
    runtime.state["agreement"] = tracker
    app.task(tracker.start)
    app.before_producer_stops(tracker.stop)

    @app.page("/agreement")
    async def agreement(web: Any, request: Any) -> Any:
        metric = request.query.get("metric") or None
        return web.json({"window_seconds": settings.windows.window_seconds,
                         **tracker.status(), **tracker.settings_view(),
                         "agreement": tracker.rows(metric=metric)})

    return tracker
