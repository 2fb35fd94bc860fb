"""Judgment cache: identical content is never paid for twice.

The key covers everything that decides a verdict — judge model, scoring mode,
reasoning flag, the full rubric (with its examples), and the judged field
texts. The judge model in the key keeps a cascade's first-judge and escalation
judgments apart (:mod:`guardrail.judges.cascade`)::

    cache = SqliteCache("judgments.db")
    evaluator = Evaluator(judge, evaluation=settings.evaluation, cache=cache)

Only successful judgments are stored; errors are always retried. A judgment
is stored as the judge sampled it, with its P(UNSAFE) and severity
probabilities: the evaluator decides the verdict from them on every hit, so a
changed ``verdict_thresholds`` applies to cached judgments too, for free.
Judgments made without asking for log-probabilities have their own keys: once
a judge asks, it judges those texts again rather than reuse verdicts that
carry no probability.
"""

from __future__ import annotations

import functools
import hashlib
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import orjson

from .models import MetricResult, MetricRubric

__all__ = ["BatchedCache", "JudgmentCache", "MemoryCache", "SqliteCache", "cache_key"]


def cache_key(model: str, rubric: MetricRubric, judged: dict[str, str], scoring_mode: str,
              include_reasoning: bool, *, calls: str = "per_metric",
              logprobs: bool = False) -> str:
    """A stable digest of everything that determines one metric's verdict.

    Per metric in either ``judge_calls`` mode (a message with some metrics
    cached asks only for the rest). A verdict given in a several-metric call
    came from another prompt, so ``per_message`` keys differ from
    ``per_metric`` ones, which stay as they were (existing caches remain valid).
    Likewise a judge that asks for log-probabilities (``logprobs``) has keys of
    its own. The verdict threshold is not in the key: it is applied on reading.
    """
    data = {"model": model, "judged": judged, "mode": scoring_mode,
            "reasoning": include_reasoning, "rubric": _rubric_json(rubric)}
    if calls != "per_metric":
        data["calls"] = calls
    if logprobs:
        data["logprobs"] = True
    return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()


#: id(rubric) -> (the rubric, its keyed JSON). By identity: hashing a rubric
#: (every field, its examples too) for ``lru_cache`` cost more than the rest of
#: a key; the configured rubrics live as long as the process.
_RUBRIC_JSON: dict[int, tuple[MetricRubric, orjson.Fragment]] = {}


def _rubric_json(rubric: MetricRubric) -> orjson.Fragment:
    """The rubric as keyed, serialised once (sorted: the key is a digest of
    sorted JSON, and a fragment is written as it is)."""
    held = _RUBRIC_JSON.get(id(rubric))
    if held is None or held[0] is not rubric:
        if len(_RUBRIC_JSON) >= 256:  # rubrics of cases' own redteam blocks come and go
            _RUBRIC_JSON.clear()
        held = (rubric, orjson.Fragment(orjson.dumps(_rubric_data(rubric),
                                                     option=orjson.OPT_SORT_KEYS)))
        _RUBRIC_JSON[id(rubric)] = held
    return held[1]


@functools.lru_cache(maxsize=256)
def _rubric_data(rubric: MetricRubric) -> dict[str, object]:
    """The rubric as keyed (dumped once per rubric, not per message: with its
    examples that was most of a key's cost). Callers only serialise it."""
    # A rubric without examples keys as it did before examples existed.
    return rubric.model_dump(mode="json", exclude=None if rubric.examples else {"examples"})


#: Fields left out of the result's JSON that a stored judgment must keep.
_KEPT = ("probability_unsafe", "severity_probs", "judge_model")


def _encode(result: MetricResult) -> bytes:
    data = result.model_dump(mode="json")
    data.update({name: getattr(result, name) for name in _KEPT})
    return orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)


def _hit(blob: bytes) -> MetricResult:
    """A stored judgment as a cache hit. Read straight from its JSON (one pass,
    where decoding then validating the dict took twice as long); a hit costs
    nothing, so its spend is the defaults (zero), as what is stored holds no
    spend: the fields that carry it are left out of the JSON (``exclude``)."""
    result = MetricResult.model_validate_json(blob)
    result.cached = True
    return result


class JudgmentCache(Protocol):
    def get(self, key: str) -> MetricResult | None: ...

    def put(self, key: str, result: MetricResult) -> None: ...

    def close(self) -> None: ...


