"""End to end on a real Kafka broker in Docker (testcontainers), not the embedded Tansu.

The same flow as ``test_stream.py`` against a single KRaft node of Apache Kafka
(Confluent's ``cp-kafka`` build, the image testcontainers' ``KafkaContainer``
drives): a real ``guardrail worker`` subprocess, the stand-in HTTP judge, good
cases and malformed ones. Without a reachable Docker engine the module is
skipped at once, with the reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request

import pytest
from support.harness import StreamEnv, consume, produce

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

#: cp-kafka 7.6 ships Apache Kafka 3.6; ``with_kraft()`` needs a Confluent tag >= 7.0.
KAFKA_IMAGE = os.environ.get("KAFKA_TEST_IMAGE", "confluentinc/cp-kafka:7.6.0")
N_CASES = 50


def _docker_unavailable() -> str | None:
    """Why no Docker engine can be used, or None when one answers a ping.

    The client gets a short timeout so an unreachable DOCKER_HOST fails in
    seconds; a missing socket fails immediately.
    """
    try:
        import docker
    except ImportError:
        return "the 'docker' package is not installed (pip install -e '.[dev]')"
    try:
        client = docker.from_env(timeout=5)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # DockerException, connection errors, bad DOCKER_HOST ...
        detail = " ".join(str(exc).split())[:200]
        return f"no Docker engine reachable ({type(exc).__name__}: {detail})"
    return None


def _kafka_container_class():
    try:  # testcontainers >= 4.10 moved the module; the old path warns but still works
        from testcontainers.community.kafka import KafkaContainer
    except ImportError:
        from testcontainers.kafka import KafkaContainer
    return KafkaContainer


@pytest.fixture(scope="module")
def docker_kafka():
    """Bootstrap servers of a fresh single-node KRaft Kafka container."""
    reason = _docker_unavailable()
    if reason:
        pytest.skip(reason)
    try:
        kafka_container = _kafka_container_class()
    except ImportError as exc:
        pytest.skip(f"testcontainers' Kafka module is not installed: {exc}")
    container = kafka_container(KAFKA_IMAGE).with_kraft()
    container.start(timeout=180)
    try:
        yield container.get_bootstrap_server()
    finally:
        container.stop()


def _case(i: int, output: str, model_version: str) -> bytes:
    return json.dumps({"case_id": f"case-{i}", "output": output,
                       "metadata": {"model": "m", "model_version": model_version}}).encode()


def test_worker_on_real_kafka_judges_every_case_once_and_dead_letters_bad_input(
        docker_kafka, thread_judge, tmp_path):
    thread_judge.reset()
    env = StreamEnv(docker_kafka, thread_judge.api_base, tmp_path)
    try:
        created = env.cli("produce", "--input", "/dev/null")  # creates the topics
        assert created.returncode == 0, created.stderr
        good = [(f"case-{i}".encode(),
                 _case(i, "you idiot" if i % 5 == 0 else f"a helpful answer {i}",
                       "v1" if i < N_CASES // 2 else "v2"), None)
                for i in range(N_CASES)]
        bad = [(b"bad-json", b"{not json", None),
               (b"no-output", b'{"case_id": "no-output"}', None)]
        half = N_CASES // 2
        asyncio.run(produce(env.bootstrap, env.topic("input"), good[:half] + bad + good[half:]))

        worker = env.start_worker()
        results = asyncio.run(consume(env.bootstrap, env.topic("results"), expect=N_CASES,
                                      timeout=240, settle=3))
        dlq = asyncio.run(consume(env.bootstrap, env.topic("dlq"), expect=len(bad),
                                  timeout=60, settle=1))

        # Exactly one result per good case: no loss, no duplicate.
        assert sorted(r["case_id"] for r in results) == sorted(
            f"case-{i}" for i in range(N_CASES)), env.logs()[-3000:]
        assert len({(r["source"]["partition"], r["source"]["offset"]) for r in results}) \
            == N_CASES
        assert all(r["source"]["topic"] == env.topic("input") for r in results)
        toxicity = {r["case_id"]: next(m for m in r["metrics"] if m["name"] == "toxicity")
                    for r in results}
        unsafe = {c for c, m in toxicity.items() if m["result"][0]["verdict"] == "UNSAFE"}
        assert unsafe == {f"case-{i}" for i in range(0, N_CASES, 5)}
        assert all(m["error"] is None for m in toxicity.values())

        assert len(dlq) == len(bad), dlq
        reasons = " | ".join(d["reason"] for d in dlq)
        assert "not valid JSON" in reasons and "output is required" in reasons, reasons
        assert all(d["source"]["topic"] == env.topic("input") for d in dlq)

        assert worker.poll() is None  # bad input never stops the worker
        with urllib.request.urlopen(f"http://127.0.0.1:{worker.web_port}/health",
                                    timeout=5) as response:
            assert json.loads(response.read())["status"] == "ok"
    finally:
        env.stop_workers()
