"""The batch state file: which request went into which submitted batch.

Written after every change (a temporary file, then a rename, so a stop at
any moment leaves the old state or the new one, never half of one). A restart
reads it and resumes: a request whose ``custom_id`` is in a recorded chunk
waits for that chunk's batch (polled again, or its output read again once
finished) instead of being submitted a second time::

    state = BatchState.open(Path("out/.batch-api-state.json"), api_base=base, model=model)
    chunk = state.add_chunk(["r1", "r2"])          # before the upload
    state.update(chunk, file_id="file-1")          # after it
    state.update(chunk, batch_id="batch_1")        # after the batch is created
    state.chunk_of("r1")                           # the chunk, for a resumed request
    state.release(chunk, ["r2"])                   # r2 expired unanswered: submit it again
    state.mark_published("in->out:0", [17, 18])    # replay: results of offsets 17, 18 sent
    state.is_published("in->out:0", 18)            # True: a restart skips that record
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..errors import ConfigError

__all__ = ["BatchState", "Chunk", "StateMismatch", "TERMINAL", "write_atomically"]

#: Batch statuses after which nothing changes any more (OpenAI's; Anthropic's ``ended``).
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled", "ended"})
_VERSION = 1


class StateMismatch(ConfigError):
    """The state file was written for another batch endpoint or judge model."""


@dataclass
class Chunk:
    """One submitted (or being submitted) batch of requests."""

    number: int
    custom_ids: list[str]
    #: Where its requests are staged: the uploaded file's id (OpenAI), or the
    #: local file of the batch's create request (Anthropic, until it is created).
    file_id: str | None = None
    batch_id: str | None = None
    status: str = "new"
    output_file_id: str | None = None
    error_file_id: str | None = None
    #: Set once every request of the chunk got its result (answer or error).
    published: bool = False
    #: Requests given back after the batch ended without answering them.
    released: list[str] = field(default_factory=list)
    #: When its requests were staged (Unix time): its batch was created after.
    staged_at: float | None = None

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL


class BatchState:
    """Chunks by number and the chunk of every submitted ``custom_id``."""

    def __init__(self, path: Path | None, *, api_base: str, model: str,
                 chunks: list[Chunk] | None = None,
                 published: dict[str, list[list[int]]] | None = None) -> None:
        self.path, self.api_base, self.model = path, api_base, model
        self.chunks: list[Chunk] = chunks or []
        #: ``replay --batch-api``: offset ranges [first, last] whose results were
        #: published, by "topic->results topic:partition".
        self.published: dict[str, list[list[int]]] = published or {}
        self._index: dict[str, Chunk] = {}
        for chunk in self.chunks:
            released = set(chunk.released)
            self._index.update((cid, chunk) for cid in chunk.custom_ids if cid not in released)

    @classmethod
    def open(cls, path: Path | None, *, api_base: str, model: str) -> BatchState:
        """The state at ``path`` (fresh when absent; None: in memory only)."""
        if path is None or not path.exists():
            return cls(path, api_base=api_base, model=model)
        try:
            data = orjson.loads(path.read_bytes())
            chunks = [Chunk(**c) for c in data["chunks"]]
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise ConfigError(f"batch state file {path} is unreadable ({exc}); move it "
                              "away to start over (its batches would be paid again)") from None
        for key, mine in (("api_base", api_base), ("model", model)):
            if data.get(key) != mine:
                raise StateMismatch(f"batch state file {path} is for {key} {data.get(key)!r}, "
                                    f"not {mine!r}: use another --batch-state file")
        return cls(path, api_base=api_base, model=model, chunks=chunks,
                   published=data.get("published") or {})

    def chunk_of(self, custom_id: str) -> Chunk | None:
        return self._index.get(custom_id)

    def add_chunk(self, custom_ids: list[str]) -> Chunk:
        chunk = Chunk(number=len(self.chunks), custom_ids=list(custom_ids))
        self.chunks.append(chunk)
        self._index.update(dict.fromkeys(chunk.custom_ids, chunk))
        self.save()
        return chunk

    def update(self, chunk: Chunk, **changes: Any) -> None:
        for name, value in changes.items():
            setattr(chunk, name, value)
        self.save()

    def release(self, chunk: Chunk, custom_ids: list[str]) -> None:
        """Forget that these requests were submitted (their batch ended without
        answering them): a later run submits them again."""
        chunk.released = sorted(set(chunk.released) | set(custom_ids))
        for cid in custom_ids:
            if self._index.get(cid) is chunk:
                del self._index[cid]
        self.save()

    def is_published(self, where: str, offset: int) -> bool:
        """Whether the result of the record at ``offset`` of ``where`` was published."""
        return any(first <= offset <= last for first, last in self.published.get(where, ()))

    def mark_published(self, where: str, offsets: list[int]) -> None:
        """Record published offsets of ``where`` (kept as merged ranges)."""
        ranges = sorted([*self.published.get(where, ()), *([o, o] for o in offsets)])
        merged: list[list[int]] = []
        for first, last in ranges:
            if merged and first <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], last)
            else:
                merged.append([first, last])
        self.published[where] = merged
        self.save()

    def save(self) -> None:
        if self.path is None:
            return
        data = {"version": _VERSION, "api_base": self.api_base, "model": self.model,
                "chunks": [asdict(c) for c in self.chunks], "published": self.published}
        write_atomically(self.path, orjson.dumps(data, option=orjson.OPT_INDENT_2))


def write_atomically(path: Path, content: bytes) -> None:
    """Write ``path`` whole or not at all: a stop mid-write leaves the old file
    (or none), never half of the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(content)
    os.replace(temporary, path)
