"""guardrail.stream.dedup: which input positions a window cell counted."""

import pytest

from guardrail.stream import dedup
from guardrail.stream.dedup import Ledger


def _fresh():
    return Ledger.from_cell(None, None)


def test_a_record_read_again_late_counts_and_a_redelivery_does_not():
    # 142 was dropped on its way to the judging agent and read again after
    # 143..150 were judged: every event of that time carried floor 142.
    ledger = _fresh()
    assert all(ledger.admit((o, 0), floor=142, in_order=True) for o in range(143, 151))
    assert ledger.admit((142, 0), floor=142, in_order=True)
    # A crash before the commit: 142..150 judged again (floor 142): all counted already.
    assert not any(ledger.admit((o, 0), floor=142, in_order=True) for o in range(142, 151))
    # The floor passes them once a later record shows them done; the set shrinks.
    assert ledger.admit((151, 0), floor=151, in_order=True)
    assert (ledger.floor, ledger.positions) == (151, {(151, 0)})
    assert not ledger.admit((150, 0), floor=140, in_order=True)


def test_a_judgments_record_read_out_of_order_leaves_the_floor():
    # The counter read the record holding 170 (floor 160) before the one holding
    # 150 (floor 140), which its consumer read again late: 150 must still count.
    ledger = _fresh()
    assert ledger.admit((170, 0), floor=160, in_order=False)
    assert ledger.floor == -1
    assert ledger.admit((150, 0), floor=140, in_order=True)
    assert ledger.floor == 140 and not ledger.admit((170, 0), floor=160, in_order=True)


def test_an_event_without_a_floor_keeps_the_old_highest_mark_rule():
    ledger = _fresh()
    assert [ledger.admit((o, 0), floor=None, in_order=True) for o in (0, 1, 2, 1, 0, 3)] == \
        [True, True, True, False, False, True]


def test_cases_of_one_record_are_positions_of_their_own():
    ledger = _fresh()
    assert [ledger.admit((9, i), floor=9, in_order=True) for i in (0, 2, 1, 2)] == \
        [True, True, True, False]


def test_a_floor_is_never_taken_above_the_events_own_offset():
    ledger = _fresh()
    assert ledger.admit((5, 0), floor=1_000, in_order=True)
    assert ledger.floor == 5 and ledger.admit((6, 0), floor=None, in_order=True)


@pytest.mark.parametrize("mark, counted, fresh", [
    (7, [(3, 0), (7, 0)], [(7, 1), (8, 0)]),
    ([7, 2], [(7, 0), (7, 2)], [(7, 3), (8, 0)]),
])
def test_an_older_releases_mark_converts_exactly(mark, counted, fresh):
    for position in counted:
        assert not Ledger.from_cell(None, mark).admit(position, floor=None, in_order=True)
    for position in fresh:
        assert Ledger.from_cell(None, mark).admit(position, floor=None, in_order=True)


def test_the_stored_form_reads_back_and_changes_are_told():
    ledger = _fresh()
    ledger.admit((4, 0), floor=2, in_order=True)
    ledger.admit((4, 1), floor=2, in_order=True)
    stored = ledger.stored()
    assert stored == [2, [4], [[4, 1]]]
    again = Ledger.from_cell(stored, 99)  # the ledger wins over the mark
    assert (again.floor, again.positions, again.changed) == (2, {(4, 0), (4, 1)}, False)
    again.admit((4, 1), floor=2, in_order=True)
    assert not again.changed
    again.admit((5, 0), floor=4, in_order=True)
    assert again.changed


def test_a_floor_that_never_rises_cannot_grow_the_cell_without_bound(monkeypatch):
    monkeypatch.setattr(dedup, "MAX_POSITIONS", 10)
    ledger = _fresh()
    for offset in range(25):
        assert ledger.admit((offset, 0), floor=0, in_order=False)
    assert len(ledger.positions) <= 10 and ledger.floor > 0
    assert not ledger.admit((0, 0), floor=0, in_order=False)


def test_an_event_claiming_nothing_leaves_the_floor():
    # Judged by a worker the partition moved away from: its floor is -1.
    ledger = Ledger.from_cell([10, [12]], None)
    assert ledger.admit((30, 0), floor=-1, in_order=True)
    assert ledger.floor == 10 and ledger.admit((11, 0), floor=None, in_order=False)
