"""The judging agent's floor of what a partition's consumer processed."""

from types import SimpleNamespace

from guardrail.agents.judging import floors_of


def test_floors_come_from_the_consumer_and_a_partition_moved_away_claims_nothing():
    done = {0: 42}
    consumer = SimpleNamespace(done_below=lambda tp: done.get(tp.partition))
    floor_of = floors_of(SimpleNamespace(consumer=consumer))
    assert (floor_of("in", 0), floor_of("in", 1)) == (42, -1)
    assert floors_of(SimpleNamespace(consumer=object()))("in", 0) is None  # cannot tell
