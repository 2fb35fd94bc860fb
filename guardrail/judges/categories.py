"""Which guard categories decide which metric: data in ``rubrics/guards/<protocol>.yaml``.

A guard answers in its own categories (Llama Guard's ``S10``, Qwen3Guard's
``Unethical Acts``, a moderation endpoint's ``harassment/threatening``); a
:class:`CategoryMap` says which of them decide each metric, and which
metrics the guard covers at all::

    cmap = load_category_map("llama_guard")                  # the shipped map
    cmap = load_category_map("llama_guard", override={"metrics": {"toxicity": ["S10"]}})
    cmap.covered(["bias", "toxicity", "pii"])     # (('bias', 'toxicity'), ('pii',))
    cmap.decide(verdict, "bias", judge="openai/llama-guard-3")   # a MetricVerdict
    cmap.label("S10")                             # 'S10: Hate'

The file's keys: ``protocol`` (its name), ``categories`` (code → name as the
guard answers it), ``metrics`` (metric → codes), ``partial`` (metrics the
guard covers only in part: a SAFE from it is weaker evidence), and for the
protocols that take the metric's rubric as their policy, ``rubric_metrics:
true`` and ``builtin`` (metric → the guard's own pre-baked criterion, used
instead of the rubric). An override merges over the file: a metric mapped to
``[]`` or null is removed, a ``builtin`` entry set to null too.

A metric the guard does not cover is never SAFE: :meth:`CategoryMap.covered`
lists it as uncovered and :meth:`CategoryMap.decide` raises
:class:`~guardrail.judges.protocols.GuardCoverageError` for it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from ..errors import ConfigError
from ..judging.rubrics import default_rubric_dir
from .protocols.base import GuardCoverageError, GuardVerdict, Label

__all__ = ["CategoryMap", "CategoryMapError", "MetricVerdict", "load_category_map",
           "guard_map_dir"]

_KEYS = {"protocol", "categories", "metrics", "partial", "rubric_metrics", "builtin"}
_METRIC = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class CategoryMapError(ConfigError):
    """A category map file or override is invalid; the message names the field."""


@dataclass(frozen=True)
class MetricVerdict:
    """What a guard answer means for one metric: its label, the violations
    (category labels with codes), and P(UNSAFE) when it applies to the metric."""

    verdict: Label
    violations: tuple[str, ...] = ()
    probability: float | None = None
    p_unsure: float | None = None


@dataclass(frozen=True)
class CategoryMap:
    """One protocol's categories and their metrics (see the module text)."""

    protocol: str
    names: Mapping[str, str] = field(default_factory=dict)
    metrics: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    builtin: Mapping[str, str] = field(default_factory=dict)
    rubric_metrics: bool = False
    partial: frozenset[str] = frozenset()
    source: str = ""

    def covered(self, metric_names: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """``(covered, uncovered)``, each in the given order. Protocols that take
        the rubric as policy cover every metric (the judge still needs its rubric)."""
        names = list(metric_names)
        if self.rubric_metrics:
            return tuple(names), ()
        return (tuple(n for n in names if n in self.metrics),
                tuple(n for n in names if n not in self.metrics))

    def label(self, code: str) -> str:
        """``S10: Hate``; the name alone where the guard answers with names."""
        name = self.names.get(code, code)
        return name if name == code else f"{code}: {name}"

    def decide(self, verdict: GuardVerdict, metric: str, *, judge: str) -> MetricVerdict:
        """The verdict for ``metric``: UNSAFE (or UNSURE) only through a category
        mapped to it. An answer that names no category counts against every
        covered metric (it cannot be placed, so it is not SAFE); an answer
        flagged for other categories only is SAFE for this metric, without a
        P(UNSAFE) (the guard's P is not this metric's)."""
        if self.rubric_metrics:
            return MetricVerdict(verdict.verdict, tuple(c.label for c in verdict.categories),
                                 verdict.p_unsafe, verdict.p_unsure)
        if metric not in self.metrics:
            raise GuardCoverageError(judge, metric, f"no {self.protocol} category maps to it")
        codes = self.metrics[metric]
        if verdict.scores:
            return self._scored(verdict, metric, codes, judge)
        if verdict.verdict == "SAFE" or not verdict.categories:
            return MetricVerdict(verdict.verdict, (), verdict.p_unsafe, verdict.p_unsure)
        hits = tuple(c.label for c in verdict.categories if c.code in codes)
        if hits:
            return MetricVerdict(verdict.verdict, hits, verdict.p_unsafe, verdict.p_unsure)
        return MetricVerdict("SAFE")

    def _scored(self, verdict: GuardVerdict, metric: str, codes: tuple[str, ...],
                judge: str) -> MetricVerdict:
        scores = {code: score for code, score in verdict.scores if code in codes}
        if not scores:
            raise GuardCoverageError(judge, metric, "the answer holds none of its categories "
                                     f"({', '.join(codes)})")
        flagged = {c.code for c in verdict.categories}
        hits = tuple(self.label(code) for code in scores if code in flagged)
        return MetricVerdict("UNSAFE" if hits else "SAFE", hits, max(scores.values()))


def guard_map_dir() -> Path:
    """The shipped category maps: ``rubrics/guards/`` (inside the wheel too)."""
    return default_rubric_dir() / "guards"


def load_category_map(protocol: str, *, path: Path | str | None = None,
                      override: Mapping[str, Any] | None = None) -> CategoryMap:
    """The map for ``protocol``: the shipped file (or ``path``), then ``override``."""
    if path is None and override is None:
        return _shipped(protocol)
    file = Path(path) if path is not None else guard_map_dir() / f"{protocol}.yaml"
    data = _read(file)
    if override:
        data = _merged(data, override, f"{file} (override)")
    return _build(protocol, data, str(file))


@functools.lru_cache(maxsize=16)
def _shipped(protocol: str) -> CategoryMap:
    file = guard_map_dir() / f"{protocol}.yaml"
    return _build(protocol, _read(file), str(file))


def _read(file: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CategoryMapError(f"{file}: no category map for this guard protocol") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise CategoryMapError(f"{file}: cannot read category map: {exc}") from None
    if not isinstance(data, dict):
        raise CategoryMapError(f"{file}: a category map must be a mapping")
    return data


def _merged(base: dict[str, Any], override: Mapping[str, Any], source: str) -> dict[str, Any]:
    unknown = sorted(set(override) - _KEYS)
    if unknown:
        raise CategoryMapError(f"{source}: unknown field(s) {unknown} (known: {sorted(_KEYS)})")
    data = dict(base)
    for key in ("categories", "metrics", "builtin"):
        if key in override:
            if not isinstance(override[key], Mapping):
                raise CategoryMapError(f"{source}: field '{key}' must be a mapping")
            merged = {**(data.get(key) or {}), **override[key]}
            data[key] = {k: v for k, v in merged.items()
                         if key == "categories" or v not in (None, [])}
    for key in ("partial", "rubric_metrics", "protocol"):
        if key in override:
            data[key] = override[key]
    return data


def _build(protocol: str, data: dict[str, Any], source: str) -> CategoryMap:
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise CategoryMapError(f"{source}: unknown field(s) {unknown} (known: {sorted(_KEYS)})")
    if data.get("protocol") != protocol:
        raise CategoryMapError(f"{source}: field 'protocol' must be {protocol!r}, got "
                               f"{data.get('protocol')!r}")
    names = _names(data.get("categories") or {}, source)
    metrics = {metric: _codes(metric, codes, names, source)
               for metric, codes in _mapping(data, "metrics", source).items()}
    builtin = {_metric(m, f"builtin.{m}", source): _criterion(m, c, names, source)
               for m, c in _mapping(data, "builtin", source).items() if c is not None}
    rubric_metrics = data.get("rubric_metrics", False)
    if not isinstance(rubric_metrics, bool):
        raise CategoryMapError(f"{source}: field 'rubric_metrics' must be true or false")
    partial = data.get("partial") or []
    if not isinstance(partial, list) or any(not isinstance(p, str) for p in partial):
        raise CategoryMapError(f"{source}: field 'partial' must be a list of metric names")
    stray = sorted(set(partial) - set(metrics) - set(builtin))
    if stray and not rubric_metrics:
        raise CategoryMapError(f"{source}: field 'partial' names unmapped metric(s) {stray}")
    return CategoryMap(protocol, MappingProxyType(names), MappingProxyType(metrics),
                       MappingProxyType(builtin), rubric_metrics, frozenset(partial), source)


def _mapping(data: dict[str, Any], key: str, source: str) -> dict[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise CategoryMapError(f"{source}: field '{key}' must be a mapping")
    return value


def _names(raw: Any, source: str) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise CategoryMapError(f"{source}: field 'categories' must map codes to names")
    names = {}
    for code, name in raw.items():
        if not isinstance(code, str) or not code.strip():
            raise CategoryMapError(f"{source}: categories: a code must be a non-empty string, "
                                   f"got {code!r}")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise CategoryMapError(f"{source}: categories.{code}: the name must be text")
        names[code] = code if name is None else name.strip()
    return names


def _metric(name: Any, where: str, source: str) -> str:
    if not isinstance(name, str) or not _METRIC.match(name):
        raise CategoryMapError(f"{source}: {where}: {name!r} is not a metric name (1-64 "
                               "letters, digits, '_', '.', '-')")
    return name


def _codes(metric: Any, codes: Any, names: dict[str, str], source: str) -> tuple[str, ...]:
    where = f"metrics.{metric}"
    _metric(metric, where, source)
    if not isinstance(codes, list) or not codes or any(not isinstance(c, str) for c in codes):
        raise CategoryMapError(f"{source}: {where}: must be a non-empty list of category codes")
    unknown = [c for c in codes if c not in names]
    if unknown:
        raise CategoryMapError(f"{source}: {where}: unknown category code(s) {unknown} "
                               f"(known: {', '.join(names)})")
    return tuple(dict.fromkeys(codes))


def _criterion(metric: str, criterion: Any, names: dict[str, str], source: str) -> str:
    if not isinstance(criterion, str) or criterion not in names:
        raise CategoryMapError(f"{source}: builtin.{metric}: {criterion!r} is not one of the "
                               f"guard's criteria ({', '.join(names)})")
    return criterion
