"""guardrail.agents.windows: WindowCounter logic with in-memory stand-ins for the
Faust tables, and tumbling window bounds."""

from types import SimpleNamespace

import orjson
import pytest
from support.records import FakeWindowed, judgment_event, versioned_event, window_counter

from guardrail.agents.windows import (ReadOrder, UnknownRecords, count_record,
                                      window_bounds)
from guardrail.stream.envelope import Source
from guardrail.stream.events import JudgmentEvent, encode_bundle


def test_redelivered_judgments_are_counted_once_offset_zero_included():
    counter = window_counter()
    for offset in [0, 1, 2, 1, 2, 0, 3]:
        counter.apply(judgment_event(offset), 1000.0)
    assert counter.windowed.cells["toxicity|model=m"]["total"] == 4
    assert counter.telemetry.duplicate_judgments._value.get() == 3


def test_partitions_and_origins_are_tracked_separately():
    counter = window_counter()
    counter.apply(judgment_event(5, partition=0), 1000.0)
    counter.apply(judgment_event(5, partition=1), 1000.0)
    counter.apply(judgment_event(5, origin="replay-1"), 1000.0)
    counter.apply(judgment_event(5, partition=0), 1000.0)
    assert counter.windowed.cells["toxicity|model=m"]["total"] == 3


def test_judgments_without_a_source_are_all_counted():
    counter = window_counter()
    for _ in range(3):
        counter.apply(JudgmentEvent("toxicity", {"model": "m"}, "safe", None, 0), 1000.0)
    assert counter.windowed.cells["toxicity|model=m"]["total"] == 3


def test_absolute_rule_alerts_once_per_incident_with_examples():
    rules = [{"metric": "toxicity", "max_unsafe_rate": 0.2, "min_judgments": 5,
              "baseline_windows": 0, "cooldown_seconds": 900}]
    counter = window_counter(alert_rules=rules, alert_examples=2)
    for offset in range(20):
        counter.apply(judgment_event(offset, "unsafe" if offset % 2 else "safe"), 1000.0)
    assert len(counter.dispatcher.alerts) == 1
    alert = counter.dispatcher.alerts[0]
    assert alert["counts"]["judged"] >= 5 and alert["rate"] > 0.2
    assert alert["examples"] == [{"case_id": "c1", "evidence_spans": ["x"]},
                                 {"case_id": "c3", "evidence_spans": ["x"]}]
    assert alert["window"]["start"].startswith("1970-01-01T00:15:00")


def test_errors_count_in_the_window_but_not_in_the_rate():
    counter = window_counter()
    for offset in range(30):
        counter.apply(judgment_event(offset, "error"), 1000.0)
    cell = counter.windowed.cells["toxicity|model=m"]
    assert (cell["total"], cell["errors"], cell["unsafe"]) == (30, 30, 0)
    assert counter.dispatcher.alerts == []


def test_regression_against_a_baseline_version():
    rules = [{"metric": "*", "max_unsafe_rate": None, "min_judgments": 20,
              "baseline_windows": 0, "baseline_version": "v1", "significance": 0.01}]
    counter = window_counter(alert_rules=rules, group_labels=["model", "model_version"])
    for offset in range(100):  # v1: 3% unsafe
        counter.apply(versioned_event(offset, "v1", "unsafe" if offset < 3 else "safe"), 1000.0)
    assert counter.dispatcher.alerts == []
    for offset in range(40):  # v2: 50% unsafe
        counter.apply(versioned_event(offset, "v2", "unsafe" if offset % 2 else "safe"), 1000.0)
    [alert] = counter.dispatcher.alerts
    assert alert["group"]["model_version"] == "v2"
    assert alert["baseline"]["kind"] == "version" and alert["baseline"]["model_version"] == "v1"
    assert (alert["baseline"]["judged"], alert["baseline"]["unsafe"]) == (100, 3)
    assert "regression" in alert["reasons"][0]


@pytest.mark.parametrize("size", [60.0, 300.0, 3600.0, 0.5])
def test_window_bounds_align_to_the_window_size(size):
    for timestamp in (1714564923.25, 1714564800.0, 0.0, 12.75):
        start, end = window_bounds(timestamp, size)
        assert start <= timestamp < end
        assert end - start == pytest.approx(size)
        assert start / size == pytest.approx(round(start / size))


