"""The gate's read sequence (:mod:`guardrail.agents.gate_sequence`): a partition's
records enter in the order they were read, none passed over, against a consumer
that says what was processed and is asked to read a missing record again."""

from __future__ import annotations

from guardrail.agents.gate_sequence import ReadSequence


class _Consumer:
    """``done_below`` as the worker's consumer answers it: the first offset from
    ``start`` (None: the commit) not processed, with ``done`` offsets processed."""

    def __init__(self, commit: int, done: set[int] = frozenset()) -> None:
        self.commit, self.done, self.asked = commit, set(done), []

    def done_below(self, tp, start=None):
        offset = max(self.commit, start if start is not None else self.commit)
        while offset in self.done:
            offset += 1
        return offset

    def read_again_if_lost(self, tp, offset):
        self.asked.append((tp.partition, offset))


def _sequence(consumer):
    app = type("App", (), {"consumer": consumer})()
    return ReadSequence(app, "input")


def _enter(sequence, partition, *offsets):
    entered = []
    for offset in offsets:
        if sequence.admissible(partition, offset):
            sequence.admitted(partition, offset)
            entered.append(offset)
    return entered


def test_records_read_in_order_from_the_commit_all_enter():
    sequence = _sequence(_Consumer(commit=130))
    assert _enter(sequence, 0, 130, 131, 132) == [130, 131, 132]


def test_a_first_record_lost_on_its_way_holds_back_the_ones_after_it_until_it_comes():
    # Delivered right after an assignment and lost before the agent (seen on both
    # brokers): 131 must not enter before 130, or it could be forwarded first.
    consumer = _Consumer(commit=130)
    sequence = _sequence(consumer)
    assert _enter(sequence, 0, 131, 132) == []
    assert consumer.asked == [(0, 130), (0, 130)]  # read again from 130 (once sought back)
    assert _enter(sequence, 0, 130, 131, 132) == [130, 131, 132]


def test_a_record_lost_in_the_middle_holds_back_the_ones_after_it():
    consumer = _Consumer(commit=32)
    sequence = _sequence(consumer)
    assert _enter(sequence, 2, 32, 33, 34, 35, 36, 37, 38, 39, 40, 42, 43) == list(range(32, 41))
    assert consumer.asked == [(2, 41), (2, 41)]
    assert _enter(sequence, 2, 41, 42, 43) == [41, 42, 43]


def test_offsets_processed_already_or_absent_are_passed_without_waiting():
    # 260..270 were processed in the revoke phase (the consumer reads again past
    # them); 275..276 do not exist (compaction, transaction markers).
    consumer = _Consumer(commit=260, done=set(range(260, 271)) | {275, 276})
    sequence = _sequence(consumer)
    assert _enter(sequence, 1, 271, 272, 273, 274, 277) == [271, 272, 273, 274, 277]
    assert consumer.asked == []


def test_a_record_below_the_commit_read_before_a_rebalance_does_not_enter():
    consumer = _Consumer(commit=50)
    sequence = _sequence(consumer)
    assert _enter(sequence, 2, 40, 50, 51) == [50, 51] and consumer.asked == []


def test_a_record_read_again_after_it_entered_enters_again_and_a_restart_starts_over():
    consumer = _Consumer(commit=10)
    sequence = _sequence(consumer)
    assert _enter(sequence, 0, 10, 11, 12, 11, 12, 13) == [10, 11, 12, 11, 12, 13]
    sequence.restart()  # a new assignment: read from the commit, now 14
    consumer.commit = 14
    assert _enter(sequence, 0, 12, 14) == [14]
