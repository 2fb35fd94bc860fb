"""Topic admin against the embedded broker, client options, and the embedded broker itself."""

import socket
import ssl
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from guardrail.errors import ConfigError
from guardrail.kafka import (EmbeddedBroker, TopicMismatch, check_reachable, client_options,
                             ensure_topics, resolve_bootstrap, topic_plan)
from guardrail.kafka.topics import partition_counts
from guardrail.config.settings import load_settings

pytestmark = pytest.mark.kafka


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def _settings(**overrides):
    return load_settings(environ={}, **overrides)


@pytest.fixture
def topic_settings(kafka_bootstrap):
    """Settings whose five topics are new on the shared session broker."""
    return _settings(bootstrap_servers=kafka_bootstrap, topic_partitions=3,
                     input_topic=_unique("in"), results_topic=_unique("results"),
                     dlq_topic=_unique("dlq"), alerts_topic=_unique("alerts"),
                     judgments_topic=_unique("judgments"))


async def _counts(settings, topics):
    admin = AIOKafkaAdminClient(**client_options(settings.kafka))
    await admin.start()
    try:
        return await partition_counts(admin, topics)
    finally:
        await admin.close()


# --- ensure_topics -------------------------------------------------------------------


def test_topic_plan_covers_every_topic_with_the_configured_count(topic_settings):
    plan = topic_plan(topic_settings.kafka)
    s = topic_settings
    assert plan == {s.kafka.input_topic: 3, s.kafka.results_topic: 3, s.kafka.dlq_topic: 3,
                    s.kafka.alerts_topic: 3, s.kafka.judgments_topic: 3}


async def test_ensure_topics_creates_missing_topics_with_planned_counts(topic_settings):
    plan = topic_plan(topic_settings.kafka)
    assert set((await _counts(topic_settings, list(plan))).values()) == {None}
    created = await ensure_topics(topic_settings.kafka)
    assert created == plan
    assert await _counts(topic_settings, list(plan)) == plan


async def test_ensure_topics_is_idempotent(topic_settings):
    first = await ensure_topics(topic_settings.kafka)
    second = await ensure_topics(topic_settings.kafka)
    assert first == second == topic_plan(topic_settings.kafka)


async def test_ensure_topics_with_a_custom_plan(topic_settings):
    plan = {_unique("one"): 1, _unique("four"): 4}
    assert await ensure_topics(topic_settings.kafka, plan) == plan
    assert await _counts(topic_settings, list(plan)) == plan


async def test_existing_topic_with_another_count_is_a_clear_error(topic_settings):
    name = _unique("mismatch")
    assert await ensure_topics(topic_settings.kafka, {name: 3}) == {name: 3}
    with pytest.raises(TopicMismatch) as caught:
        await ensure_topics(topic_settings.kafka, {name: 2})
    message = str(caught.value)
    assert name in message
    assert "3" in message and "2" in message
    assert isinstance(caught.value, ConfigError)
    # Nothing was changed: the topic keeps its partitions.
    assert await _counts(topic_settings, [name]) == {name: 3}


async def test_mismatch_only_for_strict_topics(topic_settings):
    loose, strict = _unique("loose"), _unique("strict")
    await ensure_topics(topic_settings.kafka, {loose: 3, strict: 2})
    have = await ensure_topics(topic_settings.kafka, {loose: 2, strict: 2},
                               strict=frozenset({strict}))
    assert have == {loose: 3, strict: 2}
    with pytest.raises(TopicMismatch, match=loose):
        await ensure_topics(topic_settings.kafka, {loose: 2, strict: 2})


async def test_partition_counts_does_not_create_topics(topic_settings):
    name = _unique("absent")
    assert await _counts(topic_settings, [name]) == {name: None}
    assert await _counts(topic_settings, [name]) == {name: None}


# --- client options ------------------------------------------------------------------


def test_default_client_options_are_plaintext_on_the_embedded_port():
    settings = _settings()
    assert resolve_bootstrap(settings.kafka) == "127.0.0.1:9092"
    assert client_options(settings.kafka) == {"bootstrap_servers": "127.0.0.1:9092",
                                        "security_protocol": "PLAINTEXT"}


