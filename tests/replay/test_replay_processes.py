"""guardrail.replay.processes: how a replay's partitions are dealt to
processes, how their progress and summaries add up, and that a child's error
or death ends the run (the run itself: tests/agents/test_stream.py, both brokers)."""

import queue
from types import SimpleNamespace

import pytest

from guardrail.errors import ConfigError
from guardrail.replay import processes as replay_processes
from guardrail.replay.backfill import ReplaySummary
from guardrail.replay.processes import _follow, deal, merge


def test_partitions_are_dealt_by_records_and_empty_ones_are_left_out():
    ranges = {0: (0, 100), 1: (50, 60), 2: (0, 90), 3: (7, 7), 4: (0, 20)}
    shares = deal(ranges, 2)
    assert [sorted(s) for s in shares] == [[0, 1], [2, 4]]  # 110 records each
    assert sum(b - a for s in shares for a, b in s.values()) == 220
    assert deal(ranges, 8) == [{0: (0, 100)}, {2: (0, 90)}, {4: (0, 20)}, {1: (50, 60)}]
    assert deal({0: (5, 5)}, 2) == []


def _summary(processed, judged, cost, finished):
    s = ReplaySummary(topic="in", results_topic="R", dlq_topic="R.dlq", planned=processed,
                      processed=processed, results=processed - 1, dlq=1, judgment_events=2,
                      finished_at=finished)
    s.tally.judged, s.tally.cached, s.tally.cost = judged, 1, cost
    return s


def test_the_summaries_add_up_to_one_run():
    total = merge([_summary(10, 20, 0.5, "2026-01-01T00:00:02"),
                   _summary(5, 8, 0.25, "2026-01-01T00:00:01")], {0: (0, 10), 1: (3, 8)})
    data = total.to_json()
    assert (data["planned"], data["processed"], data["results"], data["dlq"]) == (15, 15, 13, 2)
    assert (data["judged"], data["cached"], data["cost_usd"]) == (28, 2, 0.75)
    assert data["ranges"] == {"0": (0, 10), "1": (3, 8)}
    assert data["finished_at"] == "2026-01-01T00:00:02"


def _children(*exitcodes):
    return [SimpleNamespace(exitcode=code) for code in exitcodes]


def test_progress_adds_up_across_processes_and_summaries_come_back_in_order():
    updates, seen = queue.Queue(), []
    for message in [("progress", 0, 4), ("progress", 1, 3), ("progress", 0, 9),
                    ("done", 1, "second"), ("done", 0, "first")]:
        updates.put(message)
    summaries = _follow(_children(None, None), updates, 12, lambda d, p: seen.append((d, p)))
    assert summaries == ["first", "second"]
    assert seen == [(4, 12), (7, 12), (12, 12)]


def test_a_childs_error_is_raised():
    updates = queue.Queue()
    updates.put(("progress", 0, 1))
    updates.put(("error", 1, ConfigError("topic 'in' does not exist")))
    with pytest.raises(ConfigError, match="does not exist"):
        _follow(_children(None, None), updates, 2, None)


def test_a_child_that_dies_without_a_word_ends_the_run(monkeypatch):
    monkeypatch.setattr(replay_processes, "PROGRESS_EVERY", 0.01)
    updates = queue.Queue()
    updates.put(("done", 0, "first"))
    with pytest.raises(RuntimeError, match="replay process 1 exited with code -9"):
        _follow(_children(0, -9), updates, 2, None)