def test_window_bounds_examples():
    assert window_bounds(1714564923.5, 300) == (1714564800, 1714565100)
    # A timestamp on a boundary opens the next window.
    assert window_bounds(1714565100.0, 300) == (1714565100, 1714565400)
    # Every moment of one window maps to the same bounds.
    assert {window_bounds(1714564800 + s, 300) for s in (0, 1, 150, 299.999)} == \
        {(1714564800, 1714565100)}


def test_unsampled_messages_count_as_seen_only_and_redeliveries_once():
    counter = window_counter()
    for offset, status in [(0, "safe"), (1, "not_sampled"), (2, "unsafe"), (3, "not_sampled"),
                           (1, "not_sampled"), (2, "unsafe"), (4, "error"), (3, "not_sampled")]:
        counter.apply(judgment_event(offset, status), 1000.0)
    cell = counter.windowed.cells["toxicity|model=m"]
    assert (cell["seen"], cell["total"], cell["unsafe"], cell["errors"]) == (5, 3, 1, 1)
    assert counter.telemetry.duplicate_judgments._value.get() == 3


def test_min_judgments_and_the_rate_read_judged_counts_never_seen():
    rules = [{"metric": "toxicity", "max_unsafe_rate": 0.2, "min_judgments": 10,
              "baseline_windows": 0}]
    counter = window_counter(alert_rules=rules)
    # 100 seen, 9 judged, all unsafe: below min_judgments, so no alert.
    for offset in range(100):
        counter.apply(judgment_event(offset, "unsafe" if offset % 11 == 0 and offset < 99
                                else "not_sampled"), 1000.0)
    cell = counter.windowed.cells["toxicity|model=m"]
    assert (cell["seen"], cell["total"]) == (100, 9) and counter.dispatcher.alerts == []
    counter.apply(judgment_event(100, "unsafe"), 1000.0)  # the 10th judged one
    [alert] = counter.dispatcher.alerts
    assert alert["kind"] == "regression" and alert["rate"] == 1.0
    assert (alert["counts"]["judged"], alert["counts"]["seen"]) == (10, 101)


class CountingWindowed(FakeWindowed):
    """Counts the cell writes (each is a changelog record in the worker)."""

    def __init__(self):
        super().__init__()
        self.writes = 0

    def __setitem__(self, key, value):
        self.writes += 1
        super().__setitem__(key, value)


def _record(events):
    return SimpleNamespace(value=encode_bundle(events), offset=0, timestamp=1000.0)


def test_a_bundle_is_one_write_per_cell_and_a_redelivery_cut_elsewhere_counts_once():
    counter = window_counter()
    counter.windowed = CountingWindowed()
    unknown = UnknownRecords(counter.telemetry, "judgments")
    v1, v2 = {"model": "m", "model_version": "v1"}, {"model": "m", "model_version": "v2"}
    events = [judgment_event(i, "unsafe" if i % 3 == 0 else "safe", group=v1 if i % 2 else v2)
              for i in range(10)]
    count_record(counter, unknown, _record(events[:6]))
    assert counter.windowed.writes == 2  # two versions: two cells, one write each
    # After a crash the batch is redelivered cut at other offsets (4..9, then 0..9).
    count_record(counter, unknown, _record(events[4:]))
    count_record(counter, unknown, _record(events))
    cells = counter.windowed.cells
    assert [cells[f"toxicity|model=m,model_version={v}"]["total"] for v in ("v1", "v2")] == [5, 5]
    assert sum(c["unsafe"] for c in cells.values()) == 4  # offsets 0, 3, 6, 9
    assert counter.telemetry.duplicate_judgments._value.get() == 2 + 10


def test_an_unreadable_item_is_skipped_and_its_bundle_still_counts():
    counter = window_counter()
    unknown = UnknownRecords(counter.telemetry, "judgments")
    good = [judgment_event(1).as_dict(), {**judgment_event(2).as_dict(), "status": "maybe"},
            {**judgment_event(3).as_dict(), "schema_version": 5}, judgment_event(4).as_dict()]
    value = orjson.dumps({"kind": "judgments", "schema_version": 1, "events": good})
    count_record(counter, unknown, SimpleNamespace(value=value, offset=0, timestamp=1000.0))
    assert counter.windowed.cells["toxicity|model=m"]["total"] == 2
    assert counter.telemetry.unknown_records.labels(
        topic="judgments", kind="judgment", schema_version="5")._value.get() == 1


