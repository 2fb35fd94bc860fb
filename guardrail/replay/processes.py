"""A replay spread over several processes, each reading its own partitions.

One replay process judges, writes and reads Kafka on one core; a backfill of
many partitions can use more. The plan (offsets per partition, by time) is
made once, the partitions are dealt to ``processes`` children (each gets about
the same number of records), and each child runs :func:`.replay.replay` on
its share with the same run id, so the results, DLQ records and judgment
events are those of one replay. The judgment cache is one SQLite file in WAL
mode, which several processes share. Progress and the summary add up::

    summary = replay_in_processes(settings, processes=2, start_ms=0,
                                  progress=lambda done, planned: ...)

Not with ``--sample-rate`` (a ``first_per_version`` rule counts in one
process's memory) nor ``--batch-api`` (one state file): those run in one.
Children are started fresh (``spawn``), not forked: a fork would copy the
parent's event loop and clients.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import pickle
import queue
from typing import Any

from ..config.settings import Settings
from ..stream.tally import JudgeTally
from .backfill import Progress, ReplaySummary, new_origin, plan_ranges, prepare_outputs, replay

__all__ = ["replay_in_processes", "deal"]

#: How often the parent checks that its children live, between their reports (seconds).
PROGRESS_EVERY = 0.5


def deal(ranges: dict[int, tuple[int, int]], processes: int) -> list[dict[int, tuple[int, int]]]:
    """The partitions in ``processes`` shares of about equal records, largest
    first to the least loaded share; empty ranges and empty shares left out::

        deal({0: (0, 10), 1: (0, 10), 2: (0, 2)}, 2)  # [{0: (0, 10), 2: (0, 2)}, {1: (0, 10)}]
    """
    shares: list[dict[int, tuple[int, int]]] = [{} for _ in range(max(1, processes))]
    loads = [0] * len(shares)
    for partition, (first, stop) in sorted(ranges.items(), key=lambda kv: kv[1][0] - kv[1][1]):
        if stop <= first:
            continue
        least = loads.index(min(loads))
        shares[least][partition] = (first, stop)
        loads[least] += stop - first
    return [share for share in shares if share]


def replay_in_processes(settings: Settings, *, processes: int, start_ms: int,
                        end_ms: int | None = None, topic: str | None = None,
                        progress: Progress | None = None, **options: Any) -> ReplaySummary:
    """Replay [start_ms, end_ms) of ``topic`` in up to ``processes`` processes;
    ``options`` go to each :func:`.replay.replay` (results and DLQ topics,
    ``fire_alerts``). One summary for the whole run; the first child error
    stops the others and is raised."""
    topic = topic or settings.kafka.input_topic
    ranges = asyncio.run(_plan(settings, start_ms, end_ms, topic, options))
    shares = deal(ranges, processes)
    if len(shares) <= 1:  # one share (or nothing to read): no process of its own
        return asyncio.run(replay(settings, start_ms=start_ms, topic=topic, ranges=ranges,
                                  progress=progress, **options))
    context = multiprocessing.get_context("spawn")
    updates = context.Queue()
    args = {"topic": topic, "origin": new_origin(), "start_ms": start_ms, **options}
    children = [context.Process(target=_child, args=(settings, i, share, args, updates),
                                name=f"guardrail-replay-{i}", daemon=True)
                for i, share in enumerate(shares)]
    for child in children:
        child.start()
    try:
        summaries = _follow(children, updates, sum(b - a for a, b in ranges.values()), progress)
    finally:
        for child in children:
            if child.is_alive():
                child.terminate()
            child.join()
    return merge(summaries, ranges)


async def _plan(settings: Settings, start_ms: int, end_ms: int | None, topic: str,
                options: dict[str, Any]) -> dict[int, tuple[int, int]]:
    """The outputs checked (the broker answers) and created, then the plan."""
    await prepare_outputs(settings, options.get("results_topic"), options.get("dlq_topic"))
    return await plan_ranges(settings, start_ms=start_ms, end_ms=end_ms, topic=topic)


def _follow(children: list[Any], updates: Any, planned: int,
            progress: Progress | None) -> list[ReplaySummary]:
    """The children's summaries, their progress passed on meanwhile; raises the
    first child's error, or says which child died without a word."""
    done_by: dict[int, int] = {}
    summaries: dict[int, ReplaySummary] = {}
    quiet = 0  # checks in a row without a report while a child is gone
    while len(summaries) < len(children):
        try:
            kind, index, value = updates.get(timeout=PROGRESS_EVERY)
        except queue.Empty:
            dead = [i for i, c in enumerate(children)
                    if c.exitcode is not None and i not in summaries]
            quiet = quiet + 1 if dead else 0
            if quiet >= 3:  # its last words would have arrived by now
                raise RuntimeError(f"replay process {dead[0]} exited with code "
                                   f"{children[dead[0]].exitcode} before it finished")
            continue
        if kind == "error":
            raise value
        if kind == "done":
            summaries[index] = value
        else:
            done_by[index] = value
            if progress is not None:
                progress(sum(done_by.values()), planned)
    return [summaries[i] for i in range(len(children))]


def _child(settings: Settings, index: int, share: dict[int, tuple[int, int]],
           args: dict[str, Any], updates: Any) -> None:
    """One child's replay of its share (runs in the child process)."""
    def report(done: int, _planned: int) -> None:
        updates.put(("progress", index, done))

    try:
        summary = asyncio.run(replay(settings, ranges=share, progress=report, **args))
    except BaseException as exc:  # told to the parent, which raises it
        updates.put(("error", index, _picklable(exc)))
        raise SystemExit(1) from None
    updates.put(("done", index, summary))


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def merge(summaries: list[ReplaySummary], ranges: dict[int, tuple[int, int]]) -> ReplaySummary:
    """One summary of the children's: counts and costs added, every range."""
    first = summaries[0]
    total = dataclasses.replace(first, tally=JudgeTally(), planned=0, processed=0, results=0,
                                dlq=0, judgment_events=0, ranges=dict(ranges))
    for s in summaries:
        total.planned += s.planned
        total.processed += s.processed
        total.results += s.results
        total.dlq += s.dlq
        total.judgment_events += s.judgment_events
        for f in dataclasses.fields(JudgeTally):  # every count and the cost
            setattr(total.tally, f.name, getattr(total.tally, f.name) + getattr(s.tally, f.name))
    total.finished_at = max(s.finished_at or "" for s in summaries) or None
    return total

