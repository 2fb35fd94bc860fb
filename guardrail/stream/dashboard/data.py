"""What the dashboard shows, checked and shaped from plain rows (no Kafka, no HTML).

The inputs are the rows of ``/rates`` (one window of one metric for one
group), the alerts this worker fired and its spend (:func:`.spend.spend_of`)::

    data = build_dashboard(rows, alerts, window_seconds=300, version_label="model_version",
                           spend=spend_of(telemetry), rules=settings.windows.alert_rules)
    data.metrics                       # ("bias", "toxicity")
    data.series("toxicity")            # one Series per group, its cells oldest first
    data.versions("toxicity")          # {family: [VersionTotals v1, VersionTotals v2]}
    data.problems                      # rows or alerts that were skipped, and why

Every cell and alert has a ``unit``: ``session`` where its group carries the
label ``unit=session`` (session judgments), else ``turn``; the group (and so
the family shown) keeps that label, so a session's line never joins its turns'.

A row that does not fit (a missing field, a count below zero, more unsafe
than judged) is skipped and named in ``problems``, never drawn as a safe
window. Coverage reads ``seen`` (every message of the window, sampled or
not) when a row has it, else takes the row's ``total``; judged means it got a
verdict (``judged`` when given, else ``total - errors``). Budget alerts
(``kind: "budget"``) belong to no window and are left out.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from ..settings import AlertRule
from ..alerts import rule_for
from ..events import labels_of, unit_of, window_key
from .spend import Spend

__all__ = ["Cell", "Series", "Alert", "VersionTotals", "Dashboard", "build_dashboard",
           "labels_of", "version_key", "utc_clock"]

#: Line colours, one per group, in legend order (red is kept for alerts).
PALETTE = ("#2563eb", "#ea8c00", "#0d9488", "#9333ea", "#db2777", "#65a30d", "#92400e",
           "#475569")


class _Row(BaseModel):
    """One ``/rates`` row as the dashboard needs it; extra fields are ignored."""

    model_config = ConfigDict(extra="ignore")

    metric: str = Field(min_length=1)
    group: str
    window_start: AwareDatetime
    window_end: AwareDatetime
    total: int = Field(ge=0)
    unsafe: int = Field(ge=0)
    errors: int = Field(ge=0)
    #: Messages seen (sampled or not; rows from before sampling lack it) and judged.
    seen: int | None = Field(default=None, ge=0)
    judged: int | None = Field(default=None, ge=0)


class _Window(BaseModel):
    start: AwareDatetime
    end: AwareDatetime


class _Alert(BaseModel):
    """An alert as :class:`~guardrail.agents.windows.WindowCounter` builds it."""

    model_config = ConfigDict(extra="ignore")

    alert_id: str = ""
    metric: str = Field(min_length=1)
    group: dict[str, str]
    window: _Window
    reasons: list[str] = []
    rate: float | None = None
    baseline: dict[str, Any] | None = None
    examples: list[dict[str, Any]] = []
    fired_at: AwareDatetime | None = None


def version_key(version: str) -> tuple[Any, ...]:
    """Natural order: v2 before v10, numbers before words."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p)
                 for p in re.split(r"(\d+)", version) if p)


@dataclass(frozen=True)
class Cell:
    """One window of one metric for one group."""

    metric: str
    group: str
    family: str  # the group without its version label, as shown
    version: str
    start: float  # epoch seconds
    end: float
    seen: int
    judged: int
    errors: int
    unsafe: int
    #: What the cell counts: ``turn`` or ``session`` (a group with ``unit=session``).
    unit: str = "turn"

    @property
    def rate(self) -> float | None:
        return self.unsafe / self.judged if self.judged else None


@dataclass(frozen=True)
class Series:
    """One group's cells for one metric, oldest first; ``color`` as in the legend."""

    metric: str
    group: str
    family: str
    version: str
    color: str
    cells: tuple[Cell, ...]


@dataclass(frozen=True)
class VersionTotals:
    """One version of a group family over all windows shown."""

    version: str
    group: str
    color: str
    seen: int
    judged: int
    errors: int
    unsafe: int
    latest: Cell
    alerts: int

    @property
    def rate(self) -> float | None:
        return self.unsafe / self.judged if self.judged else None