def test_bootstrap_servers_setting_wins():
    settings = _settings(bootstrap_servers="kafka-1:9093,kafka-2:9093")
    assert resolve_bootstrap(settings.kafka) == "kafka-1:9093,kafka-2:9093"
    assert client_options(settings.kafka)["bootstrap_servers"] == "kafka-1:9093,kafka-2:9093"


def test_sasl_ssl_passes_credentials_and_an_ssl_context():
    settings = _settings(bootstrap_servers="broker:9094", security_protocol="SASL_SSL",
                         sasl_mechanism="SCRAM-SHA-512", sasl_username="guardrail",
                         sasl_password="s3cret-pass")
    options = client_options(settings.kafka)
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert options["sasl_plain_username"] == "guardrail"
    assert options["sasl_plain_password"] == "s3cret-pass"
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert options["ssl_context"].verify_mode == ssl.CERT_REQUIRED


def test_sasl_plaintext_has_no_ssl_context():
    options = client_options(_settings(security_protocol="SASL_PLAINTEXT",
                                       sasl_username="u", sasl_password="p").kafka)
    assert options["sasl_mechanism"] == "PLAIN"
    assert "ssl_context" not in options


def test_ssl_without_sasl_has_a_context_and_no_credentials():
    options = client_options(_settings(security_protocol="SSL").kafka)
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert not any(key.startswith("sasl") for key in options)


@pytest.mark.parametrize("credentials", [{}, {"sasl_username": "u"}, {"sasl_password": "p"},
                                         {"sasl_username": "", "sasl_password": "p"}])
@pytest.mark.parametrize("protocol", ["SASL_SSL", "SASL_PLAINTEXT"])
def test_sasl_without_credentials_is_a_config_error(protocol, credentials):
    settings = _settings(security_protocol=protocol, **credentials)
    with pytest.raises(ConfigError, match="sasl_username and sasl_password"):
        client_options(settings.kafka)


# --- the embedded broker ---------------------------------------------------------------


def _occupied_port(listen: bool) -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    if listen:
        sock.listen()
    return sock


def test_embedded_broker_refuses_a_port_in_use():
    with _occupied_port(listen=True) as sock:
        port = sock.getsockname()[1]
        broker = EmbeddedBroker(port=port)
        try:
            with pytest.raises(ConfigError) as caught:
                broker.start(timeout=10)
        finally:
            broker.stop()
    assert str(port) in str(caught.value)
    assert "in use" in str(caught.value)
    assert broker.process is None


def test_embedded_broker_refuses_a_bound_port_with_a_clear_message(kafka_bootstrap):
    # kafka_bootstrap: only so this skips where the broker binary is unavailable.
    with _occupied_port(listen=False) as sock:
        port = sock.getsockname()[1]
        broker = EmbeddedBroker(port=port)
        try:
            with pytest.raises(ConfigError) as caught:
                broker.start(timeout=10)
        finally:
            broker.stop()
    assert str(port) in str(caught.value)
    assert "in use" in str(caught.value)


def test_embedded_broker_bootstrap_address():
    assert EmbeddedBroker(port=19092).bootstrap == "127.0.0.1:19092"
    assert EmbeddedBroker().port > 0


def _closed_port() -> int:
    from guardrail._processes import free_port

    return free_port()  # bound and released: nothing listens there


async def test_check_reachable_passes_on_a_live_broker(kafka_bootstrap):
    await check_reachable(_settings(bootstrap_servers=kafka_bootstrap).kafka)


