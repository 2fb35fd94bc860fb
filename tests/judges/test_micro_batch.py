"""The micro-batcher on its own, with a fake ``send_many``: when a batch leaves (full,
or after the linger), whose outcome each caller gets, what a cancelled caller and
a failed call do, and how many batches fly at once."""

from __future__ import annotations

import asyncio

import pytest

from guardrail.judges.micro_batch import MicroBatcher


class Sender:
    """A ``send_many`` that records its batches; an item ``"bad"`` gets its own error,
    ``fail`` makes the whole call raise, ``pause`` holds every call until set."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.fail: Exception | None = None
        self.pause: asyncio.Event | None = None
        self.flying = self.most_flying = 0

    async def __call__(self, items: list[str]) -> list[str | Exception]:
        self.batches.append(items)
        self.flying += 1
        self.most_flying = max(self.most_flying, self.flying)
        try:
            if self.pause is not None:
                await self.pause.wait()
            if self.fail is not None:
                raise self.fail
            return [ValueError(item) if item == "bad" else item.upper() for item in items]
        finally:
            self.flying -= 1


async def test_a_full_batch_leaves_at_once_and_the_rest_after_the_linger():
    sender = Sender()
    batcher = MicroBatcher(sender, size=3, linger=0.05, slots=4)
    full = asyncio.gather(*(batcher.submit(x) for x in "abc"))
    assert await asyncio.wait_for(full, 0.04) == ["A", "B", "C"]  # before the linger
    rest = asyncio.gather(*(batcher.submit(x) for x in "de"))
    await asyncio.sleep(0.02)
    assert sender.batches == [["a", "b", "c"]]  # still lingering
    assert await rest == ["D", "E"]
    assert sender.batches == [["a", "b", "c"], ["d", "e"]]


async def test_an_items_error_is_its_callers_and_a_failed_call_everyones():
    sender = Sender()
    batcher = MicroBatcher(sender, size=3, linger=0.0, slots=1)
    outcomes = await asyncio.gather(*(batcher.submit(x) for x in ("a", "bad", "c")),
                                    return_exceptions=True)
    assert outcomes[0] == "A" and outcomes[2] == "C"
    assert isinstance(outcomes[1], ValueError)
    sender.fail = ConnectionError("down")
    outcomes = await asyncio.gather(*(batcher.submit(x) for x in "xy"), return_exceptions=True)
    assert all(isinstance(o, ConnectionError) for o in outcomes) and len(sender.batches) == 2


async def test_a_caller_cancelled_while_queued_is_left_out():
    sender = Sender()
    batcher = MicroBatcher(sender, size=10, linger=0.02, slots=1)
    gone = asyncio.ensure_future(batcher.submit("gone"))
    kept = asyncio.ensure_future(batcher.submit("kept"))
    await asyncio.sleep(0)
    gone.cancel()
    assert await kept == "KEPT"
    assert sender.batches == [["kept"]] and gone.cancelled()


async def test_at_most_slots_batches_fly_and_items_wait_their_turn():
    sender = Sender()
    sender.pause = asyncio.Event()
    batcher = MicroBatcher(sender, size=2, linger=0.0, slots=2)
    calls = asyncio.gather(*(batcher.submit(str(i)) for i in range(8)))
    await asyncio.sleep(0.02)
    assert sender.flying == 2 and len(sender.batches) == 2
    sender.pause.set()
    assert await calls == [str(i) for i in range(8)]
    assert sender.most_flying == 2 and [len(b) for b in sender.batches] == [2, 2, 2, 2]


async def test_a_wrong_number_of_outcomes_fails_the_batch_never_a_guess():
    async def one_short(items: list[str]) -> list[str]:
        return items[1:]

    batcher = MicroBatcher(one_short, size=2, linger=0.0, slots=1)
    outcomes = await asyncio.gather(*(batcher.submit(x) for x in "ab"), return_exceptions=True)
    assert all(isinstance(o, RuntimeError) and "2 items got 1" in str(o) for o in outcomes)


async def test_closing_cancels_what_is_queued_and_in_flight():
    sender = Sender()
    sender.pause = asyncio.Event()
    batcher = MicroBatcher(sender, size=2, linger=10.0, slots=1)
    flying = [asyncio.ensure_future(batcher.submit(x)) for x in "ab"]
    queued = asyncio.ensure_future(batcher.submit("c"))
    await asyncio.sleep(0.01)
    await batcher.aclose()
    for task in flying + [queued]:
        with pytest.raises(asyncio.CancelledError):
            await task
    assert sender.batches == [["a", "b"]]


def test_each_event_loop_gets_its_own_queue():
    sender = Sender()
    batcher = MicroBatcher(sender, size=2, linger=0.0, slots=1)

    async def two() -> list[str]:
        return await asyncio.gather(batcher.submit("a"), batcher.submit("b"))

    assert asyncio.run(two()) == asyncio.run(two()) == ["A", "B"]


def test_nonsense_sizes_are_refused():
    with pytest.raises(ValueError, match="size >= 1"):
        MicroBatcher(Sender(), size=0, linger=0.0, slots=1)
