"""The assembler: items of a whole in, one judged case per whole out — the one
mechanism behind agent runs (spans by trace id) and sessions (turns by
conversation id); what differs is a :class:`~guardrail.assembly.base.Gathering`.

The judging agent sends each item to an internal topic keyed by the whole's
key, so one worker owns each whole whatever partition its items came in on.
A Faust agent per kind reads that topic (concurrency 1: it writes a table) and
keeps each whole in a changelogged table (``h/<key>`` its header,
``<prefix>/<key>/<item>`` each item), so wholes survive restarts and
rebalances. The topic carries three kinds of records (a header named by the
gathering; the table's keys and values are text, in Faust's JSON codec, which
its changelog recovery reads):

- an item (``span``, ``turn``): added once (keyed by item id: a redelivery
  changes nothing);
- ``tick``: sent by this worker's sweep (every second) for a whole that looks
  due; if it is, the whole becomes ``closing`` and is judged as one case,
  named by the tick's coordinates;
- ``done``: sent after the whole's result was published; the gathering
  decides what follows (a run closes and drops its spans, a session opens
  again or closes and keeps its turns).

Delivery: a batch's table writes are confirmed on the broker, its results
published, then its ``done`` records, and only then is it acked (by hand:
a record Faust's stream skips as a rebalance stops the flow is never
committed, see :mod:`.consumer`). A crash
before the ack redelivers the tick; the whole is still ``closing`` under the
same tick, is judged again under the same name, and the window counter skips
the repeat (it holds the tick's position, or its floor passed it): a whole is
never lost nor counted twice, its result at worst
published twice, as every result can be.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from ..assembly.base import Gathering
from ..stream.envelope import Source
from .._event_time import now_ms
from ..stream.item_bundles import BUNDLE_KIND, read_bundle
from ..stream.processing import MessageJudge, Outgoing, RawMessage
from .acker import OrderedAcker
from .judging import (MAX_INFLIGHT_BATCHES, RAW_TOPIC, floors_of, item_bundler, output_topics,
                      publish_records, stop_acker)
from .windows import ConfirmedTable, from_earlier_generation

if TYPE_CHECKING:
    from .runtime import WorkerRuntime

__all__ = ["Assembler", "register_assembly", "publish_judged", "SWEEP_SECONDS"]

log = logging.getLogger("guardrail.assembly")

#: How often the sweep looks for due wholes, and how long before it ticks one again.
SWEEP_SECONDS = 1.0
TICK_AGAIN_MS = 5000
BATCH = 500


class Assembler:
    """Applies internal-topic records to the table, inside the agent's stream
    iteration (Faust takes a write's changelog partition from the current event)."""

    def __init__(self, gathering: Gathering[Any], table: Any, topic: str) -> None:
        self.gathering, self.table, self.topic = gathering, table, topic
        self.book = gathering.book
        #: When the sweep last ticked each whole.
        self._ticked: dict[str, int] = {}
        #: Headers changed by items in this batch, with an event of their key
        #: (its partition is the header's changelog partition): written once at
        #: the batch's end (:meth:`write_headers`), not once per item.
        self._changed: dict[str, Any] = {}

    def apply(self, event: Any) -> RawMessage | None:
        """One record; returns the case to judge when it was a tick that closed a whole."""
        message = event.message
        key = (message.key or b"").decode("ascii", "replace")
        kind = self._kind(message.headers)
        if kind == self.gathering.item_kind:
            self._item(key, message.value or b"", event)
        elif kind == BUNDLE_KIND:
            self._bundle(event)
        elif kind == b"tick":
            return self._tick(key, message)
        elif kind == b"done":
            self._done(key)
        else:
            log.warning("skipping a %s record of unknown kind %r at %s/%s", self.topic,
                        kind, message.partition, message.offset)
        return None

    def _kind(self, headers: Any) -> bytes | None:
        pairs = headers.items() if isinstance(headers, Mapping) else (headers or ())
        return next((value for name, value in pairs if name == self.gathering.kind_header),
                    None)

    def _write(self, key: str, header: Any) -> None:
        self._changed.pop(key, None)
        self.table["h/" + key] = header.to_bytes().decode()

    def write_headers(self, stream: Any) -> None:
        """Write the headers the batch's items changed, each once, after its
        items (a crash in between keeps items without their header's update,
        which :meth:`rebuild` and a redelivery make good)."""
        for key, event in list(self._changed.items()):
            header = self.book.headers.get(key)
            if header is not None:
                stream._set_current_event(event)
                self._write(key, header)
        self._changed.clear()

    def _item_key(self, key: str, item_id: str) -> str:
        return f"{self.gathering.item_prefix}/{key}/{item_id}"

    def _bundle(self, event: Any) -> None:
        """A batch's items of this partition, each applied as if it came alone."""
        message = event.message
        try:
            items = read_bundle(message.value or b"")
        except ValueError as exc:  # a newer release's bundle, or a broken one
            log.error("skipping a %s bundle at %s/%s that this release cannot read: %s",
                      self.topic, message.partition, message.offset, exc)
            return
        for key, value in items:
            self._item(key, value, event)

    def _item(self, key: str, value: bytes, event: Any) -> None:
        g = self.gathering
        try:
            item = g.read_item(value)
        except ValueError as exc:
            log.error("skipping an unreadable %s item of %s: %s", g.noun, key, exc)
            return
        now = now_ms()
        header = self.book.headers.get(key)
        if header is None:
            header = self.book.headers[key] = g.new_header(key, now_ms=now)
        # The header is written (once, at the batch's end) only when what a
        # recovery cannot recount from the items changed: a run's root, a span
        # dropped; a first item without a header gets a fresh one on recovery.
        before = g.durable(header)
        outcome = g.add(header, item, now_ms=now, size=len(value))
        g.count_item(outcome)
        if outcome == "added":
            self.table[self._item_key(key, g.item_id(item))] = value.decode()
        for evicted in self.book.evicted:  # past a cap: the oldest out
            self.table.pop(self._item_key(key, evicted), None)
        self.book.evicted.clear()
        if outcome == "late":
            g.say_late(key, header)
        elif g.durable(header) != before:
            self._changed[key] = event

    def _tick(self, key: str, message: Any) -> RawMessage | None:
        header = self.book.headers.get(key)
        if header is None:
            return None
        now, at = now_ms(), [message.partition, message.offset]
        if header.state == "open":
            status = self.gathering.due(header, now_ms=now)
            if status is None and message.value == b"force":
                status = self.gathering.forced_status(header)
            if status is None:
                return None
            header.state, header.tick, header.status = "closing", at, status
            self.gathering.start(header)
            self._write(key, header)
            self.gathering.count_whole(status)
            return self._case_message(key, header, message)
        if header.state == "closing" and header.tick == at:
            return self._case_message(key, header, message)  # redelivered: same name
        if header.state == "closed" and now - (header.closed_ms or 0) >= \
                self.gathering.forget_after_ms:
            for item_id in self.book.forget_items(key):
                self.table.pop(self._item_key(key, item_id), None)
            del self.table["h/" + key]
            self.book.headers.pop(key, None)
        return None

    def _done(self, key: str) -> None:
        header = self.book.headers.get(key)
        if header is None or header.state != "closing":
            return
        # The tick the sweep held the whole back for has been judged: a session due
        # again (n more turns, a flagged one) is ticked at the next sweep, not when
        # TICK_AGAIN_MS after the last tick ran out.
        self._ticked.pop(key, None)
        for item_id in self.gathering.finish(key, header, now_ms=now_ms()):
            self.table.pop(self._item_key(key, item_id), None)
        self._write(key, header)

    def _case_message(self, key: str, header: Any, message: Any) -> RawMessage:
        g = self.gathering
        items = [g.read_item(text.encode()) for item_id in self.book.item_ids.get(key, {})
                 if (text := self.table.get(self._item_key(key, item_id))) is not None]
        case = g.case(key, header, items)
        timestamp = int(message.timestamp * 1000) if message.timestamp else None
        source = Source(message.topic, message.partition, message.offset,
                        timestamp_ms=timestamp, key=key.encode())
        return RawMessage(value=orjson.dumps(case), source=source)

    def rebuild(self) -> None:
        """The in-memory view again from the table (after a recovery: the table
        now holds exactly this worker's partitions)."""
        g, headers, items = self.gathering, {}, {}  # type: ignore[var-annotated]
        for table_key, value in list(self.table.items()):
            kind, _, rest = str(table_key).partition("/")
            if kind == "h":
                try:
                    headers[rest] = g.header_from_bytes(str(value).encode())
                except ValueError as exc:
                    log.error("skipping an unreadable %s header %r: %s", g.noun, table_key, exc)
            elif kind == g.item_prefix:
                key, _, item_id = rest.partition("/")
                items.setdefault(key, {})[item_id] = len(value)
        now = now_ms()
        self.book.rebuild(headers, items, fresh=lambda k: g.new_header(k, now_ms=now),
                          recount=lambda header, ids: g.recount(header, ids, now_ms=now))
        log.info("%ss after recovery: %d open, %d items held", g.noun,
                 self.book.open_count, self.book.items_held)

    def due_ticks(self, now_ms: int) -> list[tuple[str, bytes]]:
        """``(key, tick value)`` for every whole the sweep should tick now."""
        g = self.gathering
        ticks = [(key, b"") for key, h in self.book.headers.items()
                 if g.due(h, now_ms=now_ms) is not None
                 or (h.state == "closed" and now_ms - (h.closed_ms or 0) >= g.forget_after_ms)]
        over = self.book.bytes_held - g.memory_bytes
        for key, header in self.book.quietest_open() if over > 0 else ():
            if over <= 0:  # judge the quietest early until memory is back under the cap
                break
            over -= header.bytes
            ticks.append((key, b"force"))
        return ticks

    def ticks_to_send(self, now_ms: int) -> list[tuple[str, bytes]]:
        """:meth:`due_ticks` less the wholes ticked within ``TICK_AGAIN_MS`` (a tick
        is on its way; one that found the whole not due yet is sent again later)."""
        ticks = [(key, value) for key, value in self.due_ticks(now_ms)
                 if now_ms - self._ticked.get(key, -TICK_AGAIN_MS) >= TICK_AGAIN_MS]
        self._ticked = {k: at for k, at in self._ticked.items() if now_ms - at < TICK_AGAIN_MS}
        self._ticked.update((key, now_ms) for key, _ in ticks)
        return ticks

    def update_gauges(self) -> None:
        self.gathering.update_gauges()


Judge = Callable[[list[RawMessage]], Awaitable[list[Outgoing]]]


def register_assembly(runtime: WorkerRuntime, gathering: Gathering[Any], *, topic_name: str,
                      table_name: str, agent_name: str, judge: MessageJudge,
                      extra_topics: Iterable[str] = ()) -> Assembler:
    """Add a kind's table, its assembling agent and its sweep to the app
    (``extra_topics``: more that the judge publishes to)."""
    app, s = runtime.app, runtime.settings
    source = app.topic(topic_name, partitions=s.kafka.topic_partitions, **RAW_TOPIC)
    table = app.tables.add(ConfirmedTable(
        app, name=table_name, default=None, beacon=app.tables.beacon,
        partitions=s.kafka.topic_partitions, extra_topic_configs={"cleanup.policy": "compact"}))
    assembler = Assembler(gathering, table, topic_name)
    table.on_recover(_async(assembler.rebuild))
    topics = {**output_topics(runtime, judge), topic_name: source,
              **{name: app.topic(name, **RAW_TOPIC) for name in extra_topics}}
    confirm = runtime.state.get("confirm_before_ack")
    done_headers = ((gathering.kind_header, b"done"),)
    floor_of = floors_of(app)

    async def judge_wholes(messages: list[RawMessage]) -> list[Outgoing]:
        if not messages:
            return []
        records = await judge.process(messages, floor_of=floor_of)
        return records + [Outgoing(topic_name, m.source.key, b"", headers=done_headers)
                          for m in messages]

    bundled = item_bundler(runtime, judge)  # a run is a turn of its session too

    async def publish(records: list[Outgoing]) -> None:
        await publish_judged(records, topics=topics, table=table, internal_topic=topic_name,
                             bundled=bundled)
        if confirm is not None:
            await confirm()  # type: ignore[operator]

    # Acked by hand once applied and published: the records Faust's stream skips
    # as a rebalance stops the flow are never committed (a skipped turn was a
    # session judged without it, for good).
    mark_processed = app.mark_processed_on(topic_name)

    @app.agent(source, name=agent_name, concurrency=1)
    async def assemble(stream: Any) -> None:
        acker = OrderedAcker(stream, MAX_INFLIGHT_BATCHES, publish,
                             on_config_error=runtime.stop_on_config_error,
                             mark_processed=mark_processed)
        try:
            async for events in stream.noack_take(BATCH, within=0.05):
                due = []
                for event in events:
                    if from_earlier_generation(app, event):
                        continue  # acked unprocessed; the partition's owner refetches it
                    stream._set_current_event(event)
                    message = assembler.apply(event)
                    if message is not None:
                        due.append(message)
                assembler.write_headers(stream)
                stream._set_current_event(None)
                await acker.submit(list(events), asyncio.ensure_future(judge_wholes(due)))
        finally:
            await stop_acker(acker, runtime)
            log.info("%s assembler stopped", gathering.noun)

    tick_headers = [(gathering.kind_header, b"tick")]

    @app.timer(SWEEP_SECONDS)
    async def sweep() -> None:
        for key, value in assembler.ticks_to_send(now_ms()):
            await source.send(key=key.encode(), value=value, headers=list(tick_headers))
        assembler.update_gauges()

    return assembler


async def publish_judged(records: list[Outgoing], *, topics: dict[str, Any], table: Any,
                         internal_topic: str,
                         bundled: Callable[[list[Outgoing]], list[Outgoing]]) -> None:
    """Publish a batch of the assembling agent in the order a crash needs:

    1. the table's writes, on the broker: a whole whose judgment is out is then
       recovered ``closing`` under its tick, and the redelivered tick judges it
       again under the same name, which the windows skip (were the write lost,
       the recovered whole would be open, its quiet time started again, and a
       later tick would judge it under a new name: counted twice);
    2. results and judgment events;
    3. done records: a done must never stand for an unpublished whole."""
    await table.confirm_changelog()
    await publish_records(topics, bundled([r for r in records if r.topic != internal_topic]))
    await publish_records(topics, [r for r in records if r.topic == internal_topic])


def _async(function: Any) -> Any:
    async def call() -> None:
        function()
    return call
