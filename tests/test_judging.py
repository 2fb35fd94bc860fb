"""OrderedAcker on a judge configuration error: nothing more is acked or published,
unfinished batches are cancelled, the runtime hears of it once."""

import asyncio

from guardrail.agents.judging import OrderedAcker
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
