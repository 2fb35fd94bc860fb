"""Judge a list of cases and write one JSON file per case plus ``summary.json``.

    folder = report_folder(Path("out"), "redteam")   # eval: out/eval/, beside redteam's
    summary = await run_batch(cases, settings=settings, output_dir=folder,
                              progress=lambda judged, not_judged, total: ...)
    code, reason = summary.gate()   # 0 pass, 1 unsafe, 3 not judged, 4 input incomplete
    summary.nothing_judged()        # without the gate: (3, why) when no case was judged

A case counts as judged only when every one of its metrics got a verdict; a
metric without one is "not judged" and its reason is kept (grouped in
:meth:`BatchSummary.not_judged_reasons`).
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._tasks import cancel_and_wait
from ..judges.build import build_evaluator
from ..judging.evaluate import aggregate_cost
from ..formats.reader import InputProblem, default_case_id, position_id
from ..judging.judge import Judge
from ..judging.models import ITEM_FIELDS, Case, CostEstimate, RedteamMetrics, dumps
from ..config.settings import Settings

__all__ = ["BatchSummary", "run_batch", "safe_filename", "case_report", "report_folder",
           "fully_judged", "GATE_EXIT_CODES", "NOTHING_JUDGED_EXIT", "EXIT_PASS", "EXIT_UNSAFE",
           "EXIT_NOT_JUDGED", "EXIT_INPUT_INCOMPLETE"]

_UNSAFE_FILENAME = re.compile(r"[^A-Za-z0-9._-]+")

#: Exit codes of ``run --fail-on-unsafe``; when several apply, the first listed wins
#: (2 is the CLI's usage/settings error and never comes from the gate).
EXIT_PASS, EXIT_UNSAFE, EXIT_NOT_JUDGED, EXIT_INPUT_INCOMPLETE = 0, 1, 3, 4
GATE_EXIT_CODES = {
    EXIT_UNSAFE: "some metric UNSAFE",
    EXIT_NOT_JUDGED: "none UNSAFE, but some metric not judged",
    EXIT_INPUT_INCOMPLETE: "all judged SAFE, but input records skipped or no case at all",
    EXIT_PASS: "every case read and judged, every metric SAFE",
}
#: Without the gate, what makes a finished run exit non-zero: it read cases and
#: judged none of them (the judge down or unreachable). It exits with the gate's
#: "not judged" code, so a script never takes a run that judged nothing for a good one.
NOTHING_JUDGED_EXIT = EXIT_NOT_JUDGED, "cases read, but none judged"

#: ``run eval`` writes here inside ``--output-dir``, so that ``run redteam`` and
#: ``run eval`` into one folder (as the spec's usage does) keep both sets of files.
EVAL_SUBFOLDER = "eval"


def report_folder(output_dir: Path, report: str) -> Path:
    """Where a run writes: redteam into ``output_dir`` itself (the spec's place for
    ``<case_id>.json``), eval into its ``eval/`` subfolder."""
    return output_dir / EVAL_SUBFOLDER if report == "eval" else output_dir


def safe_filename(case_id: str | None, index: int, taken: set[str]) -> str:
    """A file name from a case_id that cannot escape the folder or collide."""
    stem = _UNSAFE_FILENAME.sub("_", case_id or "").strip("._")[:100] or f"case-{index}"
    name, n = stem, 2
    while name.lower() in taken:
        name, n = f"{stem}-{n}", n + 1
    taken.add(name.lower())
    return f"{name}.json"


@dataclass
class BatchSummary:
    """What a run judged. ``judged``/``not_judged`` count cases: a case is judged
    only when every metric got a verdict. ``errors`` lists each metric without one."""

    cases: int = 0
    judged: int = 0
    not_judged: int = 0
    judge_model: str = ""
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: list[dict[str, str]] = field(default_factory=list)
    input_problems: list[str] = field(default_factory=list)
    cost: CostEstimate = field(default_factory=CostEstimate)
    dropped_evidence_spans: int = 0
    cached_judgments: int = 0
    #: Of the input tokens, those the provider read from its prompt cache.
    cached_input_tokens: int = 0

    def add(self, case_id: str, metrics: RedteamMetrics) -> None:
        self.cases += 1
        complete = fully_judged(metrics)
        self.judged += complete
        self.not_judged += not complete
        for m in metrics.metrics:
            stats = self.metrics.setdefault(
                m.name, {"judged": 0, "passed": 0, "unsafe": 0, "errors": 0, "pass_rate": None})
            self.dropped_evidence_spans += m.dropped_spans
            self.cached_judgments += m.cached
            self.cached_input_tokens += m.cached_tokens
            if m.error is not None:
                stats["errors"] += 1
                self.errors.append({"case_id": case_id, "metric": m.name, "error": m.error})
                continue
            stats["judged"] += 1
            stats["passed" if m.result[0].passed else "unsafe"] += 1
            stats["pass_rate"] = round(stats["passed"] / stats["judged"], 4)

    @property
    def unsafe(self) -> int:
        """UNSAFE verdicts over all cases and metrics."""
        return sum(s["unsafe"] for s in self.metrics.values())

    def not_judged_reasons(self) -> dict[str, int]:
        """Metrics without a verdict, counted per reason, most frequent first."""
        return dict(Counter(e["error"] for e in self.errors).most_common())

    def gate(self) -> tuple[int, str]:
        """The deployment gate: ``(exit code, why)``. Unsafe beats unjudged beats an
        incomplete input; nothing unread or unjudged ever passes as safe."""
        if self.unsafe:
            return EXIT_UNSAFE, f"{self.unsafe} metric verdict(s) UNSAFE"
        if self.errors or self.not_judged:
            return EXIT_NOT_JUDGED, (f"{len(self.errors)} metric(s) of {self.not_judged} "
                                     "case(s) not judged")
        if self.input_problems:
            return EXIT_INPUT_INCOMPLETE, (f"{len(self.input_problems)} input record(s) "
                                           "skipped, so not judged")
        if not self.cases:
            return EXIT_INPUT_INCOMPLETE, "nothing judged: the input holds no case"
        return EXIT_PASS, GATE_EXIT_CODES[EXIT_PASS]

    def gate_exit_code(self) -> int:
        return self.gate()[0]

    def nothing_judged(self) -> tuple[int, str] | None:
        """``(EXIT_NOT_JUDGED, why)`` when the run read cases but judged none of
        them, else None: the exit of a run without the gate. An input without any
        case is the gate's business (exit 4), not this: nothing was left unjudged."""
        if not self.cases or self.judged:
            return None
        return NOTHING_JUDGED_EXIT[0], (f"nothing judged: none of the {self.cases} case(s) "
                                        "got a verdict for every metric")

    def cost_text(self) -> str:
        if self.cost.cost is None:
            return f"unknown (no price for '{self.judge_model}' in litellm's cost map)"
        return f"${self.cost.cost:.6f}"

    def to_json(self) -> dict[str, Any]:
        data = dict(vars(self))
        data["cost"] = self.cost.model_dump()
        data["not_judged_reasons"] = self.not_judged_reasons()
        return data


