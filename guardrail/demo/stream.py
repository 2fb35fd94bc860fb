"""The Kafka side of ``guardrail demo``: publish the samples, follow results and alerts.

One consumer reads the results and alerts topics from the beginning and hands
each record to ``show`` as it arrives; the main flow publishes v1, waits for
its results, then publishes v2 (the "release") and waits for the alert::

    stream = DemoStream(settings, echo=print, show=print_record, children=[worker])
    complete = stream.run(records, "v1", "v2")
    stream.write_records(Path("out"))

How records look on the terminal is the demo's business (:mod:`guardrail.demo.display`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import orjson
from aiokafka import AIOKafkaConsumer

from ..config.settings import Settings
from ..kafka.clients import client_options
from ..kafka.io import produce_records
from ..kafka.topics import ensure_topics

__all__ = ["DemoStream", "Watched"]

HEARTBEAT_SECONDS = 15.0

#: ``show(kind, record)`` with kind ``"result"`` or ``"alert"``.
Show = Callable[[str, dict[str, Any]], None]


class Watched(Protocol):
    """A process the demo depends on: ``check`` raises once it has died."""

    def check(self) -> None: ...


class DemoStream:
    """Publish, follow and collect; ``run`` returns True when every result arrived."""

    def __init__(self, settings: Settings, *, echo: Callable[[str], None], show: Show,
                 children: Sequence[Watched] = (), idle_timeout: float = 300.0,
                 alert_timeout: float = 30.0) -> None:
        self.settings = settings
        self.echo = echo
        self.show = show
        self.children = children
        self.idle_timeout = idle_timeout
        self.alert_timeout = alert_timeout
        self.results: list[dict[str, Any]] = []
        self.alerts: list[dict[str, Any]] = []
        self.expected = 0
        self.judging_seconds: float | None = None

    def run(self, records: list[dict[str, Any]], baseline: str, candidate: str) -> bool:
        return asyncio.run(self._run(records, baseline, candidate))

    async def _run(self, records: list[dict[str, Any]], baseline: str, candidate: str) -> bool:
        s = self.settings
        await ensure_topics(s.kafka)
        consumer = AIOKafkaConsumer(s.kafka.results_topic, s.kafka.alerts_topic, group_id=None,
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    **client_options(s.kafka))
        await consumer.start()
        reader = asyncio.ensure_future(self._follow(consumer))
        try:
            return await self._publish_versions(records, baseline, candidate)
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            await consumer.stop()

    async def _publish_versions(self, records: list[dict[str, Any]], baseline: str,
                                candidate: str) -> bool:
        started = time.monotonic()
        for version, story in ((baseline, "the current release, judged as it serves"),
                               (candidate, "the new release goes live")):
            batch = [r for r in records if r["metadata"]["model_version"] == version]
            self.expected += len(batch)
            self.echo(f"--- {version}: {story}: publishing {len(batch)} answers")
            await produce_records(self.settings.kafka, self.settings.kafka.input_topic, batch)
            if not await self._wait(lambda: len(self.results) >= self.expected):
                self.echo(f"gave up: no new result for {self.idle_timeout:.0f}s "
                          f"({len(self.results)}/{self.expected} arrived)")
                return False
        self.judging_seconds = time.monotonic() - started
        self.echo("--- every answer judged; waiting for the windowed alert check")
        await self._wait(lambda: bool(self.alerts), idle_limit=self.alert_timeout,
                         heartbeat=False)
        if not self.alerts:
            self.echo(f"no alert within {self.alert_timeout:.0f}s: the judge did not find "
                      f"{candidate} significantly less safe than {baseline}")
        await asyncio.sleep(1.0)  # a duplicate alert would show up now
        return True

    async def _wait(self, done: Callable[[], bool], *, idle_limit: float | None = None,
                    heartbeat: bool = True) -> bool:
        """Wait for ``done``; False after ``idle_limit`` seconds without a new result."""
        idle_limit = self.idle_timeout if idle_limit is None else idle_limit
        seen, last_change, last_beat = len(self.results), time.monotonic(), time.monotonic()
        while not done():
            await asyncio.sleep(0.2)
            for child in self.children:
                child.check()  # a dead worker or judge is an error, not a long wait
            now = time.monotonic()
            if len(self.results) != seen:
                seen, last_change, last_beat = len(self.results), now, now
            elif now - last_change > idle_limit:
                return False
            elif heartbeat and now - last_beat >= HEARTBEAT_SECONDS:
                last_beat = now
                self.echo(f"… judging: {seen}/{self.expected} results so far "
                          f"(last one {now - last_change:.0f}s ago)")
        return True

    async def _follow(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            batch = await consumer.getmany(timeout_ms=300)
            for messages in batch.values():
                for message in messages:
                    self._receive(message.topic, orjson.loads(message.value))

    def _receive(self, topic: str, record: dict[str, Any]) -> None:
        if topic == self.settings.kafka.alerts_topic:
            self.alerts.append(record)
            self.show("alert", record)
        else:
            self.results.append(record)
            self.show("result", record)

    def summary(self) -> dict[str, Any]:
        """Counts per version and metric, the alerts, and the judging time."""
        table: dict[str, dict[str, dict[str, int]]] = {}
        for record in self.results:
            version = (record.get("metadata") or {}).get("model_version", "-")
            for m in record.get("metrics", []):
                row = table.setdefault(version, {}).setdefault(
                    m["name"], {"judged": 0, "unsafe": 0, "errors": 0})
                if m.get("error"):
                    row["errors"] += 1
                    continue
                row["judged"] += 1
                row["unsafe"] += (m.get("result") or [{}])[0].get("verdict") == "UNSAFE"
        judge = self.results[0].get("judge_model") if self.results else self.settings.judge.model
        return {"judge_model": judge, "expected": self.expected, "results": len(self.results),
                "by_version": table, "alerts": [
                    {"metric": a.get("metric"), "group": a.get("group"),
                     "reasons": a.get("reasons")} for a in self.alerts],
                "judging_seconds": None if self.judging_seconds is None
                else round(self.judging_seconds, 1)}

    def write_records(self, folder: Path) -> None:
        for name, records in (("results", self.results), ("alerts", self.alerts)):
            (folder / f"{name}.jsonl").write_bytes(
                b"".join(orjson.dumps(r) + b"\n" for r in records))