@dataclass(frozen=True)
class Alert:
    """An alert the worker fired, placed on its metric's chart by window and group."""

    alert_id: str
    metric: str
    group: str
    family: str
    version: str
    start: float
    end: float
    rate: float | None
    baseline_rate: float | None
    baseline_text: str
    reasons: tuple[str, ...]
    fired_at: float | None
    case_ids: tuple[str, ...]
    #: ``turn``, or ``session`` for an alert on a session cell.
    unit: str = "turn"


def _problem_text(what: str, exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "value"
    return f"{what} skipped: {where}: {first['msg']}"


def _family(labels: Mapping[str, str], version_label: str) -> str:
    shown = [f"{k}={v}" for k, v in labels.items() if k != version_label and v != "-"]
    return ", ".join(shown) or "all traffic"


def _cell(row: _Row, version_label: str) -> Cell:
    labels = labels_of(row.group)
    judged = row.judged if row.judged is not None else row.total - row.errors
    seen = row.seen if row.seen is not None else row.total
    return Cell(metric=row.metric, group=row.group, family=_family(labels, version_label),
                version=labels.get(version_label, "-"), start=row.window_start.timestamp(),
                end=row.window_end.timestamp(), seen=seen, judged=judged, errors=row.errors,
                unsafe=row.unsafe, unit=unit_of(labels))


def _cells(rows: Iterable[Any], version_label: str, problems: list[str]) -> list[Cell]:
    cells: dict[tuple[str, str, float], Cell] = {}
    duplicates = 0
    for i, raw in enumerate(rows):
        try:
            row = _Row.model_validate(raw)
        except ValidationError as exc:
            problems.append(_problem_text(f"rate row {i + 1}", exc))
            continue
        if row.unsafe + row.errors > row.total or row.window_end <= row.window_start:
            problems.append(f"rate row {i + 1} skipped: {row.unsafe} unsafe + {row.errors} "
                            f"errors of {row.total}, window {row.window_start.isoformat()} to "
                            f"{row.window_end.isoformat()} do not add up")
            continue
        cell = _cell(row, version_label)
        key = (cell.metric, cell.group, cell.start)
        if key in cells:
            duplicates += 1
            if cells[key].seen >= cell.seen:
                continue
        cells[key] = cell
    if duplicates:  # e.g. two workers answering for one window during a rebalance
        problems.append(f"{duplicates} rate row(s) repeat a window already shown; "
                        "the one with the larger count is drawn")
    return sorted(cells.values(), key=lambda c: (c.metric, c.start))


def _baseline_text(baseline: dict[str, Any] | None, version_label: str) -> str:
    if not baseline:
        return ""
    if baseline.get("kind") == "version":
        return f"{version_label} {baseline.get(version_label, '?')}"
    if baseline.get("kind") == "previous_windows":
        return f"previous {baseline.get('windows', '?')} windows"
    return str(baseline.get("kind", ""))


def _alert(raw: _Alert, version_label: str) -> Alert:
    group = window_key(raw.metric, raw.group).partition("|")[2]
    baseline_rate = (raw.baseline or {}).get("rate")
    return Alert(
        alert_id=raw.alert_id, metric=raw.metric, group=group,
        family=_family(raw.group, version_label),
        version=raw.group.get(version_label, "-"), start=raw.window.start.timestamp(),
        end=raw.window.end.timestamp(), rate=raw.rate,
        baseline_rate=baseline_rate if isinstance(baseline_rate, (int, float)) else None,
        baseline_text=_baseline_text(raw.baseline, version_label),
        reasons=tuple(raw.reasons),
        fired_at=raw.fired_at.timestamp() if raw.fired_at else None,
        case_ids=tuple(str(e["case_id"]) for e in raw.examples if e.get("case_id")),
        unit=unit_of(raw.group))


def _alerts(alerts: Iterable[Any], version_label: str, problems: list[str]) -> list[Alert]:
    parsed = []
    for i, raw in enumerate(alerts):
        if isinstance(raw, Mapping) and raw.get("kind") == "budget":
            continue  # the worker's budget, no window's: not drawn on a chart
        try:
            parsed.append(_alert(_Alert.model_validate(raw), version_label))
        except ValidationError as exc:
            problems.append(_problem_text(f"alert {i + 1}", exc))
    return sorted(parsed, key=lambda a: (a.fired_at or a.start), reverse=True)


@dataclass(frozen=True)
class Dashboard:
    """Everything one rendering of the page shows."""

    window_seconds: float
    version_label: str
    cells: tuple[Cell, ...]
    alerts: tuple[Alert, ...]
    spend: Spend | None
    problems: tuple[str, ...]
    generated_at: float
    #: metric → the absolute alert threshold of its rule (None: no such rule).
    thresholds: dict[str, float | None] = field(default_factory=dict)
    #: The judge against its reviewers, a :class:`.agreement.AgreementPanel`
    #: (None: review is off; not imported here, that module reads this one).
    agreement: Any = None
    #: Partitions this worker holds with lag and no progress
    #: (:class:`~guardrail.stream.liveness.PartitionStatus`).
    stalled: tuple[Any, ...] = ()
    #: Gate mode's counters (:class:`.gate.GatePanel`; None: gate mode is off).
    gate: Any = None

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(sorted({c.metric for c in self.cells} | {a.metric for a in self.alerts}))

    @property
    def window_starts(self) -> tuple[float, ...]:
        return tuple(sorted({c.start for c in self.cells}))

    @property
    def colors(self) -> dict[str, str]:
        """Group → line colour, the same in every chart: families together,
        versions in natural order next to each other."""
        groups = {(c.family, version_key(c.version), c.group) for c in self.cells}
        ordered = [g for _, _, g in sorted(groups)]
        return {g: PALETTE[i % len(PALETTE)] for i, g in enumerate(ordered)}

    def series(self, metric: str) -> list[Series]:
        colors = self.colors
        by_group: dict[str, list[Cell]] = {}
        for cell in self.cells:
            if cell.metric == metric:
                by_group.setdefault(cell.group, []).append(cell)
        found = [Series(metric, g, cells[0].family, cells[0].version, colors[g], tuple(cells))
                 for g, cells in by_group.items()]
        return sorted(found, key=lambda s: (s.family, version_key(s.version)))

    def alerts_for(self, metric: str) -> list[Alert]:
        return [a for a in self.alerts if a.metric == metric]

    def versions(self, metric: str) -> dict[str, list[VersionTotals]]:
        """family → its versions side by side (natural order), over all windows."""
        families: dict[str, list[VersionTotals]] = {}
        for s in self.series(metric):
            fired = sum(a.group == s.group for a in self.alerts_for(metric))
            families.setdefault(s.family, []).append(VersionTotals(
                version=s.version, group=s.group, color=s.color,
                seen=sum(c.seen for c in s.cells), judged=sum(c.judged for c in s.cells),
                errors=sum(c.errors for c in s.cells), unsafe=sum(c.unsafe for c in s.cells),
                latest=s.cells[-1], alerts=fired))
        return families


def build_dashboard(rows: Iterable[Any], alerts: Iterable[Any], *, window_seconds: float,
                    version_label: str, spend: Spend | None = None,
                    rules: tuple[AlertRule, ...] = (), problems: Iterable[str] = (),
                    now: float | None = None, agreement: Any = None,
                    stalled: Iterable[Any] = (), gate: Any = None) -> Dashboard:
    """Check the rows and alerts and shape them for the page; bad ones become problems."""
    found = list(problems)
    cells = _cells(rows, version_label, found)
    parsed_alerts = _alerts(alerts, version_label, found)
    metrics = {c.metric for c in cells} | {a.metric for a in parsed_alerts}
    thresholds = {}
    for metric in metrics:
        rule = rule_for(rules, metric)
        thresholds[metric] = rule.max_unsafe_rate if rule is not None else None
    return Dashboard(window_seconds=window_seconds, version_label=version_label,
                     cells=tuple(cells), alerts=tuple(parsed_alerts), spend=spend,
                     problems=tuple(found), generated_at=time.time() if now is None else now,
                     thresholds=thresholds, agreement=agreement, stalled=tuple(stalled),
                     gate=gate)


def utc_clock(ts: float, *, seconds: bool = False) -> str:
    """``HH:MM`` (or ``HH:MM:SS``) in UTC, as the page labels times."""
    fmt = "%H:%M:%S" if seconds else "%H:%M"
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime(fmt)
