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
from pathlib import Path
from typing import Protocol

import orjson

from .models import MetricResult, MetricRubric

__all__ = ["JudgmentCache", "MemoryCache", "SqliteCache", "cache_key"]


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
            "reasoning": include_reasoning, "rubric": _rubric_data(rubric)}
    if calls != "per_metric":
        data["calls"] = calls
    if logprobs:
        data["logprobs"] = True
    return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()


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


def _decode(blob: bytes) -> MetricResult:
    return MetricResult.model_validate(orjson.loads(blob))


def _as_hit(result: MetricResult) -> MetricResult:
    # A hit costs nothing: report the spend of this run, not of the original call.
    return result.model_copy(update={"cached": True, "input_tokens": 0, "output_tokens": 0,
                                     "cost": 0.0, "dropped_spans": 0, "cached_tokens": 0,
                                     "judge_seconds": 0.0})


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
        return _as_hit(_decode(blob))

    def put(self, key: str, result: MetricResult) -> None:
        if result.error is not None:
            return
        self._data[key] = _encode(result)
        self._data.move_to_end(key)
        while len(self._data) > self._max:
            self._data.popitem(last=False)

    def close(self) -> None:
        """Nothing to release."""


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
        return _as_hit(_decode(row[0]))

    def put(self, key: str, result: MetricResult) -> None:
        if result.error is not None:
            return
        blob = _encode(result)
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO judgments VALUES (?, ?)", (key, blob))

    def close(self) -> None:
        with self._lock:
            self._db.close()
