"""/metrics of a live worker judging traffic from 100 groups (model x
model_version x prompt_version) with ``metrics_max_groups=20``: every scrape
during the run shows at most 21 groups (20 plus ``other``), the folded groups
are counted, no judgment is lost from the totals; and the consumer lag names
only the topics the worker commits (input, judgments), never Faust's internal
changelog or assignor topics."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.harness import StreamEnv, produce
from support.monitoring import unknown_references

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

MAX_GROUPS = 20
MODELS, VERSIONS, PROMPTS = 5, 10, 2  # 100 groups
ROUNDS = 3  # messages per group
GROUP_LABELS = ("model", "model_version", "prompt_version")


def _groups():
    return [(f"bot-{m}", f"v{v}", f"p{p}") for m in range(MODELS) for v in range(VERSIONS)
            for p in range(PROMPTS)]


def _round(r: int) -> list[tuple]:
    """One message per group; every fourth group's answers are rude."""
    messages = []
    for i, (model, version, prompt) in enumerate(_groups()):
        rude = i % 4 == 0
        body = {"case_id": f"c-{r}-{i}", "output": "you idiot" if rude else f"glad to help {i}",
                "metadata": {"model": model, "model_version": version, "prompt_version": prompt}}
        messages.append((f"c-{r}-{i}".encode(), json.dumps(body).encode(), None))
    return messages


def _scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    samples: dict[str, list[tuple[dict[str, str], float]]] = {"_text": text}  # type: ignore
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def _label_groups(samples, name: str) -> set[tuple[str, ...]]:
    return {tuple(labels[k] for k in GROUP_LABELS) for labels, _ in samples.get(name, [])}


def _judged(samples) -> float:
    return sum(v for labels, v in samples.get("guardrail_messages_total", [])
               if labels["outcome"] == "judged")


def test_100_groups_show_as_at_most_max_groups_plus_other_and_lag_skips_internal_topics(
        kafka_bootstrap, thread_judge, tmp_path):
    thread_judge.reset()
    # Each judge call takes a while, so the rounds are still being judged when
    # scraped (a fast run on an idle machine could finish between two scrapes).
    thread_judge.latency = 0.2
    env = StreamEnv(kafka_bootstrap, thread_judge.api_base, tmp_path,
                    metrics_max_groups=MAX_GROUPS, judge_concurrency=8)
    try:
        assert env.cli("produce", "--input", "/dev/null").returncode == 0  # creates the topics
        port = env.start_worker().web_port
        scrapes = []
        deadline = time.monotonic() + 60
        while (first := _scrape(port)) is None:
            assert time.monotonic() < deadline, env.logs()[-3000:]
            time.sleep(0.5)
        scrapes.append(first)
        for r in range(ROUNDS):  # scraped while the rounds are judged
            asyncio.run(produce(env.bootstrap, env.topic("input"), _round(r)))
            if (samples := _scrape(port)) is not None:
                scrapes.append(samples)
        expected = ROUNDS * MODELS * VERSIONS * PROMPTS
        deadline = time.monotonic() + 90
        lag_topics: set[str] = set()
        while True:
            samples = _scrape(port)
            if samples is not None:
                scrapes.append(samples)
                lag_topics = {labels["topic"] for labels, _ in
                              samples.get("guardrail_consumer_lag", [])}
                if (_judged(samples) == expected
                        and {env.topic("input"), env.topic("judgments")} <= lag_topics):
                    break
            assert time.monotonic() < deadline, (
                f"judged {_judged(scrapes[-1])} of {expected}, lag topics {lag_topics}\n"
                + env.logs()[-3000:])
            time.sleep(0.3)
    finally:
        thread_judge.latency = 0.0
        env.stop_workers()

    during = [s for s in scrapes if 0 < _judged(s) < expected]
    assert during, "no scrape caught the worker mid-run"
    for samples in scrapes:
        for name in ("guardrail_judgments_total", "guardrail_unsafe_rate"):
            assert len(_label_groups(samples, name)) <= MAX_GROUPS + 1, name

    final = scrapes[-1]
    groups = _label_groups(final, "guardrail_judgments_total")
    assert len(groups) == MAX_GROUPS + 1 and ("other", "other", "other") in groups
    assert groups - {("other", "other", "other")} < set(_groups())
    [(_, folded)] = final["guardrail_metrics_groups_folded_total"]
    assert folded == len(_groups()) - MAX_GROUPS
    # Nothing lost by folding: every judgment (bias and toxicity) is in the totals.
    judgments = final["guardrail_judgments_total"]
    assert sum(v for _, v in judgments) == 2 * expected
    unsafe = sum(v for labels, v in judgments
                 if labels["metric"] == "toxicity" and labels["verdict"] == "unsafe")
    assert unsafe == ROUNDS * len(_groups()) // 4
    other_rates = [v for labels, v in final["guardrail_unsafe_rate"]
                   if labels["model"] == "other" and labels["metric"] == "toxicity"]
    assert len(other_rates) == 1 and 0 < other_rates[0] < 1

    # Lag: only the topics the worker commits (the session turns' too, when its
    # highwater is known), never changelogs or the assignor's.
    committed = {env.topic("input"), env.topic("judgments")}
    session_turns = env.env["GUARDRAIL_APP_ID"] + "-session-turns"
    assert committed <= lag_topics <= committed | {session_turns}, lag_topics
    assert unknown_references(final["_text"]) == []
