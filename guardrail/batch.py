"""Judge a list of cases and write one JSON file per case plus ``summary.json``.

    summary = await run_batch(cases, settings=settings, output_dir=Path("out"))
    summary.gate_exit_code()   # 0 safe, 1 unsafe found, 3 something unjudged
"""

from __future__ import annotations

import asyncio
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .evaluate import aggregate_cost, build_evaluator
from .inputs import InputProblem
from .judge import Judge
from .models import Case, CostEstimate, RedteamMetrics, dumps
from .settings import Settings

__all__ = ["BatchSummary", "run_batch", "safe_filename", "case_report"]

_UNSAFE_FILENAME = re.compile(r"[^A-Za-z0-9._-]+")


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

    def add(self, case_id: str, metrics: RedteamMetrics, judged: bool) -> None:
        self.cases += 1
        self.judged += judged
        self.not_judged += not judged
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

    def gate_exit_code(self) -> int:
        """For deployment gates: unsafe beats unjudged; an unjudged case is not safe."""
        if any(s["unsafe"] for s in self.metrics.values()):
            return 1
        if self.errors or self.not_judged:
            return 3
        return 0

    def cost_text(self) -> str:
        if self.cost.cost is None:
            return f"unknown (no price for '{self.judge_model}' in litellm's cost map)"
        return f"${self.cost.cost:.6f}"

    def to_json(self) -> dict[str, Any]:
        data = dict(vars(self))
        data["cost"] = self.cost.model_dump()
        return data


def case_report(case: Case, metrics: RedteamMetrics) -> dict[str, Any]:
    """The ``run eval`` per-case report: identity, judged fields, every branch."""
    fields = case.model_dump(include={"output", "input", "context", "reference"},
                             exclude_none=True)
    return {"case_id": case.case_id, "fields": fields,
            "redteam": metrics.model_dump(mode="json")}


async def run_batch(
    cases: list[tuple[str, Case]],
    *,
    settings: Settings,
    output_dir: Path,
    report: str = "redteam",
    problems: list[InputProblem] | None = None,
    judge: Judge | None = None,
    progress: bool = False,
) -> BatchSummary:
    """Judge cases concurrently (bounded by the judge's limit) and write files."""
    output_dir.mkdir(parents=True, exist_ok=True)
    evaluator = build_evaluator(settings, judge=judge)
    summary = BatchSummary(judge_model=settings.judge.model,
                           input_problems=[str(p) for p in problems or []])
    taken: set[str] = {"summary"}
    gate = asyncio.Semaphore(max(1, settings.judge.concurrency))
    totals: list[Any] = []

    async def judge_one(index: int, case: Case) -> tuple[int, Case, RedteamMetrics]:
        async with gate:
            return index, case, await evaluator.evaluate(case)

    tasks = [asyncio.create_task(judge_one(i, c)) for i, (_, c) in enumerate(cases, 1)]
    done: dict[int, tuple[Case, RedteamMetrics]] = {}
    try:
        for finished, task in enumerate(asyncio.as_completed(tasks), 1):
            index, case, metrics = await task
            done[index] = (case, metrics)
            if progress:
                bar = "#" * (30 * finished // len(tasks))
                print(f"\r[{bar:<30}] {finished}/{len(tasks)} cases", end="", file=sys.stderr,
                      flush=True)
    finally:
        await evaluator.aclose()
    if progress and tasks:
        print(file=sys.stderr)
    for index in sorted(done):  # file names follow input order, so reruns match
        case, metrics = done[index]
        name = safe_filename(case.case_id, index, taken)
        body = case_report(case, metrics) if report == "eval" else metrics
        (output_dir / name).write_bytes(dumps(body, indent=True))
        summary.add(case.case_id or name[:-5], metrics, judged=case.has_output)
        totals.extend(metrics.metrics)
    summary.cost = aggregate_cost(totals)
    (output_dir / "summary.json").write_bytes(dumps(summary.to_json(), indent=True))
    return summary