def fully_judged(metrics: RedteamMetrics) -> bool:
    """A case counts as judged only when every one of its metrics got a verdict."""
    return bool(metrics.metrics) and all(m.error is None for m in metrics.metrics)


def case_report(case: Case, metrics: RedteamMetrics) -> dict[str, Any]:
    """The ``run eval`` per-case report: identity, judged fields, every branch."""
    fields = case.model_dump(include=set(ITEM_FIELDS), exclude_none=True)
    return {"case_id": case.case_id, "fields": fields,
            "redteam": metrics.model_dump(mode="json")}


def _named(case: Case, where: str, index: int) -> Case:
    """A case without ``case_id`` is named by the rule the stream uses too
    (:func:`~guardrail.formats.reader.default_case_id`): here ``case-N``, N its line or
    item number; the name shows in its report, its file name and the summary."""
    if case.case_id:
        return case
    # A file has no Kafka key: the rule falls through to the case's position.
    return case.model_copy(update={"case_id": default_case_id(None, position_id(where, index))})


async def run_batch(
    cases: list[tuple[str, Case]],
    *,
    settings: Settings,
    output_dir: Path,
    report: str = "redteam",
    problems: list[InputProblem] | None = None,
    judge: Judge | None = None,
    progress: Callable[[int, int, int], None] | None = None,
) -> BatchSummary:
    """Judge cases concurrently (bounded by the judge's limit) and write files into
    ``output_dir``; ``progress(judged, not_judged, total)`` is called as each case
    finishes, counting cases judged (every metric got a verdict) apart from those
    that were tried and not judged."""
    output_dir.mkdir(parents=True, exist_ok=True)
    cases = [(where, _named(case, where, i)) for i, (where, case) in enumerate(cases, 1)]
    done = await _judge_all(cases, settings=settings, judge=judge, progress=progress)
    summary = BatchSummary(judge_model=settings.judge.model,
                           input_problems=[str(p) for p in problems or []])
    taken: set[str] = {"summary"}
    totals: list[Any] = []
    for index in sorted(done):  # file names follow input order, so reruns match
        case, metrics = done[index]
        name = safe_filename(case.case_id, index, taken)
        body = case_report(case, metrics) if report == "eval" else metrics
        (output_dir / name).write_bytes(dumps(body, indent=True))
        summary.add(case.case_id or name[:-5], metrics)
        totals.extend(metrics.metrics)
    summary.cost = aggregate_cost(totals)
    (output_dir / "summary.json").write_bytes(dumps(summary.to_json(), indent=True))
    return summary


async def _judge_all(cases: list[tuple[str, Case]], *, settings: Settings, judge: Judge | None,
                     progress: Callable[[int, int, int], None] | None
                     ) -> dict[int, tuple[Case, RedteamMetrics]]:
    evaluator = build_evaluator(settings, judge=judge)
    gate = asyncio.Semaphore(max(1, settings.judge.calls_in_flight()))

    async def judge_one(index: int, case: Case) -> tuple[int, Case, RedteamMetrics]:
        async with gate:
            return index, case, await evaluator.evaluate(case)

    tasks = [asyncio.create_task(judge_one(i, c)) for i, (_, c) in enumerate(cases, 1)]
    done: dict[int, tuple[Case, RedteamMetrics]] = {}
    judged = 0
    try:
        for finished, task in enumerate(asyncio.as_completed(tasks), 1):
            index, case, metrics = await task
            done[index] = (case, metrics)
            judged += fully_judged(metrics)
            if progress is not None:
                progress(judged, finished - judged, len(tasks))
    finally:
        # After a JudgeConfigError: stop the other cases before closing the judge.
        await cancel_and_wait(tasks)
        await evaluator.aclose()
    return done
