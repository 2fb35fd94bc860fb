"""Gate mode under load and faults: the records to produce, a worker to run, and an
account of where every input record was placed. Used by the gate's stream tests
(``tests/agents/test_gate_*.py``) and the gate benchmarks (``bench/gate/``)::

    env = gate_env(bootstrap, judge, tmp_path)
    records = keyed_cases(2_000, keys=100)
    with Placements(env) as placed:
        worker = start_ready(env)
        asyncio.run(produce(env.bootstrap, env.topic("input"), records))
        placed.wait(len(records), timeout=120)
    account = placed.account(len(records))
    account["missing"], account["twice"], account["both"], account["inversions"]
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from .harness import StreamEnv, TopicWatcher, poll, worker_page, worker_ready

__all__ = ["gate_env", "keyed_cases", "start_ready", "Placements", "header", "inverted",
           "JudgeLedger", "input_partitions", "UNSAFE_TEXT"]

#: What the stand-in judge calls UNSAFE (toxicity).
UNSAFE_TEXT = "you idiot"


def gate_env(bootstrap: str, judge: Any, tmp: Path, **settings: Any) -> StreamEnv:
    """A :class:`StreamEnv` in gate mode with approved and held topics of its own
    (``env.approved``, ``env.held``)."""
    tag = uuid.uuid4().hex[:8]
    env = StreamEnv(bootstrap, judge.api_base, tmp, gate="true",
                    approved_topic=f"approved-{tag}", held_topic=f"held-{tag}",
                    **{"judge_concurrency": 64, **settings})
    env.approved, env.held = f"approved-{tag}", f"held-{tag}"  # type: ignore[attr-defined]
    return env


def keyed_cases(n: int, *, keys: int = 100, unsafe_every: int = 13,
                broken_every: int = 0) -> list[tuple[bytes, bytes, None]]:
    """``n`` case records keyed ``k0`` … ``k{keys-1}`` in turn; every
    ``unsafe_every``-th is an insult, every ``broken_every``-th (0: none) not JSON."""
    records = []
    for i in range(n):
        text = UNSAFE_TEXT if unsafe_every and i % unsafe_every == 0 else f"a fine answer {i}"
        value = json.dumps({"case_id": f"c{i}", "output": text}).encode()
        if broken_every and i % broken_every == broken_every - 1:
            value = b"{not json"
        records.append((f"k{i % keys}".encode(), value, None))
    return records


def start_ready(env: StreamEnv, timeout: float = 60) -> Any:
    """A worker that answers ``/health`` (its topics exist by then)."""
    worker = env.start_worker()
    if not poll(lambda: worker_ready(worker), timeout):
        raise AssertionError(f"the worker did not start:\n{env.logs()[-3000:]}")
    return worker


class JudgeLedger:
    """A responder for the stand-in judge (``judge.responder = JudgeLedger()``) that
    counts the verdicts it gave (200 answers only) per output and metric.

    With ``second_opinion``, a question asked again about an output it already
    answered gets UNSAFE: a judge that changes its mind. A record judged again after
    a fault and forwarded by its new judgment, next to a copy forwarded by the first,
    then lands on both the approved and the held topic, which :meth:`Placements.account`
    counts (``both``); a gate that decides a record read again from what it decided
    before never forwards it differently."""

    def __init__(self, *, second_opinion: bool = False) -> None:
        self.second_opinion = second_opinion
        self._lock = threading.Lock()
        self._answers: Counter[tuple[str, str]] = Counter()

    async def __call__(self, body: dict, fields: dict[str, str], metric: str,
                       mode: str) -> Any:
        key = (fields.get("output", ""), metric)
        with self._lock:
            self._answers[key] += 1
            again = self._answers[key] > 1
        if self.second_opinion and again and UNSAFE_TEXT not in key[0]:
            from guardrail.local.rule_answers import make_verdict

            return make_verdict("UNSAFE", mode=mode, violations=["second opinion"])
        return None  # the word rule answers

    def answered(self, output: str, metric: str) -> int:
        """How many times the judge answered (200) for ``output`` and ``metric``."""
        with self._lock:
            return self._answers[output, metric]

    def judged(self, output: str, metrics: tuple[str, ...] = ("bias", "toxicity")) -> bool:
        """The judge answered (200) for ``output`` on each of ``metrics``."""
        with self._lock:
            return all(self._answers[output, metric] for metric in metrics)

    def judged_again(self) -> int:
        """Outputs (insults left out: they repeat by design) the judge answered
        about more than once for a metric."""
        with self._lock:
            return len({o for (o, _), n in self._answers.items()
                        if n > 1 and UNSAFE_TEXT not in o})


def input_partitions(env: StreamEnv, worker: Any) -> set[int]:
    """The input partitions ``worker`` reads and has committed on, from its
    ``guardrail_consumer_lag`` series on ``/metrics`` (empty while it has none)."""
    try:
        page = worker_page(worker.web_port, "/metrics")
    except OSError:
        return set()
    topic = env.topic("input")
    found = set()
    for line in page.splitlines():
        if line.startswith("guardrail_consumer_lag{") and f'topic="{topic}"' in line:
            found.add(int(line.split('partition="', 1)[1].split('"', 1)[0]))
    return found


def header(message: Any, name: str) -> bytes | None:
    return dict(message.headers or ()).get(name)


class Placements:
    """Follows the approved, held and DLQ topics (start the worker first, so the
    topics exist with its partition counts) and accounts for every input record."""

    def __init__(self, env: StreamEnv, *, isolation_level: str = "read_uncommitted") -> None:
        self.env = env
        self.watchers = {where: TopicWatcher(env.bootstrap, topic, parse=lambda m: m,
                                             isolation_level=isolation_level)
                         for where, topic in (("approved", env.approved),  # type: ignore
                                              ("held", env.held),  # type: ignore
                                              ("dlq", env.topic("dlq")))}

    def __enter__(self) -> Placements:
        for watcher in self.watchers.values():
            watcher.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for watcher in self.watchers.values():
            watcher.__exit__(*exc)

    def records(self) -> dict[str, list[Any]]:
        return {where: w.snapshot() for where, w in self.watchers.items()}

    def placed(self) -> int:
        """Distinct input records placed somewhere."""
        return len(self._places())

    def wait(self, n: int, timeout: float, settle: float = 2.0) -> bool:
        """Until ``n`` input records are placed, then ``settle`` seconds for duplicates."""
        done = bool(poll(lambda: self.placed() >= n, timeout))
        time.sleep(settle)
        return done

    def _places(self) -> dict[tuple[int, int], list[str]]:
        places: dict[tuple[int, int], list[str]] = defaultdict(list)
        for where, messages in self.records().items():
            for m in messages:
                places[_source(m, where)].append(where)
        return places

    def account(self, n: int) -> dict[str, Any]:
        """Where the ``n`` input records (offsets 0..n-1 over the input's partitions)
        went: placed, missing, forwarded twice, in two places, unsafe or unjudged on
        approved, order inversions per key on approved (each record's first copy)."""
        places = self._places()
        records = self.records()
        approved = records["approved"]
        return {
            "placed": len(places), "missing": n - len(places),
            "twice": sum(len(p) - 1 for p in places.values() if len(set(p)) == 1),
            "both": sum(1 for p in places.values() if len(set(p)) > 1),
            "in_both": sorted(s for s, p in places.items() if len(set(p)) > 1)[:5],
            "approved": len({_source(m, "approved") for m in approved}),
            "held": len({_source(m, "held") for m in records["held"]}),
            "dlq": len({_source(m, "dlq") for m in records["dlq"]}),
            "unsafe_approved": sum(UNSAFE_TEXT.encode() in m.value for m in approved),
            "not_safe_approved": sum(header(m, "guardrail.verdict") not in (b"SAFE", b"NONE")
                                     for m in approved),
            "hold_reasons": dict(Counter(header(m, "guardrail.hold_reason")
                                         for m in records["held"])),
            "inversions": len(inverted(approved)),
            "inverted": inverted(approved)[:5],
        }


def _source(message: Any, where: str) -> tuple[int, int]:
    """The input partition and offset a placed record stands for."""
    if where == "dlq":
        source = json.loads(message.value)["source"]
        return source["partition"], source["offset"]
    _, partition, offset = header(message, "guardrail.source").decode().rsplit("/", 2)
    return int(partition), int(offset)


def inverted(messages: list[Any]) -> list[tuple[Any, ...]]:
    """Records of a key that reached the topic after a later record of the key
    (copies of a record already there are left out): (key, its input offset, the
    later one's, its offset on the topic)."""
    seen: set[tuple[int, int]] = set()
    last: dict[tuple[int, bytes], int] = {}
    found = []
    for m in sorted(messages, key=lambda m: (m.partition, m.offset)):
        source = _source(m, "approved")
        if source in seen:
            continue
        seen.add(source)
        lane = (source[0], m.key)
        if source[1] < last.get(lane, -1):
            found.append((m.key, source[1], last[lane], m.offset))
        last[lane] = max(source[1], last.get(lane, -1))
    return found
