"""Secured listeners, for real: Apache Kafka with SASL_SSL (SCRAM-SHA-512, TLS
certificates made here) and SASL_PLAINTEXT. The worker, ``produce``, ``tail``,
``replay`` and the labels reader connect with the settings the "Connect to a
secured Kafka" guide shows; a wrong password, an untrusted certificate and a
missing CA file each end a command with one line naming the setting, exit 2."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest
from support.harness import StreamEnv
from support.topics import create_topic

from guardrail._processes import free_port
from guardrail.kafka.apache import (
    SCRAM_MECHANISM,
    ApacheKafkaBroker,
    make_tls_files,
    unavailable_reason,
)

pytestmark = [pytest.mark.apache_kafka, pytest.mark.timeout(300)]

USER, PASSWORD = "guardrail", "s3cret-Scram-pw"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    folder = tmp_path_factory.mktemp("secured-kafka")
    reason = unavailable_reason() or (None if shutil.which("openssl") else "no openssl on PATH")
    if reason:
        pytest.skip(f"Apache Kafka unavailable: {reason}")
    tls = make_tls_files(folder / "tls")
    broker = ApacheKafkaBroker(workdir=folder / "kafka", scram_users={USER: PASSWORD},
                               tls=tls).start()
    yield broker, tls, folder
    broker.stop()


def _guide_config(path, bootstrap: str, protocol: str, cafile) -> None:
    """The guide's kafka.yaml (one replica here: a single broker)."""
    lines = [f"bootstrap_servers: {bootstrap}", f"security_protocol: {protocol}",
             f"sasl_mechanism: {SCRAM_MECHANISM}", f"sasl_username: {USER}"]
    if cafile is not None:
        lines.append(f"ssl_cafile: {cafile}")
    path.write_text("\n".join(lines) + "\n")


def _env(bootstrap: str, judge, tmp_path, protocol: str, cafile=None, password=PASSWORD):
    env = StreamEnv(bootstrap, judge.api_base, tmp_path)
    config = tmp_path / "kafka.yaml"
    _guide_config(config, bootstrap, protocol, cafile)
    env.env.pop("GUARDRAIL_BOOTSTRAP_SERVERS")  # the file names them, as in the guide
    env.env.update({"GUARDRAIL_CONFIG": str(config), "GUARDRAIL_SASL_PASSWORD": password})
    return env


def _cases(n: int) -> str:
    return "".join(json.dumps({"case_id": f"sec-{i}",
                               "output": "you idiot" if i % 4 == 0 else f"fine answer {i}",
                               "metadata": {"model": "m", "model_version": "v1"}}) + "\n"
                   for i in range(n))


def _tail(env: StreamEnv, topic: str, n: int) -> list[dict]:
    done = env.cli("tail", "--topic", topic, "--max", str(n), "--idle-timeout", "60",
                   timeout=120)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("protocol", ["SASL_SSL", "SASL_PLAINTEXT"])
def test_every_command_works_on_a_secured_listener(secured, thread_judge, tmp_path, protocol):
    broker, tls, _ = secured
    thread_judge.reset()
    bootstrap = broker.sasl_ssl_bootstrap if protocol == "SASL_SSL" \
        else broker.sasl_plaintext_bootstrap
    env = _env(bootstrap, thread_judge, tmp_path, protocol,
               cafile=tls.ca_pem if protocol == "SASL_SSL" else None)
    (tmp_path / "cases.jsonl").write_text(_cases(8))
    produced = env.cli("produce", "--input", str(tmp_path / "cases.jsonl"))
    assert produced.returncode == 0, produced.stderr
    worker = env.start_worker()
    try:
        results = _tail(env, env.topic("results"), 8)
        assert sorted(r["case_id"] for r in results) == sorted(f"sec-{i}" for i in range(8))
        assert sum(1 for r in results for m in r["metrics"]
                   if m["name"] == "toxicity" and m["result"][0]["verdict"] == "UNSAFE") == 2
        assert worker.poll() is None
    finally:
        env.stop_workers()
    assert worker.returncode == 0, env.logs()[-3000:]

    replayed = env.cli("replay", "--from", "2020-01-01T00:00:00Z", "--results-topic",
                       env.topic("results") + "-replay", "--quiet", timeout=120)
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout.strip().splitlines()[-1])["results"] == 8
    assert len(_tail(env, env.topic("results") + "-replay", 8)) == 8

    labels = env.topic("input") + "-labels"
    asyncio.run(_one_label(broker.bootstrap, labels))  # written on the broker's own listener
    exported = env.cli("labels", "export", "--topic", labels, "--out", "-", "--timeout", "30")
    assert exported.returncode == 0, exported.stderr
    assert [json.loads(line)["case_id"] for line in exported.stdout.splitlines()] == ["sec-0"]


async def _one_label(bootstrap: str, topic: str) -> None:
    import time

    from aiokafka import AIOKafkaProducer

    from guardrail.review import LabelRecord

    await create_topic(bootstrap, topic, 2, {"cleanup.policy": "compact"})
    record = LabelRecord(case_id="sec-0", metric="toxicity", label="unsafe", choice="agree",
                         reviewer="ana", judge_verdict="UNSAFE", judge_model="openai/test-judge",
                         rubric_version="abc", slice="unsafe", rate=1.0, labels={"model": "m"},
                         event_time_ms=int(time.time() * 1000), fields={"output": "you idiot"})
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, record.model_dump_json().encode(),
                                     key=b"sec-0|toxicity")
    finally:
        await producer.stop()


#: (what is wrong, the settings the one line must name)
REFUSALS = {
    "wrong password": ("sasl_password", "SaslAuthenticationFailed"),
    "untrusted certificate": ("ssl_cafile", "CERTIFICATE_VERIFY_FAILED"),
    "missing CA file": ("ssl_cafile", "No such file or directory"),
}


@pytest.mark.parametrize("wrong", list(REFUSALS))
@pytest.mark.parametrize("command", ["tail", "worker"])
def test_a_wrong_secret_or_certificate_is_one_line_naming_the_setting(secured, thread_judge,
                                                                     tmp_path, wrong, command):
    broker, tls, folder = secured
    cafile, password = tls.ca_pem, PASSWORD
    if wrong == "wrong password":
        password = "not-the-password"
    elif wrong == "untrusted certificate":
        cafile = make_tls_files(folder / f"other-ca-{command}").ca_pem  # another CA
    else:
        cafile = tmp_path / "no-such-ca.pem"
    env = _env(broker.sasl_ssl_bootstrap, thread_judge, tmp_path, "SASL_SSL", cafile=cafile,
               password=password)
    args = (["tail", "--topic", "anything", "--max", "1", "--idle-timeout", "1"]
            if command == "tail" else ["worker", "--web-port", str(free_port())])
    done = env.cli(*args, timeout=60)
    setting, cause = REFUSALS[wrong]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and setting in errors[0] and cause in errors[0], done.stderr
    assert "Traceback" not in done.stderr and PASSWORD not in done.stderr
