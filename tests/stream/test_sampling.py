"""guardrail.stream.sampling: the deterministic sampling decision, sample rules,
and the first messages of every new version in full."""

import math
import os
import subprocess
import sys

import orjson

from guardrail.config.settings import load_settings
from guardrail.stream.envelope import Source, decode_input
from guardrail.stream.sampling import (DictStore, Sampler, is_sampled, sample_id, sample_point)


def _message(value, *, offset=0, partition=0, key=None):
    source = Source("in", partition, offset, key=key)
    return decode_input(orjson.dumps(value) if isinstance(value, dict) else value,
                        max_bytes=1_000_000, source=source), source


def _sampler(store=None, **settings):
    s = load_settings(environ={}, **settings)
    return Sampler(s.sampling, group_labels=s.windows.group_labels,
                   version_label=s.windows.version_label,
                   partitions=s.kafka.topic_partitions, store=store)


# --- the decision function -----------------------------------------------------------


def test_the_sample_point_of_an_id_is_pinned_and_the_same_in_every_process():
    # Pinned: a release that moved these would re-sample every stream it watches.
    assert sample_point("case-17") == 0.5403220759395012
    assert sample_point("in/0/42") == 0.08885502441752206
    code = "from guardrail.stream.sampling import sample_point as p; print(repr(p('case-17')))"
    for seed in ("1", "2"):  # Python's own str hash is salted per process; this is not
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}, check=True).stdout
        assert out.strip() == "0.5403220759395012"


def test_a_lower_rate_samples_a_subset_of_a_higher_one():
    ids = [f"case-{i}" for i in range(3000)]
    chosen = {r: {i for i in ids if is_sampled(i, r)} for r in (0.0, 0.05, 0.25, 0.5, 1.0)}
    assert chosen[0.0] == set() and chosen[1.0] == set(ids)
    assert chosen[0.05] <= chosen[0.25] <= chosen[0.5] <= chosen[1.0]


def test_the_share_sampled_is_the_rate_within_binomial_noise():
    n, rate = 20_000, 0.25
    hits = sum(is_sampled(f"msg-{i}", rate) for i in range(n))
    sigma = math.sqrt(n * rate * (1 - rate))
    assert abs(hits - n * rate) < 4 * sigma, hits


def test_a_message_is_sampled_by_its_case_id_else_its_key_else_its_coordinates():
    with_id, src = _message({"case_id": "c-9", "output": "x"}, offset=5, key=b"k")
    assert sample_id(with_id, src) == "c-9"
    keyed, src = _message({"output": "x"}, offset=5, key=b"order-2")
    assert sample_id(keyed, src) == "order-2"
    bare, src = _message({"output": "x"}, offset=42, key=b"\xff\xfe")
    assert sample_id(bare, src) == "in/0/42"


def test_a_redelivery_or_a_replay_decides_the_same():
    sampler = _sampler(sample_rate=0.25)
    messages = [_message({"case_id": f"c{i}", "output": "x"}, offset=i) for i in range(400)]
    first = [sampler.decide(m, s) for m, s in messages]
    again = [_sampler(sample_rate=0.25).decide(m, s) for m, s in messages]  # a new process
    assert first == again and 60 < sum(first) < 140
    # Under a budget factor, the same hash meets a lower threshold: a subset.
    halved = [sampler.decide(m, s, factor=0.5) for m, s in messages]
    assert all(f for f, h in zip(first, halved) if h) and sum(halved) < sum(first)


# --- rules ---------------------------------------------------------------------------


def test_the_first_matching_rule_sets_the_rate():
    rules = [{"match": {"model_version": "v2"}, "rate": 1.0},
             {"match": {"model_version": "v2", "app": "x"}, "rate": 0.0},  # never reached
             {"match": {"app": "x"}, "rate": 0.0}]
    sampler = _sampler(sample_rate=0.25, sample_rules=rules)
    v2 = [_message({"case_id": f"c{i}", "output": "x",
                    "metadata": {"model_version": "v2", "app": "x"}}) for i in range(300)]
    assert all(sampler.decide(m, s) for m, s in v2)
    app_x = [_message({"case_id": f"c{i}", "output": "x", "metadata": {"app": "x"}})
             for i in range(300)]
    assert not any(sampler.decide(m, s) for m, s in app_x)
    other = [_message({"case_id": f"c{i}", "output": "x", "metadata": {"app": "y"}})
             for i in range(300)]
    assert [sampler.decide(m, s) for m, s in other] == [is_sampled(f"c{i}", 0.25)
                                                        for i in range(300)]


def _versioned(version, offset, partition=0, model="m"):
    return _message({"case_id": f"{version}-{partition}-{offset}", "output": "x",
                     "metadata": {"model": model, "model_version": version}},
                    offset=offset, partition=partition)


def test_the_first_n_of_every_version_are_judged_in_full_then_the_rate_decides():
    # 2 partitions: each judges the first ceil(10 / 2) = 5 of a version it reads.
    sampler = _sampler(sample_rate=0.0, sample_rules=[{"first_per_version": 10}])
    decided = {(v, p): [sampler.decide(*_versioned(v, o, p)) for o in range(20)]
               for v in ("v1", "v2") for p in (0, 1)}
    for decisions in decided.values():
        assert decisions == [True] * 5 + [False] * 15
    other_model = [sampler.decide(*_versioned("v1", o, model="n")) for o in range(8)]
    assert other_model == [True] * 5 + [False] * 3  # another model's v1 is a new version
    unversioned = _message({"case_id": "u", "output": "x"}, offset=99)
    assert sampler.decide(*unversioned) is False  # no version label: the rule is skipped


def test_past_its_first_n_a_version_falls_through_to_the_later_rules():
    sampler = _sampler(sample_rate=0.0, topic_partitions=1, sample_rules=[
        {"first_per_version": 3}, {"match": {"model_version": "v2"}, "rate": 1.0}])
    assert [sampler.decide(*_versioned("v1", o)) for o in range(5)] == [True] * 3 + [False] * 2
    assert all(sampler.decide(*_versioned("v2", o)) for o in range(5))


def test_version_counts_decide_a_redelivery_as_the_first_time_also_after_a_restart():
    store = DictStore()
    rules = [{"first_per_version": 4}]
    sampler = _sampler(store, sample_rate=0.0, topic_partitions=1, sample_rules=rules)
    first = [sampler.decide(*_versioned("v2", o)) for o in range(10)]
    assert first == [True] * 4 + [False] * 6
    # A crash before the ack: offsets 2..9 come again, and are not counted again.
    assert [sampler.decide(*_versioned("v2", o)) for o in range(2, 10)] == first[2:]
    # A new worker recovering the same state (the table's changelog) goes on from it.
    restarted = _sampler(store, sample_rate=0.0, topic_partitions=1, sample_rules=rules)
    assert [restarted.decide(*_versioned("v2", o)) for o in range(10)] == first
    assert restarted.decide(*_versioned("v2", 10)) is False
    assert store.data and all(v["count"] == 11 for v in store.data.values())