class MemoryCache:
    """A bounded in-process LRU cache.

    Judgments are kept encoded, as :class:`SqliteCache` stores them: 20,000
    results as models were ~400,000 objects that every full run of Python's
    garbage collector walked (~0.3 s each, several a minute in a busy
    worker); bytes are not walked. A hit decodes its entry."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self._data: OrderedDict[str, bytes] = OrderedDict()
        self._max = max_entries

    def get(self, key: str) -> MetricResult | None:
        blob = self._data.get(key)
        if blob is None:
            return None
        self._data.move_to_end(key)
        return _hit(blob)

    def put(self, key: str, result: MetricResult) -> None:
        if result.error is not None:
            return
        self._data[key] = _encode(result)
        self._data.move_to_end(key)
        while len(self._data) > self._max:
            self._data.popitem(last=False)

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        """The stored judgments (encoded) of those of ``keys`` there are."""
        return {k: blob for k in keys if (blob := self._data.get(k)) is not None}

    def put_many(self, blobs: dict[str, bytes]) -> None:
        """Store encoded successful judgments (see :class:`BatchedCache`)."""
        self._data.update(blobs)
        while len(self._data) > self._max:
            self._data.popitem(last=False)

    def close(self) -> None:
        """Nothing to release."""


#: Keys per ``SELECT ... IN``: under SQLite's oldest limit of 999 variables.
QUERY_KEYS = 900


class SqliteCache:
    """A persistent cache in one SQLite file, shared by replays across runs."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False)
        with self._lock, self._db:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS judgments (key TEXT PRIMARY KEY, result BLOB)")

    def get(self, key: str) -> MetricResult | None:
        with self._lock:
            row = self._db.execute("SELECT result FROM judgments WHERE key = ?",
                                   (key,)).fetchone()
        if row is None:
            return None
        return _hit(row[0])

    def put(self, key: str, result: MetricResult) -> None:
        if result.error is not None:
            return
        blob = _encode(result)
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO judgments VALUES (?, ?)", (key, blob))

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        """The stored judgments (encoded) of those of ``keys`` there are: one
        query per :data:`QUERY_KEYS` keys instead of one per key."""
        keys = list(keys)
        found: dict[str, bytes] = {}
        with self._lock:
            for start in range(0, len(keys), QUERY_KEYS):
                chunk = keys[start:start + QUERY_KEYS]
                found.update(self._db.execute(
                    f"SELECT key, result FROM judgments WHERE key IN ({','.join('?' * len(chunk))})",
                    chunk).fetchall())
        return found

    def put_many(self, blobs: dict[str, bytes]) -> None:
        """Store encoded successful judgments in one transaction (one commit,
        one WAL sync, where a ``put`` each costs one of each)."""
        if not blobs:
            return
        with self._lock, self._db:
            self._db.executemany("INSERT OR REPLACE INTO judgments VALUES (?, ?)", blobs.items())

    def close(self) -> None:
        with self._lock:
            self._db.close()


class BatchedCache:
    """A cache read and written a batch at a time (``guardrail replay``).

    ``prefetch`` reads the judgments of a batch's keys in one query and ``get``
    answers from what it read; ``put`` keeps a new judgment (encoded) until
    ``flush`` writes every kept one in one transaction. A key ``get`` was not
    prefetched for (a cascade's second judge) is asked of the store itself::

        cache = BatchedCache(SqliteCache("judgments.sqlite"))
        cache.prefetch(keys)          # one SELECT ... WHERE key IN (...)
        cache.get(key)                # no query
        cache.flush()                 # the batch's new judgments, one commit

    Each prefetched entry answers once and is then dropped, so what is held
    stays within the batches in flight; a later ``get`` of it (a retry) goes to
    the store, where an unflushed ``put`` is found among the kept ones first.
    """

    def __init__(self, store: MemoryCache | SqliteCache) -> None:
        self.store = store
        self.path = getattr(store, "path", None)
        #: Prefetched key -> its stored judgment, or None: known to be absent.
        self._read: dict[str, bytes | None] = {}
        self._new: dict[str, bytes] = {}

    def prefetch(self, keys: Iterable[str]) -> None:
        wanted = [k for k in keys if k not in self._new]
        found = self.store.get_many(wanted)
        self._read.update((k, found.get(k)) for k in wanted)

    def holds(self, key: str) -> bool:
        """Whether ``get(key)`` answers without a query and finds a judgment."""
        return key in self._new or self._read.get(key) is not None

    def get(self, key: str) -> MetricResult | None:
        blob = self._new.get(key)
        if blob is None:
            if key in self._read:
                blob = self._read.pop(key)
            else:
                blob = self.store.get_many((key,)).get(key)
        return None if blob is None else _hit(blob)

    def put(self, key: str, result: MetricResult) -> None:
        if result.error is None:
            self._new[key] = _encode(result)

    def flush(self) -> None:
        """Write the judgments kept since the last flush, in one transaction."""
        new, self._new = self._new, {}
        self.store.put_many(new)

    def close(self) -> None:
        self.flush()
        self.store.close()
