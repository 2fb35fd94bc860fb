"""The gate's admission (``GateForwarder.admit``) without a worker: a record read
before the last rebalance is not let in once it got room, so it cannot enter the
order ahead of the records of its partition read again before it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from guardrail.agents.gate import GateForwarder
from guardrail.gate.order import ReleaseOrder
from guardrail.stream.envelope import Source
from guardrail.stream.processing import RawMessage


class _Gauge:
    def set(self, value):
        self.value = value


def _gate(max_waiting: int) -> GateForwarder:
    gate = GateForwarder.__new__(GateForwarder)  # only what admission reads
    gate.gate = SimpleNamespace(gate_max_waiting=max_waiting)
    gate.order = ReleaseOrder("key", hold_blocks_key=False)
    gate.book = SimpleNamespace(entry=lambda partition, offset: None)
    gate.writer = SimpleNamespace(admitted=lambda partition, offset: None)
    gate.telemetry = SimpleNamespace(gate_waiting=_Gauge(), gate_parked=_Gauge())
    gate._room, gate._passages = asyncio.Condition(), {}
    return gate


def _raw(offset: int) -> RawMessage:
    return RawMessage(value=b"{}", source=Source("in", 0, offset, key=b"k8"))


async def test_a_record_that_went_stale_while_waiting_for_room_is_not_let_in():
    gate = _gate(max_waiting=1)
    first = await gate.admit(_raw(80), lambda: False)
    assert first is not None and gate.waiting == 1
    generation = {"now": 1}
    waiting = asyncio.ensure_future(gate.admit(_raw(95), lambda: generation["now"] != 1))
    await asyncio.sleep(0.05)
    assert not waiting.done()  # no room: one record in the gate already
    generation["now"] = 2  # a rebalance: partition 0 is read again from its commit
    gate.order.drop_partition(0)
    gate._passages.clear()
    await gate._notify_room()
    assert await asyncio.wait_for(waiting, 1) is None
    assert gate.waiting == 0 and (0, 95) not in gate._passages
    again = await gate.admit(_raw(80), lambda: False)  # read again, in order
    assert again is not None and again.ticket is not None and gate.waiting == 1


async def test_a_record_delivered_again_while_on_its_way_follows_the_first():
    gate = _gate(max_waiting=10)
    first = await gate.admit(_raw(80), lambda: False)
    second = await gate.admit(_raw(80), lambda: False)
    assert second.ticket is None and second.settled is first.settled
    assert gate.waiting == 1
