"""The order decided records leave the gate in, whatever order they are decided
in: by key (no inversion within a key, no wait across keys), by partition, or as
decided; keys blocked by a held record park their later records until a reviewer
answers."""

from __future__ import annotations

import random

from guardrail.gate import Decision, ReleaseOrder, Ticket

SAFE = Decision(True, "SAFE")
UNSAFE = Decision(False, "UNSAFE", "unsafe")
DLQ = Decision(False, "INVALID", "invalid", dlq_only=True)


def _run(order: ReleaseOrder, records: list[tuple[int, int, bytes | None]], seed: int,
         decision=lambda offset: SAFE):
    """Enter every record in offset order, decide them in a random order; the
    releases as they come."""
    for partition, offset, key in records:
        order.enter(Ticket(partition, offset, key))
    shuffled = records[:]
    random.Random(seed).shuffle(shuffled)
    out = []
    for partition, offset, _ in shuffled:
        out += order.decide(partition, offset, decision(offset))
    return out


def test_by_key_each_key_leaves_in_offset_order_and_every_record_leaves_once():
    rng = random.Random(1)
    records = [(p, o, f"k{rng.randrange(10)}".encode()) for p in range(2) for o in range(300)]
    order = ReleaseOrder("key")
    out = _run(order, records, seed=2)
    assert sorted((r.ticket.partition, r.ticket.offset) for r in out) == \
        sorted((p, o) for p, o, _ in records)
    assert {r.action for r in out} == {"forward"} and order.waiting == 0
    last: dict[tuple[int, bytes], int] = {}
    for release in out:
        t = release.ticket
        assert last.get((t.partition, t.key), -1) < t.offset  # no inversion within a key
        last[t.partition, t.key] = t.offset


def test_by_key_a_slow_record_holds_back_only_its_own_key():
    order = ReleaseOrder("key")
    for offset, key in enumerate([b"a", b"b", b"a", b"b"]):
        order.enter(Ticket(0, offset, key))
    assert [r.ticket.offset for r in order.decide(0, 1, SAFE)] == [1]   # b: nothing before
    assert order.decide(0, 2, SAFE) == []                                # a: waits for 0
    assert [r.ticket.offset for r in order.decide(0, 0, SAFE)] == [0, 2]
    assert order.waiting == 1


def test_records_without_a_key_wait_for_nothing():
    order = ReleaseOrder("key")
    order.enter(Ticket(0, 0, None))
    order.enter(Ticket(0, 1, None))
    assert [r.ticket.offset for r in order.decide(0, 1, SAFE)] == [1]


def test_by_partition_everything_waits_for_every_earlier_record_of_its_partition():
    records = [(p, o, f"k{o % 7}".encode()) for p in range(3) for o in range(100)]
    out = _run(ReleaseOrder("partition"), records, seed=5)
    for partition in range(3):
        offsets = [r.ticket.offset for r in out if r.ticket.partition == partition]
        assert offsets == list(range(100))


def test_none_releases_each_record_as_it_is_decided():
    order = ReleaseOrder("none")
    for offset in range(3):
        order.enter(Ticket(0, offset, b"same"))
    assert [r.ticket.offset for r in order.decide(0, 2, SAFE)] == [2]


def test_a_dlq_record_keeps_its_place_and_is_forwarded_nowhere():
    order = ReleaseOrder("key")
    order.enter(Ticket(0, 0, b"a"))
    order.enter(Ticket(0, 1, b"a"))
    assert order.decide(0, 1, SAFE) == []
    out = order.decide(0, 0, DLQ)
    assert [(r.action, r.ticket.offset) for r in out] == [("none", 0), ("forward", 1)]


def test_a_held_record_blocks_its_key_until_a_reviewer_answers():
    order = ReleaseOrder("key", hold_blocks_key=True)
    for offset, key in enumerate([b"a", b"a", b"b", b"a", b"a"]):
        order.enter(Ticket(0, offset, key))
    out = order.decide(0, 0, UNSAFE)
    assert [(r.action, r.ticket.offset) for r in out] == [("forward", 0)]  # to held
    assert order.blocked(0, b"a")
    assert [(r.action, r.ticket.offset) for r in order.decide(0, 1, SAFE)] == [("park", 1)]
    assert [(r.action, r.ticket.offset) for r in order.decide(0, 2, SAFE)] == [("forward", 2)]
    order.decide(0, 3, UNSAFE)
    order.decide(0, 4, SAFE)
    assert order.parked == 3 and order.waiting == 0
    released = order.unblock(0, b"a")  # 1 forwarded, 3 held again: it blocks, 4 stays
    assert [(r.action, r.ticket.offset) for r in released] == [("forward", 1), ("forward", 3)]
    assert order.blocked(0, b"a") and order.parked == 1
    assert [r.ticket.offset for r in order.unblock(0, b"a")] == [4]
    assert not order.blocked(0, b"a")


def test_without_blocking_a_held_record_holds_back_nothing():
    order = ReleaseOrder("key")
    order.enter(Ticket(0, 0, b"a"))
    order.enter(Ticket(0, 1, b"a"))
    out = order.decide(0, 0, UNSAFE) + order.decide(0, 1, SAFE)
    assert [(r.action, r.ticket.offset) for r in out] == [("forward", 0), ("forward", 1)]


def test_a_restart_restores_blocked_keys_and_parked_records_and_a_revoke_forgets_them():
    order = ReleaseOrder("key", hold_blocks_key=True)
    order.restore([(1, b"a")], [Ticket(1, 9, b"a", SAFE), Ticket(1, 5, b"a", SAFE)])
    assert order.blocked(1, b"a") and order.parked == 2
    order.enter(Ticket(1, 12, b"a"))
    assert [r.action for r in order.decide(1, 12, SAFE)] == ["park"]
    assert [r.ticket.offset for r in order.unblock(1, b"a")] == [5, 9, 12]
    order.enter(Ticket(0, 1, b"x"))
    order.restore([(0, b"y")], [])
    dropped = order.drop_partition(0)
    assert [t.offset for t in dropped] == [1] and not order.blocked(0, b"y")
    assert order.waiting == 0
