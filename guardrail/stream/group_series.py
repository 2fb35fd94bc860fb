"""Per-group judgment series on ``/metrics``, with bounded cardinality.

Prometheus compares versions only if the judgment counters carry the group:
``guardrail_judgments_total{metric, verdict, model, model_version,
prompt_version, unit}`` and the gauge ``guardrail_unsafe_rate{metric, model,
model_version, prompt_version, unit}``. The label values come from the message's
metadata (``-`` where missing, as in the windows). Each distinct group is a
set of series, so a worker gives its own series to the first ``max_groups``
groups it counts and folds every later one into ``model="other",
model_version="other", prompt_version="other"``, counting the groups it folded
(``guardrail_metrics_groups_folded_total``).

``unit`` keeps session judgments apart: ``turn`` for every answer and agent
run (the series as they were, with one more label), ``session`` for the
judgments of whole conversations (each judgment of a session counts, as the
results topic has them). A group and its two units share one of the
``max_groups``; a folded group keeps its unit, so sessions never join turns::

    series = GroupSeries(telemetry.judgments, telemetry.unsafe_rate,
                         telemetry.groups_folded, max_groups=50)
    group = series.group_of({"model": "bot", "model_version": "v2"})     # a turn
    series.count("toxicity", "unsafe", group)
    series.count("multi_turn_jailbreak", "safe",
                 series.group_of({"model": "bot"}, unit="session"))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["GroupSeries", "GROUP_LABELS", "SERIES_LABELS", "UNIT", "OTHER", "MISSING",
           "FOLDED_MEMORY"]

#: The group labels of the per-group series, read from the message's metadata.
GROUP_LABELS = ("model", "model_version", "prompt_version")
#: What a judgment judged: ``turn`` (an answer, an agent run) or ``session``.
UNIT = "unit"
#: Every label a per-group series has besides ``metric`` (and ``verdict``).
SERIES_LABELS = (*GROUP_LABELS, UNIT)
#: Every label of a group beyond the limit.
OTHER = "other"
#: A label the metadata lacks (as in the windows' groups).
MISSING = "-"
#: Folded groups remembered so each is counted once; beyond this many, further
#: groups are still folded but no longer counted (memory stays bounded).
FOLDED_MEMORY = 10_000
#: Longest label value kept (longer metadata values are cut).
MAX_VALUE_CHARS = 128
_VERDICTS = ("safe", "unsafe", "error")

#: The group labels' values, then the unit.
Group = tuple[str, str, str, str]


class GroupSeries:
    """Which group a judgment is counted under, and the counting itself."""

    def __init__(self, judgments: Any, unsafe_rate: Any, folded: Any, *,
                 max_groups: int = 50) -> None:
        self._judgments, self._rate, self._folded = judgments, unsafe_rate, folded
        #: Applies to groups seen from now on; groups with series keep them.
        self.max_groups = max_groups
        self._own: set[tuple[str, ...]] = set()
        self._folded_groups: set[tuple[str, ...]] = set()
        #: Own groups (with their unit) whose verdict series exist from 0.
        self._started: set[Group] = set()
        self._metrics: list[str] = []
        #: (metric, group) -> [unsafe, safe + unsafe]: the gauge's ratio.
        self._decided: dict[tuple[str, Group], list[int]] = {}
        #: The series of each (metric, verdict, group) and (metric, group)
        #: counted, looked up once (``labels()`` per count is slow); bounded
        #: as the groups are.
        self._counters: dict[tuple[str, str, Group], Any] = {}
        self._gauges: dict[tuple[str, Group], Any] = {}

    @property
    def groups(self) -> int:
        """Groups with series of their own (at most ``max_groups``), units aside."""
        return len(self._own)

    def expect_metrics(self, names: Iterable[str]) -> None:
        """Start these metrics' verdict series at 0 for each group given series
        (now and later): Prometheus sees no increase in a series born at its
        first count, only in later ones."""
        for name in names:
            if name not in self._metrics:
                self._metrics.append(name)
                for group in self._started:
                    self._start(name, group)

    def group_of(self, metadata: Mapping[str, Any], *, unit: str = "turn") -> Group:
        """The group to count a judgment of this metadata and ``unit`` (``turn``
        or ``session``) under: its own, or ``other`` once ``max_groups`` groups
        have series."""
        labels = tuple(str(metadata.get(label, MISSING))[:MAX_VALUE_CHARS]
                       for label in GROUP_LABELS)
        if labels not in self._own and len(self._own) < self.max_groups:
            self._own.add(labels)
        if labels not in self._own:
            if labels not in self._folded_groups and len(self._folded_groups) < FOLDED_MEMORY:
                self._folded_groups.add(labels)
                self._folded.inc()
            return (OTHER, OTHER, OTHER, unit)
        group: Group = (*labels, unit)  # type: ignore[assignment]
        if group not in self._started:
            self._started.add(group)
            for name in self._metrics:
                self._start(name, group)
        return group

    def count(self, metric: str, verdict: str, group: Group) -> None:
        """One judgment of ``metric`` (safe, unsafe or error) in ``group``."""
        counter = self._counters.get((metric, verdict, group))
        if counter is None:
            counter = self._counters[(metric, verdict, group)] = self._judgments.labels(
                metric=metric, verdict=verdict, **dict(zip(SERIES_LABELS, group)))
        counter.inc()
        if verdict not in ("safe", "unsafe"):
            return
        decided = self._decided.setdefault((metric, group), [0, 0])
        decided[0] += verdict == "unsafe"
        decided[1] += 1
        gauge = self._gauges.get((metric, group))
        if gauge is None:
            gauge = self._gauges[(metric, group)] = self._rate.labels(
                metric=metric, **dict(zip(SERIES_LABELS, group)))
        gauge.set(decided[0] / decided[1])

    def _start(self, metric: str, group: Group) -> None:
        labels = dict(zip(SERIES_LABELS, group))
        for verdict in _VERDICTS:
            self._judgments.labels(metric=metric, verdict=verdict, **labels)
