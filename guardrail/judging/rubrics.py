"""Rubrics are data: YAML or JSON files, one metric each, loaded at run time.

The defaults (``bias``, ``toxicity``) ship inside the wheel; a user directory
adds or overrides metrics by name::

    >>> defaults = load_rubric_dir()              # the shipped rubrics
    >>> [m.name for m in defaults]
    ['bias', 'toxicity']
    >>> merged = merge_metrics(defaults, [my_metric])   # override by name or append

The agent rubrics (``tool_injection``, ``unsafe_action``, ``goal_drift``, each
reading the ``trajectory`` field) live in the ``agent/`` subfolder: an agent
run is judged on them besides the defaults, a plain message never is::

    >>> [m.name for m in agent_metrics()]
    ['goal_drift', 'tool_injection', 'unsafe_action']

The session rubrics (``multi_turn_jailbreak``, ``conversation_harm``, and
``bias`` and ``toxicity`` over the transcript, each reading the ``session``
field) live in ``session/``: a session judgment is judged on them only::

    >>> [m.name for m in session_metrics()]
    ['bias', 'conversation_harm', 'multi_turn_jailbreak', 'toxicity']
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
import yaml
from pydantic import ValidationError

from ..errors import RubricError
from .models import ITEM_FIELDS, MetricRubric

__all__ = ["default_rubric_dir", "agent_rubric_dir", "session_rubric_dir", "load_rubric_dir",
           "load_rubric_file", "merge_metrics", "parse_metric", "default_metrics", "agent_metrics",
           "session_metrics"]

_RUBRIC_SUFFIXES = (".yaml", ".yml", ".json")


def default_rubric_dir() -> Path:
    """The shipped rubric folder: inside the wheel, or ``rubrics/`` in a checkout."""
    packaged = resources.files("guardrail").joinpath("rubrics")
    if packaged.is_dir():
        return Path(str(packaged))
    # An editable install runs from the source tree, where rubrics/ sits beside
    # the package instead of inside it.
    return Path(__file__).resolve().parents[2] / "rubrics"


def agent_rubric_dir() -> Path:
    """The shipped agent rubrics: a subfolder, so that :func:`load_rubric_dir`
    of the shipped folder (the plain messages' defaults) never loads them."""
    return default_rubric_dir() / "agent"


def session_rubric_dir() -> Path:
    """The shipped session rubrics: a subfolder, like :func:`agent_rubric_dir`."""
    return default_rubric_dir() / "session"


def parse_metric(data: Any, *, source: str) -> MetricRubric:
    """Validate one rubric mapping; errors name the source and the field."""
    if not isinstance(data, dict):
        raise RubricError(f"{source}: a rubric must be a mapping, got {type(data).__name__}")
    try:
        return MetricRubric.model_validate(data)
    except ValidationError as exc:
        raise RubricError(f"{source}: {_describe(exc)}") from None


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "rubric"
        if err["type"] == "missing":
            parts.append(f"field '{field}' is required")
        elif err["type"] == "extra_forbidden":
            parts.append(f"unknown field '{field}'")
        elif err["type"] == "literal_error" and field.startswith("item_fields"):
            parts.append(f"field '{field}': unknown item field {err.get('input')!r} "
                         f"(allowed: {', '.join(ITEM_FIELDS)})")
        else:
            parts.append(f"field '{field}': {err['msg']}")
    return "; ".join(parts)


def load_rubric_file(path: Path) -> MetricRubric:
    """Load one rubric file (YAML or JSON)."""
    try:
        text = path.read_text(encoding="utf-8")
        data = orjson.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, orjson.JSONDecodeError, yaml.YAMLError) as exc:
        raise RubricError(f"{path}: cannot read rubric: {exc}") from None
    return parse_metric(data, source=str(path))


def load_rubric_dir(path: Path | str | None = None) -> tuple[MetricRubric, ...]:
    """Load every rubric in a folder, sorted by file name; names must be unique."""
    folder = Path(path) if path is not None else default_rubric_dir()
    if not folder.is_dir():
        raise RubricError(f"{folder}: rubric directory does not exist")
    files = sorted(p for p in folder.iterdir() if p.suffix in _RUBRIC_SUFFIXES and p.is_file())
    metrics = [load_rubric_file(p) for p in files]
    _check_unique((m.name for m in metrics), source=str(folder))
    return tuple(metrics)


@functools.lru_cache(maxsize=1)
def default_metrics() -> tuple[MetricRubric, ...]:
    """The shipped default metrics (bias, toxicity), loaded once."""
    return load_rubric_dir(default_rubric_dir())


@functools.lru_cache(maxsize=1)
def agent_metrics() -> tuple[MetricRubric, ...]:
    """The shipped agent-run metrics (``trajectory`` readers), loaded once."""
    return load_rubric_dir(agent_rubric_dir())


@functools.lru_cache(maxsize=1)
def session_metrics() -> tuple[MetricRubric, ...]:
    """The shipped session metrics (``session`` readers), loaded once."""
    return load_rubric_dir(session_rubric_dir())


def _check_unique(names: Iterable[str], *, source: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise RubricError(f"{source}: duplicate metric name '{name}'")
        seen.add(name)


def merge_metrics(
    base: Sequence[MetricRubric], *overlays: Sequence[MetricRubric]
) -> tuple[MetricRubric, ...]:
    """Apply overlays in order: a metric with a known name replaces it in place,
    a new name is appended."""
    merged: dict[str, MetricRubric] = {m.name: m for m in base}
    for overlay in overlays:
        for metric in overlay:
            merged[metric.name] = metric
    return tuple(merged.values())
