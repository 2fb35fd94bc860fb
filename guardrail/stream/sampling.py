"""Which valid messages are judged: a deterministic sample, rules per metadata,
and the first messages of every new version in full.

The decision is a pure function of the message's sample id and a rate, so a
redelivered or replayed message decides the same::

    sample_point("case-17")              # 0.5403…, fixed for this id everywhere
    is_sampled("case-17", 0.25)          # False: 0.5403 >= 0.25
    is_sampled("case-17", 0.6)           # True, and at any rate above 0.6 too

    sampler = Sampler(settings.sampling, group_labels=("model", "model_version"),
                      version_label="model_version", partitions=2)
    sampler.decide(message, source)               # judge this InputMessage?
    sampler.decide(message, source, factor=0.5)   # with a budget halving every rate

**Sample id.** The case's ``case_id``; a case without one is named by the
input's Kafka key when that is UTF-8 text, else by ``topic/partition/offset``
(:func:`guardrail.formats.reader.default_case_id`, applied when the input is decoded).
Two messages with the same case_id are sampled alike.

**Rate.** ``sample_point(id)`` is the first 8 bytes of a keyed BLAKE2b of the
id, read as a number in [0, 1); the message is judged when it is below the
rate. So a lower rate judges a subset of a higher one: a budget that halves
the rate (``factor``) drops messages, it never judges different ones.

**Rules** (``sample_rules``, first match wins; a rule matches when every label
of its ``match`` equals the message's metadata): ``rate`` sets the rate;
``first_per_version: N`` judges the first N messages of every version in full
(rate 1.0) and, past them, lets the later rules or ``sample_rate`` decide.

**"First" of a version** (:class:`VersionQuota`). A version is a combination of
the group labels (``group_labels``) of a message that carries the version
label (a message without it skips the rule). Each input partition judges the
first ``ceil(N / partitions)`` messages of the version it reads, by offset, so
N in all when the version's traffic spreads over the partitions (keys are
hashed). Per version and partition the state keeps how many were counted, the
last offset counted and the last offset judged in full: a redelivered offset
(at or below the last counted) is decided from that state, never counted
again. In the worker the state lives in a Faust table whose changelog is
written and confirmed before the batch is acked, and is recovered on restart
and rebalance. Limits: a state write lost with a crash, or a stale write by a
worker that lost the partition in a rebalance, can only make the count lower,
so a version gets *more* than N messages in full, never fewer; a replay keeps
its state in memory and counts from the start of its range; the rule's state
is keyed by its ``match``, so changing N keeps the count, changing ``match``
starts a new one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import orjson

from .settings import SampleRule, SamplingSettings
from .envelope import InputMessage, Source, group_labels
from ..judging.draws import is_sampled, sample_point
from .events import mark_position, mark_value

__all__ = ["sample_point", "is_sampled", "sample_id", "Sampler", "VersionQuota", "QuotaStore",
           "DictStore"]

def sample_id(message: InputMessage, source: Source) -> str:
    """The id a message is sampled by: a session judgment's session id (each
    judgment of a session is in or out with it), an agent run's trace id (the
    whole run is in or out), else its case_id (decoding already applied the key /
    coordinates rule to a case without one)."""
    if message.session is not None and message.session.get("id"):
        return str(message.session["id"])
    if message.run is not None and message.trace is not None:
        return message.trace["trace_id"]
    return message.case.case_id or source.coordinates


class QuotaStore(Protocol):
    """Where :class:`VersionQuota` keeps its counts (a Faust table in the worker)."""

    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, value: dict[str, Any], partition: int) -> None: ...


class DictStore:
    """In-memory :class:`QuotaStore` (replay, tests)."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, Any]] = {}

    def get(self, key: str) -> dict[str, Any] | None:
        return self.data.get(key)

    def put(self, key: str, value: dict[str, Any], partition: int) -> None:
        self.data[key] = value


class VersionQuota:
    """Is this message among the first N of its version? (See the module doc.)"""

    def __init__(self, store: QuotaStore, partitions: int) -> None:
        self.store = store
        self.partitions = max(1, partitions)

    def within_first(self, scope: str, version: str, source: Source, n: int) -> bool:
        quota = math.ceil(n / self.partitions)
        key = f"{scope}|{version}|{source.topic}|{source.partition}"
        state = self.store.get(key) or {"count": 0, "last": -1, "full_until": -1}
        # Positions, not offsets: the cases of one record share its offset.
        if source.position <= mark_position(state["last"]):  # redelivered: as the first time
            return source.position <= mark_position(state["full_until"])
        count = state["count"] + 1
        full = count <= quota
        here = mark_value(source.position)
        # schema_version: the record other workers read back; changes are additive.
        self.store.put(key, {"schema_version": 1, "count": count, "last": here,
                             "full_until": here if full else state["full_until"]},
                       source.partition)
        return full


class Sampler:
    """The sampling decision of the worker (and of a replay that opts in)."""

    def __init__(self, sampling: SamplingSettings, *, group_labels: Sequence[str],
                 version_label: str, partitions: int, store: QuotaStore | None = None,
                 rate: float | None = None) -> None:
        self.rate = sampling.sample_rate if rate is None else rate
        self.rules: tuple[SampleRule, ...] = sampling.sample_rules
        self.group_labels = tuple(group_labels)
        self.version_label = version_label
        self.quota = VersionQuota(store or DictStore(), partitions)
        # The rule's state key: its match, not its position or N (module doc).
        self._scopes = [orjson.dumps(r.match, option=orjson.OPT_SORT_KEYS).decode()
                        for r in self.rules]

    @property
    def uses_quota(self) -> bool:
        """Whether some rule counts the first messages of a version (needs a store)."""
        return any(r.first_per_version is not None for r in self.rules)

    @property
    def judges_everything(self) -> bool:
        """Rate 1 and no rules: every message is judged (at factor 1)."""
        return self.rate >= 1.0 and not self.rules

    def rate_for(self, message: InputMessage, source: Source) -> float:
        """The rate that applies to this message, before any budget factor.

        Updates the version quota when a ``first_per_version`` rule is reached,
        so call it once per message, in offset order per partition."""
        metadata = message.metadata
        for rule, scope in zip(self.rules, self._scopes):
            if any(metadata.get(k) != v for k, v in rule.match.items()):
                continue
            if rule.first_per_version is None:
                return rule.rate  # type: ignore[return-value]
            if not metadata.get(self.version_label):
                continue  # no version label: nothing to count the first of
            labels = group_labels(metadata, self.group_labels)
            version = ",".join(f"{k}={v}" for k, v in labels.items())
            if self.quota.within_first(scope, version, source, rule.first_per_version):
                return 1.0
        return self.rate

    def decide(self, message: InputMessage, source: Source, factor: float = 1.0) -> bool:
        """Judge this message? ``factor`` (≤ 1, the budget's) scales every rate."""
        if self.judges_everything and factor >= 1.0:
            return True
        return is_sampled(sample_id(message, source), self.rate_for(message, source) * factor)
