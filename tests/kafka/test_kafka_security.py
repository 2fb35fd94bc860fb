"""Secured listeners, for real: Apache Kafka with SASL_SSL (SCRAM-SHA-512, TLS
certificates made here) and SASL_PLAINTEXT. The worker, ``produce``, ``tail``,
``replay`` and the labels reader connect with the settings the "Connect to a
secured Kafka" guide shows; a wrong password, an untrusted certificate and a
missing CA file each end a command with one line naming the setting, exit 2."""

from __future__ import annotations

import asyncio
import json
import shutil
import urllib.request

import bcrypt
import pytest
from support.harness import StreamEnv, poll, produce

from guardrail._processes import free_port
from guardrail.kafka.apache import (
    SCRAM_MECHANISM,
    ApacheKafkaBroker,
    make_tls_files,
    unavailable_reason,
)
from guardrail.review import LabelRecord, ReviewItem

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


def _review_on(env: StreamEnv, tmp_path) -> tuple[str, str]:
    """Every result to the review queue; (review topic, labels topic)."""
    users = tmp_path / "users"
    users.write_text("ana:" + bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode() + "\n")
    topics = env.topic("input") + "-review", env.topic("input") + "-labels"
    env.env.update({"GUARDRAIL_REVIEW_USERS_FILE": str(users),
                    "GUARDRAIL_REVIEW_TOPIC": topics[0], "GUARDRAIL_LABELS_TOPIC": topics[1],
                    "GUARDRAIL_REVIEW_RATE_SAFE": "1.0", "GUARDRAIL_REVIEW_RATE_UNSAFE": "1.0"})
    return topics


def _reviewed(port: int) -> int:
    """Labels the worker's review followers have read, over its agreement rows."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/agreement?metric=toxicity",
                                    timeout=5) as response:
            return sum(row["reviewed"] for row in json.loads(response.read())["agreement"])
    except OSError:
        return 0


@pytest.mark.parametrize("protocol", ["SASL_SSL", "SASL_PLAINTEXT"])
def test_every_command_works_on_a_secured_listener(secured, thread_judge, tmp_path, protocol):
    broker, tls, _ = secured
    thread_judge.reset()
    bootstrap = broker.sasl_ssl_bootstrap if protocol == "SASL_SSL" \
        else broker.sasl_plaintext_bootstrap
    env = _env(bootstrap, thread_judge, tmp_path, protocol,
               cafile=tls.ca_pem if protocol == "SASL_SSL" else None)
    review_topic, labels_topic = _review_on(env, tmp_path)
    (tmp_path / "cases.jsonl").write_text(_cases(8))
    produced = env.cli("produce", "--input", str(tmp_path / "cases.jsonl"))
    assert produced.returncode == 0, produced.stderr
    worker = env.start_worker()
    try:
        results = _tail(env, env.topic("results"), 8)
        assert sorted(r["case_id"] for r in results) == sorted(f"sec-{i}" for i in range(8))
        assert sum(1 for r in results for m in r["metrics"]
                   if m["name"] == "toxicity" and m["result"][0]["verdict"] == "UNSAFE") == 2
        # A reviewer agrees with every toxicity verdict; the labels are written on
        # the broker's own listener, and the worker's label reader reads them over
        # the secured one.
        items = [ReviewItem.model_validate(i) for i in _tail(env, review_topic, 8)]
        labels = [LabelRecord.from_choice(item, "toxicity", "agree", reviewer="ana")
                  for item in items]
        asyncio.run(produce(broker.bootstrap, labels_topic,
                            [(label.key(), label.encode(), None) for label in labels]))
        assert poll(lambda: _reviewed(worker.web_port) == 8, 60), env.logs()[-3000:]
        assert worker.poll() is None
    finally:
        env.stop_workers()
    assert worker.returncode == 0, env.logs()[-3000:]

    replayed = env.cli("replay", "--from", "2020-01-01T00:00:00Z", "--results-topic",
                       env.topic("results") + "-replay", "--quiet", timeout=120)
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout.strip().splitlines()[-1])["results"] == 8
    assert len(_tail(env, env.topic("results") + "-replay", 8)) == 8

    exported = env.cli("labels", "export", "--topic", labels_topic, "--out", "-",
                       "--timeout", "30")
    assert exported.returncode == 0, exported.stderr
    assert sorted(json.loads(line)["case_id"] for line in exported.stdout.splitlines()) == \
        sorted(f"sec-{i}" for i in range(8))


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
