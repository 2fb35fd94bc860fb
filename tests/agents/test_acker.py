"""OrderedAcker on a judge configuration error: nothing more is acked or published,
unfinished batches are cancelled, the runtime hears of it once."""

import asyncio

from guardrail.agents.acker import OrderedAcker
from guardrail.errors import JudgeConfigError

ERROR = JudgeConfigError("judge configuration error: ...; check judge_api_key",
                         setting="judge_api_key")


class _Stream:
    def __init__(self):
        self.acked = []

    async def ack(self, event):
        self.acked.append(event)


def _acker():
    stream, published, reported = _Stream(), [], []

    async def publish(records):
        published.append(records)

    return OrderedAcker(stream, 4, publish, on_config_error=reported.append), stream, \
        published, reported


async def _fail():
    raise ERROR


async def test_a_config_error_acks_and_publishes_nothing_and_cancels_unfinished_batches():
    acker, stream, published, reported = _acker()
    paused = asyncio.ensure_future(asyncio.Event().wait())  # an earlier batch held on an outage
    await acker.submit(["e1"], paused)
    failing = asyncio.ensure_future(_fail())
    await acker.submit(["e2"], failing)
    await asyncio.gather(failing, return_exceptions=True)
    await asyncio.sleep(0)  # let the done callbacks run
    assert reported == [ERROR] and acker.failed is ERROR
    assert paused.cancelled()
    later = asyncio.ensure_future(asyncio.sleep(0, result=["record"]))
    await acker.submit(["e3"], later)  # pulled before the worker stopped
    await asyncio.gather(later, return_exceptions=True)
    assert later.cancelled()
    await acker.drain(timeout=30)  # returns at once: nothing left worth waiting for
    assert stream.acked == [] and published == []


async def test_reported_once_whoever_sees_it_first():
    acker, stream, published, reported = _acker()
    for events in (["e1"], ["e2"]):
        await acker.submit(events, asyncio.ensure_future(_fail()))
    for _ in range(5):
        await asyncio.sleep(0)
    assert reported == [ERROR] and stream.acked == []


async def test_a_stop_waits_briefly_for_work_but_not_during_an_outage():
    acker, stream, published, reported = _acker()
    held = asyncio.ensure_future(asyncio.Event().wait())  # a batch paused on an outage
    await acker.submit(["e1", "e2"], held)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await acker.drain(timeout=30, hopeless=lambda: True)
    assert loop.time() - started < 0.5  # the judge is down: no wait at all
    await acker.drain(timeout=0.2)
    assert acker.pending == 1
    assert acker.cancel() == ["e1", "e2"] and acker.pending == 0  # left unacked
    await asyncio.sleep(0)
    assert held.cancelled() and stream.acked == [] and published == []


async def test_a_batch_being_published_finishes_publishing_and_acking_on_a_stop():
    stream, published = _Stream(), []
    release = asyncio.Event()

    async def slow_publish(records):
        await release.wait()
        published.append(records)

    acker = OrderedAcker(stream, 4, slow_publish)
    await acker.submit(["e1"], asyncio.ensure_future(asyncio.sleep(0, result=["r1"])))
    for _ in range(5):
        await asyncio.sleep(0)  # the batch is judged and its publish has started
    loop = asyncio.get_running_loop()
    loop.call_later(0.1, release.set)
    await acker.settle(timeout=2)
    assert published == [["r1"]] and stream.acked == ["e1"]
    assert acker.cancel() == []  # nothing left to redeliver: no result published twice


async def test_max_records_bounds_events_in_flight_not_batches():
    """Gate mode: many one-record batches may be in flight (the judge stays busy),
    but no more events than ``max_records``; a submit past it waits for an ack."""
    stream, published = _Stream(), []

    async def publish(records):
        published.append(records)

    acker = OrderedAcker(stream, 100, publish, max_records=3)
    answers = [asyncio.get_running_loop().create_future() for _ in range(4)]

    async def judged(n):
        return [await answers[n]]

    for n in range(2):  # two one-record batches: 2 of 3 in flight, no wait
        await asyncio.wait_for(acker.submit([f"e{n}"], asyncio.ensure_future(judged(n))), 1)
    third = asyncio.ensure_future(acker.submit(["e2", "e3"], asyncio.ensure_future(judged(2))))
    await asyncio.sleep(0.05)
    assert not third.done() and acker.pending == 3  # 4 events in flight: it waits
    answers[0].set_result("r0")
    await asyncio.sleep(0.05)
    assert stream.acked == ["e0"] and not third.done()  # 3 in flight: at the bound
    answers[1].set_result("r1")
    await asyncio.wait_for(third, 1)  # 2 in flight: room for more
    assert stream.acked == ["e0", "e1"]
    fourth = asyncio.ensure_future(acker.submit(["e4"], asyncio.ensure_future(judged(3))))
    await asyncio.sleep(0.05)
    assert not fourth.done()
    for n in (2, 3):
        answers[n].set_result(f"r{n}")
    await asyncio.wait_for(fourth, 1)
    await acker.drain(timeout=1)
    assert stream.acked == ["e0", "e1", "e2", "e3", "e4"]
    # r2 and r3 were both judged when the runner came to them: one publish.
    assert published == [["r0"], ["r1"], ["r2", "r3"]]


async def test_a_submit_waiting_for_room_returns_when_the_acker_is_cancelled():
    acker = OrderedAcker(_Stream(), 100, lambda records: asyncio.sleep(0), max_records=2)
    await asyncio.wait_for(
        acker.submit(["e0"], asyncio.ensure_future(asyncio.Event().wait())), 1)
    waiting = asyncio.ensure_future(
        acker.submit(["e1"], asyncio.ensure_future(asyncio.Event().wait())))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    assert acker.cancel() == ["e0", "e1"]  # a stop: neither acked, both redelivered
    await asyncio.wait_for(waiting, 1)
