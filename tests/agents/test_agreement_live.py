"""The judge's agreement with its reviewers in a real worker on the embedded
broker: judged traffic goes to review, a scripted reviewer labels it on the
labels topic, ``/agreement`` (and ``/metrics``, ``/dashboard``, ``guardrail
rates``) show the figures worked out by hand; then a judge that flags polite
answers is swapped in and the agreement alert fires exactly once."""

from __future__ import annotations

import asyncio
import json
import math
import time
import urllib.request
import uuid

import bcrypt
import pytest
from support.harness import StreamEnv, TopicWatcher, WebhookSink, consume, produce

from guardrail.local.rule_judge import DEFAULT_TRIGGERS
from guardrail.review import LabelRecord, ReviewItem
from guardrail.stream.agreement import Confusion, corrected_rate, wilson

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

WINDOW = 60


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return response.read().decode()


def _traffic(start: int, base_ms: int) -> tuple[list[tuple], dict[str, str]]:
    """30 answers a second apart from ``base_ms``: 6 insults, 12 polite, 12 plain;
    and what the reviewer says of each (toxicity)."""
    messages, truth = [], {}
    for k in range(30):
        i = start + k
        if k < 6:
            text, unsafe = f"You idiot, answer {i} is in the manual.", True
        elif k < 18:
            text, unsafe = f"Thank you for asking, please see answer {i}.", False
        else:
            text, unsafe = f"The answer is {i}.", False
        messages.append((f"case-{i}".encode(), json.dumps({
            "case_id": f"case-{i}", "output": text,
            "metadata": {"model": "m", "model_version": "v1"}}).encode(), base_ms + k * 1000))
        truth[f"case-{i}"] = "unsafe" if unsafe else "safe"
    return messages, truth


def _labels(items: list[dict], truth: dict[str, str]) -> list[tuple]:
    """The scripted reviewer: its verdict on the toxicity of each item."""
    records = []
    for raw in items:
        item = ReviewItem.model_validate(raw)
        if item.case_id not in truth:
            continue
        judged = item.metric("toxicity").verdict
        human = truth[item.case_id]
        choice = ("agree" if (judged == "UNSAFE") == (human == "unsafe")
                  else "disagree_unsafe" if human == "unsafe" else "disagree_safe")
        label = LabelRecord.from_choice(item, "toxicity", choice, reviewer="ana")
        records.append((label.key(), label.encode(), None))
    return records


def _row(port: int, window_start: str, *, reviewed: int, judged: int = 30,
         timeout: float = 40) -> dict:
    """The toxicity row of a window once it holds ``reviewed`` labels and its
    observed rate over ``judged`` judgments (the windows are counted a moment
    after the results are out: wait for all of them, not the first)."""
    deadline = time.monotonic() + timeout
    rows: list = []
    while time.monotonic() < deadline:
        rows = json.loads(_get(port, "/agreement?metric=toxicity"))["agreement"]
        found = [r for r in rows if r["window_start"] == window_start]
        if found and found[0]["reviewed"] == reviewed and \
                (found[0]["observed_judged"] or 0) >= judged:
            return found[0]
        time.sleep(0.5)
    raise AssertionError(f"no complete row for {window_start}: {rows}")


@pytest.fixture
def env(kafka_bootstrap, thread_judge, tmp_path):
    thread_judge.reset()
    tag = uuid.uuid4().hex[:8]
    users = tmp_path / "users"
    users.write_text("ana:" + bcrypt.hashpw(b"reviewer-secret", bcrypt.gensalt(4)).decode()
                     + "\n")
    stream = StreamEnv(kafka_bootstrap, thread_judge.api_base, tmp_path,
                       window_seconds=WINDOW, review_users_file=users,
                       review_topic=f"review-{tag}", labels_topic=f"labels-{tag}",
                       review_rate_unsafe=1.0, review_rate_safe=1.0, review_band=0,
                       agreement_min_reviews=10, corrected_min_reviews=5,
                       # No regression rule: only agreement alerts reach the sinks here.
                       alert_rules=json.dumps([{"metric": "*", "max_unsafe_rate": None,
                                                "baseline_windows": 0}]))
    yield stream
    stream.stop_workers()
    thread_judge.triggers = dict(DEFAULT_TRIGGERS)


