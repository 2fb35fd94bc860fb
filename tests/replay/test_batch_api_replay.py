"""``replay --batch-api`` on the embedded broker against the stand-in batch servers
(OpenAI's and Anthropic's): every record of the range gets one result, a process
killed mid-poll is resumed without new batches, and what it had published is not
published again."""

import asyncio
import json
import signal
import subprocess
import time

import pytest
from support.harness import StreamEnv, consume_messages, produce

from tests.support.anthropic_batch_server import AnthropicBatchServer
from tests.support.batch_server import BatchServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

T0 = 1_700_000_000_000


def _values(n):
    texts = ["a kind and helpful reply {}", "you idiot, reply {}", "plain facts, reply {}"]
    return [(f"k{i}".encode(), json.dumps({"case_id": f"case-{i}",
                                           "output": texts[i % 3].format(i)}).encode(),
             T0 + i * 1000) for i in range(n)]


@pytest.fixture(params=["openai"])
def batch_env(kafka_bootstrap, tmp_path, request):
    anthropic = request.param == "anthropic"
    with AnthropicBatchServer() if anthropic else BatchServer() as server:
        env = StreamEnv(kafka_bootstrap, server.api_base, tmp_path)
        if anthropic:
            env.env["GUARDRAIL_JUDGE_MODEL"] = "anthropic/claude-3-haiku-20240307"
        env.env.update({"GUARDRAIL_JUDGE_API_KEY": "sk-test-0123456789",
                        "GUARDRAIL_BATCH_MAX_REQUESTS": "10",
                        "GUARDRAIL_BATCH_GATHER_SECONDS": "0.3",
                        "GUARDRAIL_BATCH_POLL_SECONDS": "0.05",
                        "GUARDRAIL_BATCH_POLL_MAX_SECONDS": "0.2",
                        "GUARDRAIL_CACHE_PATH": str(tmp_path / "cache.sqlite")})
        yield env, server
        assert getattr(server, "invalid", []) == []  # Anthropic's stand-in checks requests


def _args(env, state):
    return ["replay", "--from", str(T0), "--results-topic", env.topic("results"),
            "--batch-api", "--batch-state", str(state), "--quiet"]


def _results(env, expect):
    records = asyncio.run(consume_messages(env.bootstrap, env.topic("results"), expect=expect,
                                           timeout=30, settle=2))
    return [json.loads(r.value) for r in records]


@pytest.mark.parametrize("batch_env", ["openai", "anthropic"], indirect=True)
def test_replay_batch_api_judges_the_range_in_chunks(batch_env, tmp_path):
    env, server = batch_env
    assert env.cli("produce", "--input", "/dev/null").returncode == 0  # creates the topics
    asyncio.run(produce(env.bootstrap, env.topic("input"), _values(30)))
    proc = env.cli(*_args(env, tmp_path / "state.json"))
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (summary["processed"], summary["results"], summary["judged"]) == (30, 30, 60)
    assert server.creates == 3 and sum(server.created_sizes) == 30
    results = _results(env, 30)
    assert sorted(r["case_id"] for r in results) == sorted(f"case-{i}" for i in range(30))
    unsafe = {r["case_id"] for r in results
              if any(m["result"] and m["result"][0]["verdict"] == "UNSAFE" for m in r["metrics"])}
    assert unsafe == {f"case-{i}" for i in range(1, 30, 3)}


def test_a_killed_replay_resumes_and_publishes_nothing_twice(batch_env, tmp_path):
    env, server = batch_env
    assert env.cli("produce", "--input", "/dev/null").returncode == 0
    asyncio.run(produce(env.bootstrap, env.topic("input"), _values(30)))
    server.hold, server.release_first = True, 1  # the first batch finishes, the rest wait
    state = tmp_path / "state.json"
    proc = subprocess.Popen(["guardrail", *_args(env, state)], env=env.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not _published_one_group(state) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.creates == 3 and _published_one_group(state)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    server.hold = False
    again = env.cli(*_args(env, state))
    assert again.returncode == 0, again.stderr
    assert "skipped 10 messages whose results an earlier run published" in again.stderr
    assert server.creates == 3 and server.uploads == 3  # resumed, not paid again
    summary = json.loads(again.stdout.strip().splitlines()[-1])
    assert (summary["processed"], summary["results"]) == (30, 20)
    results = _results(env, 30)  # and whatever came after them within 2 s
    assert sorted(r["case_id"] for r in results) == sorted(f"case-{i}" for i in range(30))


def _published_one_group(state):
    try:
        published = json.loads(state.read_text()).get("published", {})
    except (OSError, ValueError):
        return False
    return sum(last - first + 1 for ranges in published.values()
               for first, last in ranges) >= 10
