"""Things judged as a whole: items gathered by a key until the whole is due.

An agent run gathers spans by trace id; a session gathers turns by conversation
id. Both are the same bookkeeping, kept here once, without Kafka (the Faust
wiring is :mod:`guardrail.agents.assembly`): a :class:`Book` of headers and
item indexes, and a :class:`Gathering` — what one kind of whole decides
(how an item is added, when the whole is due, what its judged case is, what
happens after the judgment)::

    book = Book()
    header = gathering.new_header("4bf9…", now_ms=1000)
    book.headers["4bf9…"] = header
    gathering.add(header, item, now_ms=1000, size=120)   # "added" | "duplicate" | ...
    gathering.due(header, now_ms=7000)                     # a status, or None

A whole moves ``open`` → ``closing`` (a tick named its judgment) → after its
judgment was published, whatever :meth:`Gathering.finish` makes of it: a run is
``closed`` and its items dropped; a session is ``open`` again, or ``closed``
after it went quiet, and keeps its turns. Headers are the kind's own dataclasses
(their field names are on the wire of existing changelogs); the fields named in
:class:`Header` are the ones this module and the assembler read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

__all__ = ["Header", "Book", "Gathering", "AddOutcome", "State", "RUN_SPAN_KIND",
           "RUN_SPAN_HEADERS", "SESSION_TURN_KIND", "TURN_HEADERS"]

#: The header (name, value) that marks an item record on an internal topic (a
#: run's span, a session's turn; other kinds there: ticks, done). The judging
#: agent writes it (guardrail.stream), the assembler reads it through its gathering.
RUN_SPAN_KIND: tuple[str, bytes] = ("guardrail-run", b"span")
SESSION_TURN_KIND: tuple[str, bytes] = ("guardrail-session", b"turn")
RUN_SPAN_HEADERS: tuple[tuple[str, bytes], ...] = (RUN_SPAN_KIND,)
TURN_HEADERS: tuple[tuple[str, bytes], ...] = (SESSION_TURN_KIND,)

State = Literal["open", "closing", "closed"]
AddOutcome = Literal["added", "duplicate", "late", "dropped"]


class Header(Protocol):
    """What the assembler reads and writes of any whole's header."""

    state: State
    last_ms: int
    bytes: int
    #: ``[partition, offset]`` of the tick that named the judgment in progress.
    tick: list[int] | None
    status: str | None
    closed_ms: int | None

    def to_bytes(self) -> bytes: ...


H = TypeVar("H", bound=Header)


@dataclass
class Book(Generic[H]):
    """The worker's in-memory view of its open wholes: headers, and item ids with
    their sizes per key (the table holds the same; this answers "which items"
    without a scan). Rebuilt from the table after every recovery."""

    headers: dict[str, H] = field(default_factory=dict)
    item_ids: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Item ids an add pushed out past a whole's caps (a session's oldest turns),
    #: to delete from the table; the assembler takes them after each add.
    evicted: list[str] = field(default_factory=list)

    @property
    def open_count(self) -> int:
        return sum(h.state != "closed" for h in self.headers.values())

    @property
    def items_held(self) -> int:
        return sum(len(ids) for ids in self.item_ids.values())

    @property
    def bytes_held(self) -> int:
        return sum(sum(ids.values()) for ids in self.item_ids.values())

    def forget_items(self, key: str) -> list[str]:
        """Drop a whole's item index; returns the item ids to delete from the table."""
        return list(self.item_ids.pop(key, {}))

    def rebuild(self, headers: dict[str, H], items: dict[str, dict[str, int]], *,
                fresh: Callable[[str], H], recount: Callable[[H, dict[str, int]], None],
                ) -> None:
        """The view from a recovered table. A header is written after its items
        (once per batch, and only when what :meth:`Gathering.durable` returns
        changed), so a recovered header can lag its items: ``recount`` takes an
        open whole's counts from the items it holds, and items without a header
        get a ``fresh`` one."""
        for key, ids in items.items():
            header = headers.setdefault(key, fresh(key))
            if header.state == "open":
                recount(header, ids)
        self.headers, self.item_ids = headers, items

    def quietest_open(self) -> list[tuple[str, H]]:
        """The open wholes by key, quiet the longest first (judged early when
        memory runs short)."""
        opened = [(k, h) for k, h in self.headers.items() if h.state == "open"]
        return sorted(opened, key=lambda pair: pair[1].last_ms)


class Gathering(Protocol[H]):
    """One kind of whole: the rules the generic assembler asks about.

    ``noun`` names it in logs; ``item_kind`` is the header value of its item
    records on the internal topic (``span``, ``turn``), ``kind_header`` that
    header's name; ``item_prefix`` the table key prefix of its items."""

    noun: str
    kind_header: str
    item_kind: bytes
    item_prefix: str
    book: Book[H]
    #: Most bytes of open wholes one worker holds before the quietest are judged early.
    memory_bytes: int
    #: How long a closed whole is remembered before its header is deleted.
    forget_after_ms: int

    def new_header(self, key: str, *, now_ms: int) -> H: ...

    def header_from_bytes(self, raw: bytes) -> H: ...

    def read_item(self, raw: bytes) -> Any:
        """The item of a record's value (``ValueError`` when unreadable)."""

    def item_id(self, item: Any) -> str: ...

    def add(self, header: H, item: Any, *, now_ms: int, size: int) -> AddOutcome:
        """Apply one item to its header and the book (the caller writes the table)."""

    def due(self, header: H, *, now_ms: int) -> str | None:
        """The status to judge an open whole as now, or None."""

    def forced_status(self, header: H) -> str:
        """The status of a whole judged early because memory ran short."""

    def start(self, header: H) -> None:
        """A tick made the whole ``closing``: note what its judgment covers."""

    def case(self, key: str, header: H, items: list[Any]) -> dict[str, Any]:
        """The case JSON of a whole being judged, from its items in the table."""

    def finish(self, key: str, header: H, *, now_ms: int) -> list[str]:
        """After a judgment was published: the header's next state; returns the
        ids of the items to delete from the table."""

    def durable(self, header: H) -> object:
        """What of an open header a recovery cannot recount from its items: an
        item that leaves it unchanged is not followed by a header write."""

    def recount(self, header: H, ids: dict[str, int], *, now_ms: int) -> None:
        """An open whole's counts (and times, as far as :meth:`durable` left
        them unwritten) from the items a recovered table holds."""

    def count_item(self, outcome: AddOutcome) -> None: ...

    def count_whole(self, outcome: str) -> None: ...

    def say_late(self, key: str, header: H) -> None: ...

    def update_gauges(self) -> None: ...
