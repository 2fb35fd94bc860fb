"""The assembling agent's publish order: what a crash between two of its steps
leaves must never be a whole judged under two names."""

from __future__ import annotations

import asyncio

from guardrail.agents.assembly import publish_judged
from guardrail.stream.processing import Outgoing

INTERNAL = "app-run-spans"


class _Topic:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    async def send(self, *, key, value, partition, headers, timestamp):
        self.log.append(f"send {self.name}")
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


class _Table:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def confirm_changelog(self) -> None:
        self.log.append("changelog confirmed")


def test_the_table_is_durable_before_results_and_results_before_done_records():
    log: list[str] = []
    topics = {name: _Topic(name, log) for name in ("results", "judgments", INTERNAL)}
    records = [Outgoing(INTERNAL, b"t1", b"", headers=(("guardrail-run", b"done"),)),
               Outgoing("results", b"t1", b"{}"), Outgoing("judgments", None, b"[]")]
    bundled: list[list[str]] = []  # the topics of each list handed to the bundler

    def bundle(batch):
        bundled.append([r.topic for r in batch])
        return batch

    asyncio.run(publish_judged(records, topics=topics, table=_Table(log),
                               internal_topic=INTERNAL, bundled=bundle))
    # A closing whole's header on the broker before its result: a crash after the
    # result recovers it closing under the same tick, judged again under one name.
    assert log == ["changelog confirmed", "send results", "send judgments",
                   f"send {INTERNAL}"]
    assert bundled == [["results", "judgments"]]  # done records are never bundled
