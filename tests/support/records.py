"""Real producers of the worker's records, driven by hand without Kafka: the window
counter, the budget governor and the agreement tracker, with the clocks, alert
collectors and table stand-ins they need. Their own tests and the records
reference (``tests/reference/test_reference_records.py``) use them::

    counter = window_counter(alert_rules=rules)
    counter.apply(judgment_event(7, "unsafe"), 1000.0)
    governor, clock, alerts, telemetry = budget_governor(budget_usd_per_hour=1.0)
    tracker, dispatcher, telemetry = agreement_tracker(tmp_path, now=[T0 / 1000])
"""

from __future__ import annotations

from types import SimpleNamespace

from guardrail.agents.windows import WindowCounter
from guardrail.config.settings import load_settings
from guardrail.judging.models import CostEstimate, MetricResult, RedteamMetrics
from guardrail.review import LabelRecord
from guardrail.stream.alerts import AlertDispatcher
from guardrail.stream.budget import BudgetGovernor
from guardrail.stream.envelope import Source
from guardrail.stream.events import JudgmentEvent
from guardrail.stream.telemetry import Telemetry

__all__ = ["T0", "FakeWindowed", "Dispatched", "window_counter", "judgment_event",
           "versioned_event", "Clock", "priced_verdict", "budget_governor", "spend_at",
           "label_record", "AlertCollector", "agreement_tracker", "feed_labels",
           "polite_judge_labels"]

T0 = 1_700_000_250_000  # ms; in the 300 s window from 1_700_000_100 (22:15 UTC)


# -- the window counter (guardrail.agents.windows) ------------------------------------------

class FakeWindowed:
    """Only the current window matters here: one dict of cells."""

    def __init__(self):
        self.cells = {}

    def __getitem__(self, key):
        cells = self.cells
        return SimpleNamespace(current=lambda: cells.get(key, {}), delta=lambda _: {})

    def __setitem__(self, key, value):
        self.cells[key] = value


class Dispatched(AlertDispatcher):
    def __init__(self):
        super().__init__(webhook_url=None, timeout=1)
        self.alerts = []

    def dispatch(self, alert):
        self.alerts.append(alert)


def window_counter(**settings):
    windows = load_settings(environ={}, **settings).windows
    return WindowCounter(windows, FakeWindowed(), telemetry=Telemetry(), dispatcher=Dispatched())


def judgment_event(offset, status="safe", partition=0, origin="live", metric="toxicity",
              group=None):
    return JudgmentEvent(metric=metric, group=group or {"model": "m"}, status=status,
                         case_id=f"c{offset}", event_time_ms=1_000_000, evidence_spans=("x",),
                         source=Source("in", partition, offset), origin=origin)


def versioned_event(offset, version, status):
    return judgment_event(offset, status, partition=0 if version == "v1" else 1,
                     group={"model": "m", "model_version": version})


# -- the budget governor (guardrail.stream.budget) ------------------------------------------

class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def priced_verdict(cost, tokens=100, cached=False):
    metric = MetricResult(name="toxicity", score=1.0, input_tokens=tokens, output_tokens=0,
                          cost=cost, cached=cached)
    return RedteamMetrics(metrics=[metric], cost=CostEstimate(cost=cost))


def budget_governor(**settings):
    clock, alerts, telemetry = Clock(), [], Telemetry()
    sampling = load_settings(environ={}, **settings).sampling
    governor = BudgetGovernor(sampling, notify=alerts.append, telemetry=telemetry, clock=clock)
    return governor, clock, alerts, telemetry


def spend_at(governor, clock, at, cost, tokens=100):
    clock.now = at
    governor.record([priced_verdict(cost, tokens)])
    return governor.update()


# -- the agreement tracker (guardrail.agents.agreement) -------------------------------------

def label_record(i: int, verdict: str | None, label: str, rate: float, *, metric: str = "toxicity",
           ms: int = T0, **labels: str) -> LabelRecord:
    slice_ = "error" if verdict is None else ("unsafe" if verdict == "UNSAFE" else "safe")
    return LabelRecord(case_id=f"c{i}", metric=metric, label=label, choice="disagree_safe",
                       reviewer="ana", judge_verdict=verdict, judge_model="j",
                       rubric_version="r", slice=slice_, rate=rate,
                       labels=labels or {"model": "m", "model_version": "v1"},
                       event_time_ms=ms, fields={"output": f"text {i}"})


class AlertCollector:
    def __init__(self) -> None:
        self.sent: list[dict] = []

    def dispatch(self, alert: dict) -> None:
        self.sent.append(alert)


def agreement_tracker(tmp_path, now: list[float], rates=None, **overrides):
    from guardrail.agents.agreement import AgreementTracker
    from guardrail.config.settings import load_settings
    from guardrail.stream.telemetry import Telemetry

    users = tmp_path / "users"
    users.write_text("ana:$2b$12$" + "x" * 53 + "\n")
    values = {"review_users_file": str(users), "window_seconds": 300,
              "window_expires_seconds": 3600, "agreement_min_reviews": 10,
              "corrected_min_reviews": 5, **overrides}
    settings = load_settings(environ={}, **values)
    dispatcher, telemetry = AlertCollector(), Telemetry()
    tracker = AgreementTracker(settings, telemetry=telemetry, dispatcher=dispatcher,
                               rates=rates, clock=lambda: now[0])
    return tracker, dispatcher, telemetry


def feed_labels(tracker, labels, *, caught_up=True):
    for label in labels:
        tracker.fold.apply(label.key(), label.encode(), where="test")
    tracker.after_poll(caught_up=caught_up)


def polite_judge_labels(start: int, n_false: int, *, ms: int) -> list[LabelRecord]:
    """5 real insults flagged, ``n_false`` polite answers flagged too, 5 SAFE."""
    rows = ([("UNSAFE", "unsafe")] * 5 + [("UNSAFE", "safe")] * n_false
            + [("SAFE", "safe")] * 5)
    return [label_record(start + i, v, h, 1.0, ms=ms) for i, (v, h) in enumerate(rows)]
