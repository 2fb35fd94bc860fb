"""/rates and ``guardrail rates`` answer for the whole consumer group: two
workers, each owning one partition of the window table, on the embedded broker."""

import asyncio
import json
import urllib.error
import urllib.request
from collections import Counter

import pytest
from support.harness import StreamEnv, consume, poll, produce

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(420)]

MODELS = [f"model-{i}" for i in range(6)]
VERSIONS = ["v1", "v2"]


def _traffic():
    """Cases over 12 groups (6 models x 2 versions); every 7th one is toxic.
    Returns the messages and the expected (metric, group) -> (total, unsafe)."""
    messages, expected = [], Counter()
    for i in range(240):
        model, version = MODELS[i % 6], VERSIONS[(i // 6) % 2]
        toxic = i % 7 == 0
        body = {"case_id": f"case-{i}", "output": "you idiot" if toxic else f"fine answer {i}",
                "metadata": {"model": model, "model_version": version}}
        messages.append((f"case-{i}".encode(), json.dumps(body).encode(), None))
        group = f"model={model},model_version={version},prompt_version=-"
        expected[("toxicity", group, "total")] += 1
        expected[("toxicity", group, "unsafe")] += toxic
        expected[("bias", group, "total")] += 1
    return messages, {(m, g): (expected[(m, g, "total")], expected[(m, g, "unsafe")])
                      for (m, g, kind) in expected if kind == "total"}


def _get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return json.loads(response.read())
    except (OSError, urllib.error.URLError):
        return None


def _cells(rows):
    return {(r["metric"], r["group"], r["window_start"]): (r["total"], r["unsafe"], r["errors"])
            for r in rows}


def _totals(rows):
    """(metric, group) -> (total, unsafe), summed over windows (a run may
    straddle a window boundary)."""
    sums = Counter()
    for r in rows:
        sums[(r["metric"], r["group"], 0)] += r["total"]
        sums[(r["metric"], r["group"], 1)] += r["unsafe"]
    return {(m, g): (sums[(m, g, 0)], sums[(m, g, 1)]) for (m, g, _) in sums}


def _wait(predicate, timeout):
    return poll(predicate, timeout, interval=0.5)


@pytest.fixture
def fleet(kafka_bootstrap, thread_judge, tmp_path):
    thread_judge.reset()
    env = StreamEnv(kafka_bootstrap, thread_judge.api_base, tmp_path, window_seconds=3600,
                    window_expires_seconds=7200)
    assert env.cli("produce", "--input", "/dev/null").returncode == 0  # creates the topics
    workers = [env.start_worker(), env.start_worker()]
    yield env, [w.web_port for w in workers]
    env.stop_workers()


def _local_views_settled(ports, group_cells):
    """Both local views, once each holds a part of the group's cells (after
    the rebalance each worker owns one of the two table partitions)."""
    local = [_get(port, "/rates?scope=local") for port in ports]
    if any(answer is None for answer in local):
        return None
    cells = [set(_cells(answer["rates"])) for answer in local]
    return cells if all(c and c < set(group_cells) for c in cells) else None


def test_every_worker_answers_for_the_whole_group(fleet):
    env, ports = fleet
    messages, expected = _traffic()
    asyncio.run(produce(env.bootstrap, env.topic("input"), messages))
    results = asyncio.run(consume(env.bootstrap, env.topic("results"), expect=len(messages),
                                  timeout=180))
    assert len({r["case_id"] for r in results}) == len(messages), env.logs()[-3000:]

    def group_view(port):
        answer = _get(port, "/rates")
        ok = answer and answer["caught_up"] and _totals(answer["rates"]) == expected
        return answer if ok else None

    answers = [_wait(lambda p=port: group_view(p), timeout=60) for port in ports]
    assert all(answers), (answers, env.logs()[-3000:])
    a, b = answers
    assert a["scope"] == b["scope"] == "group"
    assert a["malformed_records"] == b["malformed_records"] == 0
    assert _cells(a["rates"]) == _cells(b["rates"])
    assert {r["errors"] for r in a["rates"]} == {0}

    local = _wait(lambda: _local_views_settled(ports, _cells(a["rates"])), timeout=60)
    assert local, [_get(port, "/rates?scope=local") for port in ports]
    assert local[0] | local[1] == set(_cells(a["rates"]))  # together: the whole picture

    printed = env.cli("rates", "--json")
    assert printed.returncode == 0, printed.stderr
    answer = json.loads(printed.stdout)
    assert answer["scope"] == "group" and answer["malformed_records"] == 0
    assert _cells(answer["rates"]) == _cells(a["rates"])
    assert _totals(answer["rates"]) == expected

    table = env.cli("rates", "--metric", "toxicity")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:2] == ["metric", "group"]
    toxicity_rows = [r for r in a["rates"] if r["metric"] == "toxicity"]
    assert len(lines) == 1 + len(toxicity_rows)
    assert all(line.startswith("toxicity ") for line in lines[1:])


def test_rates_rejects_an_unknown_scope_and_a_missing_group(fleet):
    env, ports = fleet
    assert _wait(lambda: _get(ports[0], "/rates"), timeout=60)
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://127.0.0.1:{ports[0]}/rates?scope=everything", timeout=5)
    assert err.value.code == 400
    missing = env.cli("rates", "--app-id", "no-such-app", "--timeout", "20")
    assert missing.returncode == 2
    assert "no topic 'no-such-app-window-counts-changelog'" in missing.stderr
