"""The metric sets a case is judged on, merged once when the evaluator starts::

    sets = MetricSets.from_settings(settings.evaluation)
    sets.base       # a plain message: bias, toxicity, custom rubrics
    sets.run        # an agent run: those and the agent rubrics
    sets.session    # a session judgment: the session rubrics and custom ones reading session
    sets.for_case(case)     # the set for this case's kind

Custom rubrics (``rubric_dir``, then ``redteam.metrics``) override by name or
append. A custom rubric that reads only fields a kind of case never has is
left out of that kind's set (nothing to judge), and overrides nothing in it. A plain message has neither an agent
run's ``trajectory`` nor a session's transcript; a run has no transcript. A
session is judged on the session rubrics and on the custom rubrics that read
``session`` (a custom rubric opts in by naming it in ``item_fields``) only:
its turns were each judged on their own already.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .models import Case, MetricRubric
from .rubrics import agent_metrics, default_metrics, load_rubric_dir, merge_metrics, session_metrics
from .settings import EvaluationSettings

__all__ = ["MetricSets", "case_kind"]

#: The fields only some kinds of case have: a plain message has none of them.
_RUN_ONLY, _SESSION_ONLY = frozenset({"trajectory"}), frozenset({"session"})


def case_kind(case: Case) -> str:
    """``session``, ``run`` or ``base``: which set judges ``case`` (a session wins)."""
    return "session" if case.has_session else "run" if case.has_trajectory else "base"


def _without(metrics: Iterable[MetricRubric], only: frozenset[str]) -> tuple[MetricRubric, ...]:
    """``metrics`` but those reading nothing besides ``only``."""
    return tuple(m for m in metrics if not set(m.item_fields) <= only)


@dataclass(frozen=True)
class MetricSets:
    """The three sets (see the module's docstring)."""

    base: tuple[MetricRubric, ...]
    run: tuple[MetricRubric, ...]
    session: tuple[MetricRubric, ...]

    @classmethod
    def from_settings(cls, evaluation: EvaluationSettings) -> MetricSets:
        custom = merge_metrics(
            load_rubric_dir(evaluation.rubric_dir) if evaluation.rubric_dir else (),
            evaluation.redteam.metrics)
        # Left out before merging: a session-only "bias" overrides the session's
        # bias, never a message's.
        return cls(
            base=merge_metrics(default_metrics(), _without(custom, _RUN_ONLY | _SESSION_ONLY)),
            run=merge_metrics(default_metrics(), agent_metrics(), _without(custom, _SESSION_ONLY)),
            session=merge_metrics(session_metrics(),
                                  [m for m in custom if "session" in m.item_fields]))

    def for_case(self, case: Case) -> tuple[MetricRubric, ...]:
        return self.for_kind(case_kind(case))

    def for_kind(self, kind: str) -> tuple[MetricRubric, ...]:
        """The set of one :func:`case_kind`."""
        return {"base": self.base, "run": self.run, "session": self.session}[kind]
