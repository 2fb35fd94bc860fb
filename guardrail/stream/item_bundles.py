"""Items on their way to assembly, bundled: one record per partition and batch.

The judging agent sends every span of an agent run and every turn of a session
to an internal topic keyed by its whole's key (trace id, conversation id), so
one worker assembles each whole. One record per item costs a produce, a fetch
and a pass through Faust's stream each, which was most of what a span cost on
the run path. So a batch's items are bundled: the items whose keys hash to the
same partition of the topic (the producer's own partitioner, so a bundle lands
where each of its items would have) travel as one record, in their order::

    records = bundle_items(records, kinds={"app-run-spans": ("guardrail-run", b"span")},
                           partition_of=lambda topic, key: 0)
    for key, value in read_bundle(records[0].value):   # what the assembler does
        ...

A bundle's header is the gathering's kind header with the value ``items``; its
value is ``{"v": 1, "items": [[key, item], ...]}`` with each item the text the
item record would have carried. Releases before bundles skip such records (an
unknown kind), which is why ``assembly_bundles`` can turn them off while a
group is rolled onto this release.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    from .processing import Outgoing

__all__ = ["BUNDLE_KIND", "BUNDLE_MAX_BYTES", "BUNDLE_VERSION", "bundle_items", "read_bundle"]

#: The kind header's value on a bundle record.
BUNDLE_KIND = b"items"
BUNDLE_VERSION = 1
#: Item bytes past which a partition's bundle is closed and the next one begun:
#: well under the brokers' default record limit (1 MB), whatever the items.
BUNDLE_MAX_BYTES = 256_000

#: ``partition_of(topic, key)``: the partition the producer would send ``key``
#: to, or None when it cannot tell yet (no metadata): the items then go alone.
PartitionOf = Callable[[str, bytes], "int | None"]


def bundle_items(records: list[Outgoing], *, kinds: Mapping[str, tuple[str, bytes]],
                 partition_of: PartitionOf) -> list[Outgoing]:
    """``records`` with the item records of ``kinds`` (topic -> (kind header,
    item kind)) replaced by bundles, one per partition (more past
    :data:`BUNDLE_MAX_BYTES`), after the other records; nothing else changes."""
    kept: list[Outgoing] = []
    open_bundles: dict[tuple[str, int], _Bundle] = {}
    closed: list[_Bundle] = []
    for record in records:
        item = _item_of(record, kinds.get(record.topic))
        partition = None if item is None else partition_of(record.topic, record.key or b"")
        if partition is None:
            kept.append(record)
            continue
        bundle = open_bundles.get((record.topic, partition))
        if bundle is None or bundle.size + len(record.value) > BUNDLE_MAX_BYTES and bundle.items:
            if bundle is not None:
                closed.append(bundle)
            bundle = open_bundles[(record.topic, partition)] = _Bundle(record, partition)
        bundle.add(item, record)  # type: ignore[arg-type]
    return kept + [bundle.record() for bundle in [*closed, *open_bundles.values()]]


def _item_of(record: Outgoing, kind: tuple[str, bytes] | None) -> tuple[str, str] | None:
    """``record`` as a bundle's ``(key, value)``, or None when it goes alone: not
    an item of ``kind``, or a key or value that is not UTF-8 text."""
    if kind is None or record.key is None or tuple(record.headers) != (kind,):
        return None
    try:
        return record.key.decode(), record.value.decode()
    except UnicodeDecodeError:
        return None


class _Bundle:
    """The items of one topic partition, in the order they came."""

    def __init__(self, first: Outgoing, partition: int) -> None:
        self.template, self.partition = first, partition
        self.items: list[tuple[str, str]] = []
        self.size, self.timestamp_ms = 0, first.timestamp_ms

    def add(self, item: tuple[str, str], record: Outgoing) -> None:
        self.items.append(item)
        self.size += len(record.value)
        if record.timestamp_ms is not None:
            self.timestamp_ms = max(self.timestamp_ms or 0, record.timestamp_ms)

    def record(self) -> Outgoing:
        header, _ = self.template.headers[0]
        value = orjson.dumps({"v": BUNDLE_VERSION, "items": self.items})
        return replace(self.template, key=None, value=value, timestamp_ms=self.timestamp_ms,
                       headers=((header, BUNDLE_KIND),), partition=self.partition)


def read_bundle(value: bytes) -> list[tuple[str, bytes]]:
    """``(key, item value)`` of a bundle record, in order; ``ValueError`` when the
    value is not a bundle this release reads (another version, broken JSON, an
    item that is not ``[key, value]``): then none of it is read."""
    try:
        bundle = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(bundle, dict) or bundle.get("v") != BUNDLE_VERSION \
            or not isinstance(bundle.get("items"), list):
        version = bundle.get("v") if isinstance(bundle, dict) else None
        raise ValueError(f"not a bundle of version {BUNDLE_VERSION} (v={version!r})")
    items = bundle["items"]
    if not all(isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
               and isinstance(item[1], str) for item in items):
        raise ValueError("a bundle item is not [key, value]")
    return [(key, text.encode()) for key, text in items]