def test_a_session_cell_is_its_own_and_its_alert_says_unit_session():
    """Session judgments (group label unit=session) count in cells of their own,
    never in their turns'; an alert on one names its unit, as a turn's does."""
    rules = [{"metric": "toxicity", "max_unsafe_rate": 0.2, "min_judgments": 5,
              "baseline_windows": 0, "cooldown_seconds": 900}]
    counter = window_counter(alert_rules=rules)
    session = {"model": "m", "unit": "session"}
    for offset in range(6):
        counter.apply(judgment_event(offset, "unsafe", group=session), 1000.0)
        counter.apply(judgment_event(offset, "unsafe" if offset == 0 else "safe", partition=1),
                      1000.0)
    cells = counter.windowed.cells
    assert (cells["toxicity|model=m,unit=session"]["total"], cells["toxicity|model=m"]["total"]
            ) == (6, 6)
    (alert,) = counter.dispatcher.alerts  # the turns' 1 of 6 stays under 20 %
    assert (alert["group"], alert["unit"]) == (session, "session")
    assert alert["counts"]["unsafe"] == 5 and alert["rate"] == 1.0
    turns = window_counter(alert_rules=rules)
    for offset in range(6):
        turns.apply(judgment_event(offset, "unsafe"), 1000.0)
    assert turns.dispatcher.alerts[0]["unit"] == "turn"


def _floored(offset, floor):
    return JudgmentEvent(metric="toxicity", group={"model": "m"}, status="safe",
                         case_id=f"c{offset}", event_time_ms=1_000_000,
                         source=Source("in", 0, offset), floor=floor)


def test_a_record_judged_late_after_the_ones_behind_it_still_counts():
    # The CI failure this replaces: input 142 was dropped on its way to the
    # judging agent and read again after 143..149 were judged and counted; a
    # highest-position mark took its judgment for a redelivery.
    counter = window_counter()
    for offset in range(143, 150):
        counter.apply(_floored(offset, 142), 1000.0)
    counter.apply(_floored(142, 142), 1000.0)
    for offset in range(142, 150):  # a crash before the commit: all judged again
        counter.apply(_floored(offset, 142), 1000.0)
    cell = counter.windowed.cells["toxicity|model=m"]
    assert cell["total"] == 8 and counter.telemetry.duplicate_judgments._value.get() == 8
    # Older releases reading the same changelog still find their mark.
    assert cell["marks"] == {"live|in|0": 149}


def test_a_cell_an_older_release_wrote_keeps_its_counts_exact():
    counter = window_counter()
    counter.windowed.cells["toxicity|model=m"] = {"total": 3, "unsafe": 0, "errors": 0,
                                                  "examples": [], "marks": {"live|in|0": 2}}
    for offset in (1, 2, 3, 3):
        counter.apply(judgment_event(offset), 1000.0)
    assert counter.windowed.cells["toxicity|model=m"]["total"] == 4


def test_only_a_judgments_record_read_in_order_raises_the_floor():
    # Judgments record B (input 150, floor 150) is counted before record A
    # (input 140, floor 140), which the counter's consumer read again late: A
    # must still count, so B, read out of order, left the floor where it was.
    counter = window_counter()
    unknown = UnknownRecords(counter.telemetry, "judgments")
    count_record(counter, unknown, _record([_floored(150, 150)]), in_order=False)
    count_record(counter, unknown, _record([_floored(140, 140)]), in_order=True)
    count_record(counter, unknown, _record([_floored(150, 150)]), in_order=True)
    assert counter.windowed.cells["toxicity|model=m"]["total"] == 2


class _Consumer:
    """``done_below`` as ProcessedOnlyConsumer answers it: ``done`` offsets processed."""

    def __init__(self, base, done):
        self.base, self.done = base, set(done)

    def done_below(self, tp, start=None):
        offset = self.base if start is None else max(self.base, start)
        while offset in self.done:
            offset += 1
        return offset


def _message(offset, partition=0):
    return SimpleNamespace(tp=("judgments", partition), offset=offset)


def test_read_order_follows_the_consumers_chain_across_passed_over_records():
    # 10 was read again late; 11..19 were counted and are passed over after it.
    order = ReadOrder(_Consumer(10, range(11, 20)))
    assert [order.in_order(_message(o)) for o in (10, 20, 22)] == [True, True, False]
    # Another partition, and a record read before the ones it waits on.
    assert not ReadOrder(_Consumer(5, [])).in_order(_message(7, partition=1))
    assert ReadOrder(object()).in_order(_message(7))  # cannot tell: as before