def test_agreement_figures_and_one_alert_when_the_judge_turns_on_polite_answers(
        env, thread_judge):
    base = (math.floor(time.time() / WINDOW) - 5) * WINDOW  # five windows ago, aligned
    w = [time.strftime("%Y-%m-%dT%H:%M:%S.000+00:00", time.gmtime(base + i * WINDOW))
         for i in range(3)]
    review_topic, labels_topic = env.env["GUARDRAIL_REVIEW_TOPIC"], env.env[
        "GUARDRAIL_LABELS_TOPIC"]
    assert env.cli("produce", "--input", "/dev/null").returncode == 0  # creates the topics
    with WebhookSink() as sink, TopicWatcher(env.bootstrap, env.topic("alerts")) as alerts:
        env.env["GUARDRAIL_ALERT_WEBHOOK_URL"] = sink.url
        first, truth = _traffic(0, base * 1000 + 1000)
        asyncio.run(produce(env.bootstrap, env.topic("input"), first))
        worker = env.start_worker()
        port = worker.web_port
        asyncio.run(consume(env.bootstrap, env.topic("results"), expect=30, timeout=90))
        items = asyncio.run(consume(env.bootstrap, review_topic, expect=30, timeout=30))
        assert len(items) == 30, env.logs()[-3000:]
        # The reviewer: one insult was a quote, two plain answers were threats.
        truth.update({"case-0": "safe", "case-20": "unsafe", "case-21": "unsafe"})
        asyncio.run(produce(env.bootstrap, labels_topic, _labels(items, truth)))

        row = _row(port, w[0], reviewed=30)
        # tp 5, fp 1, fn 2, tn 22 (every review at rate 1: weight 1, n_eff = n)
        assert row["reviewed_verdicts"] == {"unsafe": 6, "safe": 24, "error": 0}
        assert row["precision"]["value"] == pytest.approx(5 / 6)
        assert (row["precision"]["low"], row["precision"]["high"]) == pytest.approx(
            wilson(5 / 6, 6))
        assert row["precision"]["n_eff"] == 6 and row["recall"]["reviews"] == 7
        assert row["recall"]["value"] == pytest.approx(5 / 7)
        assert row["specificity"]["value"] == pytest.approx(22 / 23)
        assert (row["observed_judged"], row["observed_unsafe"]) == (30, 6)
        assert row["observed_unsafe_rate"] == pytest.approx(0.2)
        # (0.2 + 22/23 - 1) / (5/7 + 22/23 - 1) = 7/30: the reviewers' own count
        corrected = row["corrected_unsafe_rate"]
        assert corrected["value"] == pytest.approx(7 / 30) and row["corrected_note"] is None
        confusion = Confusion()
        for verdict, label, n in (("UNSAFE", "unsafe", 5), ("UNSAFE", "safe", 1),
                                  ("SAFE", "unsafe", 2), ("SAFE", "safe", 22)):
            for _ in range(n):
                confusion.add(verdict, label, 1.0)
        expected = corrected_rate(6, 30, confusion, min_reviews=5)
        assert (corrected["low"], corrected["high"]) == pytest.approx(
            (expected.low, expected.high))
        assert corrected["low"] < 7 / 30 < corrected["high"]
        group = row["group"]
        assert group == "model=m,model_version=v1,prompt_version=-"
        metrics = _get(port, "/metrics")
        assert (f'guardrail_judge_precision{{group="{group}",metric="toxicity"}} '
                f'{5 / 6!r}') in metrics
        assert f'guardrail_reviewed_labels{{group="{group}",metric="toxicity"}} 30.0' in metrics
        page = _get(port, "/dashboard?refresh=0")
        assert "Judge vs reviewers" in page and "83.3%" in page and "23.3%" in page
        rates = env.cli("rates", "--json")
        assert rates.returncode == 0, rates.stderr
        cli_rows = [r for r in json.loads(rates.stdout)["agreement"]
                    if r["metric"] == "toxicity" and r["window_start"] == w[0]]
        assert cli_rows and cli_rows[0]["precision"] == row["precision"]
        assert cli_rows[0]["corrected_unsafe_rate"] == corrected
        assert not sink.received and not alerts.snapshot()  # a good judge: no alert

        # A judge that flags polite answers: 18 UNSAFE verdicts a window, 6 of them right.
        thread_judge.triggers["toxicity"] = DEFAULT_TRIGGERS["toxicity"] | {"thank you"}
        second, truth2 = _traffic(30, (base + WINDOW) * 1000 + 1000)
        third, truth3 = _traffic(60, (base + 2 * WINDOW) * 1000 + 1000)
        asyncio.run(produce(env.bootstrap, env.topic("input"), second + third))
        asyncio.run(consume(env.bootstrap, env.topic("results"), expect=90, timeout=90))
        items = asyncio.run(consume(env.bootstrap, review_topic, expect=90, timeout=30))
        asyncio.run(produce(env.bootstrap, labels_topic, _labels(items, truth2)))
        assert alerts.wait_for(lambda recs: recs, timeout=40), env.logs()[-3000:]
        bad = _row(port, w[1], reviewed=30)
        assert bad["precision"]["value"] == pytest.approx(6 / 18)
        assert bad["recall"]["value"] == 1.0
        # The incident goes on into the next window: still one alert.
        asyncio.run(produce(env.bootstrap, labels_topic, _labels(items, truth3)))
        assert _row(port, w[2], reviewed=30)["precision"]["value"] == pytest.approx(6 / 18)
        time.sleep(3)
        deadline = time.monotonic() + 10
        while not sink.received and time.monotonic() < deadline:
            time.sleep(0.2)
        on_topic = alerts.snapshot()
        received = list(sink.received)
    assert len(on_topic) == 1 and len(received) == 1, (on_topic, received)
    alert = received[0]
    assert on_topic[0]["alert_id"] == alert["alert_id"]
    assert alert["kind"] == "agreement" and alert["metric"] == "toxicity"
    assert alert["group"] == {"model": "m", "model_version": "v1", "prompt_version": "-"}
    assert alert["window"]["start"] == w[1]
    # (Its figures are those of the labels read when it fired: 10 to 18 UNSAFE reviews.)
    precision = alert["figures"]["precision"]
    assert 10 <= precision["reviews"] <= 18 and precision["value"] < 0.7
    assert alert["figures"]["recall"]["value"] == 1.0
    assert alert["floors"] == {"precision": 0.7, "recall": 0.7, "min_reviews": 10}
    assert alert["reasons"][0].startswith(f"judge precision {precision['value']:.1%} below "
                                          "the floor 70.0%")
    assert {e["judge_verdict"] for e in alert["examples"]} == {"UNSAFE"}
    assert 'guardrail_agreement_alerts_total{metric="toxicity"} 1.0' in _get(port, "/metrics")