async def test_an_unreachable_broker_is_one_config_error_line_and_leaves_no_client_open(
        recwarn):
    import gc

    from guardrail.kafka.io import tail_records

    # Garbage of earlier tests in this process (an event loop a test left
    # unclosed) would warn at this test's collection: collected first.
    gc.collect()
    recwarn.clear()
    address = f"127.0.0.1:{_closed_port()}"
    kafka = _settings(bootstrap_servers=address).kafka
    with pytest.raises(ConfigError) as caught:
        await ensure_topics(kafka)  # the worker's and produce's first call
    with pytest.raises(ConfigError):
        async for _ in tail_records(kafka, "t", from_beginning=True, idle_timeout=1, limit=1):
            pass
    message = str(caught.value)
    assert message.startswith(f"cannot reach Kafka at {address} (") and "\n" not in message
    assert "check bootstrap_servers (GUARDRAIL_BOOTSTRAP_SERVERS)" in message
    assert "guardrail broker" not in message  # an address was configured: no embedded hint
    gc.collect()
    assert [str(w.message) for w in recwarn if issubclass(w.category, ResourceWarning)] == []


async def test_the_embedded_default_unreachable_says_how_to_start_it(monkeypatch):
    import guardrail.kafka.broker

    port = _closed_port()
    monkeypatch.setattr(guardrail.kafka.broker, "DEFAULT_PORT", port)
    with pytest.raises(ConfigError) as caught:
        await check_reachable(_settings().kafka)  # bootstrap_servers unset
    assert str(caught.value).startswith(f"cannot reach the embedded Kafka broker at "
                                        f"127.0.0.1:{port} (")
    assert str(caught.value).endswith("; start it with: guardrail broker")


async def test_a_broker_that_never_answers_is_given_bootstrap_timeout():
    with _occupied_port(listen=True) as sock:  # accepts, never answers
        address = f"127.0.0.1:{sock.getsockname()[1]}"
        with pytest.raises(ConfigError, match=r"\(no answer within 0\.5s\)"):
            await check_reachable(_settings(bootstrap_servers=address,
                                            bootstrap_timeout=0.5).kafka)


def test_a_missing_certificate_file_is_one_clear_error_naming_the_setting(tmp_path):
    from guardrail.errors import ConfigError
    from guardrail.kafka.clients import client_options

    missing = tmp_path / "ca.pem"
    settings = load_settings(environ={}, security_protocol="SSL", ssl_cafile=str(missing))
    with pytest.raises(ConfigError, match=r"ssl_cafile .*ca\.pem: No such file"):
        client_options(settings.kafka)
    not_a_cert = tmp_path / "client.pem"
    not_a_cert.write_text("not a certificate")
    settings = load_settings(environ={}, security_protocol="SSL", ssl_certfile=str(not_a_cert))
    with pytest.raises(ConfigError, match="ssl_certfile"):
        client_options(settings.kafka)


# --- new topics, as every broker knows them ---------------------------------------------


class _Brokers:
    """An admin client of three brokers; broker 3 learns the topic on its third answer
    and broker 2 does not answer at all (it is down)."""

    def __init__(self, topic: str) -> None:
        self.topic, self.asked = topic, {1: 0, 2: 0, 3: 0}
        nodes = [type("Broker", (), {"nodeId": n})() for n in (1, 2, 3)]
        self._client = type("Client", (), {"cluster": type("Cluster", (), {
            "brokers": staticmethod(lambda: nodes)})()})()

    async def _send_request(self, request, node_id=None):
        from aiokafka.errors import NodeNotReadyError
        self.asked[node_id] += 1
        if node_id == 2:
            raise NodeNotReadyError("broker 2 is down")
        known = node_id == 1 or self.asked[3] >= 3
        topic = {"topic": self.topic, "error_code": 0 if known else 3,
                 "partitions": [{}, {}] if known else []}
        return type("Response", (), {"to_object": lambda _: {"topics": [topic]}})()


async def test_new_topics_count_as_created_once_every_broker_answering_lists_them():
    from guardrail.kafka.topics import _visible_counts
    brokers = _Brokers("in-new")
    assert await _visible_counts(brokers, ["in-new"]) == {"in-new": 2}
    assert brokers.asked[3] == 3  # not before the last broker to learn it did


async def test_a_broker_still_ignorant_of_a_topic_after_the_wait_leaves_the_count_of_one_that_knows():
    from guardrail.kafka.topics import _visible_counts
    brokers = _Brokers("in-new")
    brokers.asked[3] = -10_000  # learns it far too late
    assert await _visible_counts(brokers, ["in-new"], timeout=0.3) == {"in-new": 2}
