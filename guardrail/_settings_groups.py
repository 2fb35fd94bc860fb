"""The settings groups of the judge, the evaluation and the streaming worker, with
the alert and sample rules they hold; :mod:`guardrail.config.settings` gathers them (and
the groups kept beside their own code) into :class:`~guardrail.config.settings.Settings`.

Every field's docstring is its description (``use_attribute_docstrings``), read by
pydantic and printed in the generated settings reference
(:mod:`guardrail.reference.settings`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from .judging.models import RedteamConfig

__all__ = ["JudgeSettings", "EvaluationSettings", "KafkaSettings", "WorkerSettings",
           "WindowSettings", "AlertRule", "SamplingSettings", "SampleRule", "GROUP_CONFIG"]

#: The model config of every settings group: frozen, unknown keys refused, and
#: each field's docstring kept as its description.
GROUP_CONFIG = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class AlertRule(BaseModel):
    """When to alert on one metric's windowed unsafe rate. A window is checked each
    time an UNSAFE verdict is counted in it; a rule may fire for its absolute
    limit, for a regression against a baseline, or for both."""

    model_config = GROUP_CONFIG

    metric: str = "*"
    """The metric this rule is for, by name; ``*``: every metric without a rule of its own."""
    max_unsafe_rate: float | None = Field(default=0.2, ge=0, le=1)
    """Absolute rule: alert when a window's unsafe rate (UNSAFE verdicts over judged
    messages) is above this share, 0 to 1. Null: no absolute rule."""
    min_judgments: int = Field(default=20, ge=1)
    """Fewest judged messages a window needs before the rule may fire; a baseline
    needs as many before the regression test compares with it."""
    baseline_windows: int = Field(default=3, ge=0)
    """Regression rule: compare the window with the previous K windows of the same
    metric and group, pooled (0: no comparison with earlier windows). With
    ``baseline_version``, how many earlier windows of that version join its
    current one."""
    baseline_version: str | None = None
    """Regression rule against a version: compare each other version of a group with
    the group at this value of ``version_label`` (messages of this version itself
    fall back to ``baseline_windows``). Null: no version baseline."""
    significance: float = Field(default=0.01, gt=0, lt=0.5)
    """Significance level of the regression test: a regression alerts when a one-sided
    two-proportion z-test of the window against its baseline gives p below this."""
    cooldown_seconds: float = Field(default=900, ge=0)
    """Seconds after an alert during which the rule does not alert again for the same
    metric and group (version included): one incident, one alert. Agreement alerts
    of the metric use it too."""


class JudgeSettings(BaseModel):
    """The LLM judge: which model, how to reach it, how to ask it and what it costs."""

    model_config = GROUP_CONFIG

    model: str = "openai/gpt-4o-mini"
    """The judge model as a litellm model string, provider prefix first
    (``openai/gpt-4o-mini``, ``anthropic/…``, ``ollama/…``, ``hosted_vllm/…``)."""
    api_base: str | None = None
    """Base URL of the judge's API, for a self-hosted or proxied judge
    (``http://127.0.0.1:8000/v1``). Unset: the provider's own endpoint."""
    api_key: SecretStr | None = None
    """API key sent to the judge. Secret: never printed. Unset: through litellm the
    provider's usual variable (such as ``OPENAI_API_KEY``) applies; the direct HTTP
    transport sends no key."""
    timeout: float = Field(default=30.0, gt=0)
    """Seconds one judge call may take; a call that takes longer fails as transient
    and is retried."""
    max_retries: int = Field(default=3, ge=0)
    """Retries of a call that failed on the judge's side (timeout, lost connection,
    429, 5xx), with growing, jittered waits; 0: one attempt. A refused key or an
    unknown model or endpoint is never retried: it stops the command."""
    concurrency: int = Field(default=16, ge=1)
    """Most calls this judge has in flight at once in one process, across all cases
    and metrics (a cascade's escalation judge has as many of its own). With
    ``judge_protocol: moderation``, the most requests in flight, each carrying up
    to ``judge_batch_size`` messages."""
    batch_size: int = Field(default=32, ge=1)
    """With ``judge_protocol: moderation``: most messages sent in one request (the
    endpoint takes a list of inputs); messages judged at the same time share a
    request and each gets its own result back. 1: one request per message. Other
    protocols send one request per call whatever this is."""
    max_tokens: int = Field(default=400, ge=16)
    """Longest answer in tokens for one metric; a call that judges several metrics at
    once (``judge_calls: per_message``) may use this much per metric."""
    temperature: float = 0.0
    """Sampling temperature of every judge call; 0 keeps answers as repeatable as the
    provider allows."""
    structured_output: bool = True
    """Send the answer's JSON schema as a strict ``response_format``, so providers
    that honour it return valid JSON; false: only the prompt asks for JSON."""
    logprobs: bool = True
    """Ask for token log-probabilities and decide each verdict from P(UNSAFE) against
    ``verdict_thresholds``. False, or a provider or server without them: the
    judge's sampled verdict stands. They cost no tokens."""
    transport: Literal["auto", "litellm", "http"] = "auto"
    """How calls are sent. ``auto``: plain HTTP to a self-hosted OpenAI-compatible
    judge (an ``openai/`` or ``hosted_vllm/`` model with ``judge_api_base``), litellm
    otherwise; ``litellm`` or ``http`` forces one (``http`` needs such a model and
    ``judge_api_base``)."""
    input_cost_per_token: float | None = None
    """USD per input token of the judge model, for a model litellm's cost map lacks
    (0 for a free self-hosted one). Used only together with
    ``judge_output_cost_per_token``: with both set they replace the cost map's
    prices. Unset: the cost map's price, and a model it lacks has an unknown cost,
    never $0."""
    output_cost_per_token: float | None = None
    """USD per output token of the judge model; see ``judge_input_cost_per_token``.
    Never applied to the cascade's escalation judge."""
    protocol: Literal["rubric", "llama_guard", "yes_no", "qwen3guard", "policy",
                      "moderation"] = "rubric"
    """How the judge is asked and answered: ``rubric`` (the rubric prompt, a JSON
    verdict), or a guard model's own format: ``llama_guard`` (Llama Guard 3/4),
    ``yes_no`` (ShieldGemma, Granite Guardian), ``qwen3guard``, ``policy``
    (gpt-oss-safeguard and other written-policy models) or ``moderation`` (an
    OpenAI-compatible ``/v1/moderations`` endpoint). A metric a guard does not
    cover gets an error naming it, never SAFE."""
    protocol_options: dict[str, Any] = Field(default_factory=dict)
    """Options of a guard protocol, e.g. ``{"flavor": "granite3.3", "policy_via":
    "system"}`` for ``yes_no``; empty: the protocol's defaults."""
    guard_categories: dict[str, Any] | None = None
    """Changes to the shipped category map of the protocol
    (``rubrics/guards/<protocol>.yaml``), in its keys: e.g. ``{"metrics":
    {"toxicity": ["S1", "S10"], "bias": null}}`` (metric → the guard's categories;
    ``null`` removes a metric). Unset: the shipped map."""
    qwen3guard_controversial: Literal["unsafe", "safe"] = "unsafe"
    """What Qwen3Guard's ``Controversial`` (and other guards' unsure answers) counts
    as."""

    def calls_in_flight(self, protocol: str | None = None) -> int:
        """Most judge calls let in at once with ``protocol`` (this judge's by default):
        ``concurrency``, times ``batch_size`` for ``moderation``, whose requests carry
        up to that many calls each (fewer calls in flight would never fill one)."""
        shared = (protocol or self.protocol) == "moderation"
        return self.concurrency * (self.batch_size if shared else 1)


class EvaluationSettings(BaseModel):
    """What is judged and how (rubrics, redteam defaults, calls, thresholds), and
    what is remembered (the judgment cache)."""

    model_config = GROUP_CONFIG

    rubric_dir: Path | None = None
    """Folder of rubric files (YAML or JSON, one metric each) that add metrics to the
    shipped ones or replace them by name. Unset: the shipped rubrics only."""
    redteam: RedteamConfig = RedteamConfig()
    """The deployment's ``redteam`` block: ``scoring_mode`` (``binary_yes_no`` or
    ``scale_1_5``), ``include_reasoning``, ``include_probability`` and ``metrics``
    (rubrics inline, added or replacing by name). A message's own block wins key
    by key, its metrics merged on top."""
    cache_path: Path | None = None
    """SQLite file of the judgment cache, for every command: a text judged once is not
    paid for again. Unset: an in-memory cache per process, except for ``replay``,
    which keeps ``~/.cache/guardrail/judgments.sqlite``."""
    judge_calls: Literal["per_message", "per_metric"] = "per_message"
    """``per_message``: one judge call per message answers every metric (one prompt
    with all rubrics); ``per_metric``: one call per metric. Each metric gets its
    own result either way."""
    verdict_thresholds: dict[str, float] = Field(default_factory=dict)
    """Per metric name, the P(UNSAFE) in (0, 1] from which its verdict is UNSAFE;
    other metrics use 0.5. Needs log-probabilities (``judge_logprobs``) and
    applies to cached judgments too. ``guardrail calibrate`` recommends them."""

    @model_validator(mode="after")
    def _thresholds_are_probabilities(self) -> EvaluationSettings:
        for metric, threshold in self.verdict_thresholds.items():
            if not 0.0 < threshold <= 1.0:
                raise ValueError(f"verdict_thresholds.{metric} must be in (0, 1], got {threshold}")
        return self


class KafkaSettings(BaseModel):
    """Where the streams are, and how to reach them."""

    model_config = GROUP_CONFIG

    bootstrap_servers: str | None = None
    """Kafka bootstrap servers, ``host:port`` pairs separated by commas. Unset: the
    embedded development broker at ``127.0.0.1:9092`` (``guardrail broker``)."""
    bootstrap_timeout: float = Field(default=10.0, gt=0)
    """Seconds a command waits for a bootstrap server to answer before it gives up
    with one line (exit 2) instead of retrying on."""
    input_topic: str = "model-outputs"
    """Topic of the model outputs the worker judges; ``produce`` and ``replay``
    default to it."""
    results_topic: str = "redteam-results"
    """Topic of the results: one record per judged message, keyed by its case_id."""
    dlq_topic: str = "model-outputs.dlq"
    """Dead-letter topic: one record per input that cannot be read (not JSON, wrong
    shape, too large …), with the reason and the original bytes."""
    alerts_topic: str = "redteam-alerts"
    """Topic every alert (regression, agreement, budget) is written to, besides the
    log and the webhook."""
    judgments_topic: str = "guardrail-judgments"
    """The workers' internal topic of judgment events, one per metric of a message,
    keyed by metric and group without its version; the window counts read it."""
    topic_partitions: int = Field(default=2, ge=1)
    """Partitions of every topic guardrail creates. An existing topic of the worker's
    with another count stops it at start, naming the topic."""
    topic_replication: int | None = Field(default=None, ge=1)
    """Replication factor of the topics guardrail and its worker create (changelogs
    and internal topics included); at most the number of brokers. Unset: ``min(3,
    brokers in the cluster)``. 1 on a cluster of several brokers is warned about at
    start: a topic with one replica is lost, or stalls, while its broker is down."""
    producer_idempotence: bool | None = None
    """Idempotent producers (no duplicate from a producer's own retries) for every
    record the worker writes, beside ``acks=all``. Unset: on where the brokers
    support it (Apache Kafka; the embedded broker does not)."""
    app_id: str = "guardrail"
    """The worker application's name: its consumer group, the prefix of its table
    changelog topics and the name of its local data folder. Workers with one app_id
    share the work; ``guardrail rates`` reads that app's windows."""
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    """How clients talk to the brokers: plain, TLS (``SSL``), SASL authentication
    without TLS (``SASL_PLAINTEXT``) or with it (``SASL_SSL``)."""
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "PLAIN"
    """The SASL mechanism, with the ``SASL_*`` protocols."""
    sasl_username: str | None = None
    """SASL user name; the ``SASL_*`` protocols need it and ``sasl_password``."""
    sasl_password: SecretStr | None = None
    """SASL password. Secret: never printed."""
    ssl_cafile: Path | None = None
    """CA certificates (PEM) that verify the brokers with ``SSL`` or ``SASL_SSL``.
    Unset: the system's trusted CAs."""
    ssl_certfile: Path | None = None
    """Client certificate (PEM) for mutual TLS. Unset: none is presented."""
    ssl_keyfile: Path | None = None
    """Private key of ``ssl_certfile``, when the certificate file does not hold it."""


class WorkerSettings(BaseModel):
    """How the streaming worker batches, waits out outages, stops, serves pages and when
    it counts as stalled."""

    model_config = GROUP_CONFIG

    batch_size: int = Field(default=64, ge=1)
    """Most input messages in one batch: a batch is judged concurrently and acked once
    its results are published (``replay`` reads this many records at a time)."""
    batch_within: float = Field(default=0.05, gt=0)
    """Seconds the worker waits to fill a batch before it judges a smaller one."""
    assembly_bundles: bool = True
    """Send a batch's spans of agent runs and turns of sessions to assembly bundled,
    one record per partition of the internal topic (a fraction of the records).
    ``false`` sends one record per span or turn, as releases before bundles did: set
    it while workers of such a release still assemble (they skip bundles), see the
    upgrade guide."""
    max_message_bytes: int = Field(default=1_000_000, ge=1024)
    """Largest input record in bytes; a larger one goes to the dead-letter topic
    unjudged."""
    consumer_fetch_wait_ms: int = Field(default=100, ge=1, le=30_000)
    """Milliseconds a consumer fetch waits for data (Faust's own is 1500 ms; a broker
    that holds every fetch for the full wait adds it to every latency)."""
    outage_policy: Literal["pause", "record"] = "pause"
    """On a judge outage (see ``outage_threshold``): ``pause`` holds the batch unacked
    and retries it with backoff, ``/health`` answering 503 meanwhile; ``record``
    publishes the failed judgments as error results and goes on."""
    outage_max_backoff: float = Field(default=60.0, gt=0)
    """Longest wait in seconds between two tries of a batch held in an outage; the
    wait starts at 1 s and doubles."""
    outage_threshold: float = Field(default=0.5, gt=0, le=1)
    """Share of a batch's judgments failing on the judge's side (unreachable, 429,
    5xx, timeouts), with no call succeeding meanwhile, from which the batch counts
    as an outage and waits."""
    stop_deadline_seconds: float = Field(default=45.0, gt=0)
    """Hard limit in seconds on a stop (the broker gone, say): past it the process
    exits at once. Nothing unfinished was acked, so those messages are redelivered."""
    stall_seconds: float = Field(default=120.0, gt=0)
    """Seconds a partition the worker holds may keep lag without its committed offset
    moving before it counts as stalled (``guardrail_stalled_partitions``, a WARNING
    line, ``/health``); not while the judge is paused on an outage, which explains it."""
    kafka_trouble_seconds: float = Field(default=30.0, gt=0)
    """Seconds of each Kafka trouble report: an interval in which the Kafka client
    failed (brokers out of reach, produce or commit errors) gives one WARNING naming
    the brokers and errors (repeated client lines are summed into it),
    ``guardrail_kafka_trouble`` 1 and ``/health``'s ``kafka``; a whole interval
    without failures clears them."""
    web_port: int = Field(default=6066, ge=1, le=65535)
    """Port of the worker's web pages (``/health``, ``/metrics``, ``/rates``,
    ``/dashboard``, ``/review`` and, with the review queue on, ``/agreement``)."""
    web_host: str = "127.0.0.1"
    """Address the web pages listen on: ``127.0.0.1`` keeps them on this machine,
    ``0.0.0.0`` serves every interface (in a container, say)."""


class WindowSettings(BaseModel):
    """Windowed unsafe rates per metric and group, and the alerts on them."""

    model_config = GROUP_CONFIG

    window_seconds: float = Field(default=300.0, gt=0)
    """Length in seconds of the tumbling windows that judgments are counted in, by
    event time (the agreement figures use the same windows)."""
    window_expires_seconds: float = Field(default=3600.0, gt=0)
    """Seconds a window's counts are kept; older windows leave ``/rates`` and can no
    longer serve as baselines."""
    group_labels: tuple[str, ...] = ("model", "model_version", "prompt_version")
    """Metadata labels whose values make a message's group: windows, rates and alerts
    are per metric and group (a missing label counts as ``-``)."""
    version_label: str = "model_version"
    """The group label that names a version: groups that differ only in it are
    versions of one group, compared on the dashboard and by ``baseline_version``
    rules; ``first_per_version`` sample rules count per value of it."""
    alert_rules: tuple[AlertRule, ...] = (AlertRule(),)
    """Alert rules (fields below). A rule naming the metric wins over the ``*`` rule;
    a metric with neither never alerts. Empty: no rate alerts."""
    alert_webhook_url: str | None = None
    """URL every alert is POSTed to as JSON (retried with backoff). Unset: alerts go to
    the log and the alerts topic only."""
    alert_webhook_timeout: float = Field(default=5.0, gt=0)
    """Seconds one webhook POST may take before it counts as failed."""
    alert_examples: int = Field(default=3, ge=0, le=20)
    """Case ids (with evidence spans, never the outputs) of UNSAFE verdicts a window
    keeps to show in its alerts, at most 20 (agreement alerts list as many
    disagreements); 0: none."""
    metrics_max_groups: int = Field(default=50, ge=0)
    """Groups (of the labels model, model_version and prompt_version) that get their
    own ``/metrics`` series in one worker; later ones are counted as ``other``."""
    judgment_bundles: bool = True
    """Write the judgment events of a batch bundled, one judgments-topic record per
    key and window (a fraction of the records). ``false`` writes one record per
    event, as releases before bundles did: set it while workers of such a release
    still count windows (they skip bundles), see the upgrade guide."""


class SampleRule(BaseModel):
    """Which share of the messages whose metadata match is judged (first match wins).

    ``{"match": {"model_version": "v2"}, "rate": 1.0}``: every v2 message;
    ``{"first_per_version": 200}``: the first 200 messages of every version in
    full (see :mod:`guardrail.stream.sampling` for what "first" means). A rule
    has exactly one of ``rate`` and ``first_per_version``."""

    model_config = GROUP_CONFIG

    match: dict[str, str] = Field(default_factory=dict)
    """Metadata labels a message must all have, with these values (empty: every message)."""
    rate: float | None = Field(default=None, ge=0, le=1)
    """Share of the matching messages judged, 0 to 1, drawn as ``sample_rate`` draws."""
    first_per_version: int | None = Field(default=None, ge=1)
    """Judge the first N matching messages of every version in full, then let the later
    rules or ``sample_rate`` decide. Counted per input partition (the first
    N / ``topic_partitions``, rounded up, of each); a message without the version
    label skips the rule."""

    @model_validator(mode="after")
    def _one_kind(self) -> SampleRule:
        if (self.rate is None) == (self.first_per_version is None):
            raise ValueError("a sample rule needs exactly one of 'rate' and 'first_per_version'")
        return self


class SamplingSettings(BaseModel):
    """Which messages the worker judges, and the judge budget that can lower that share."""

    model_config = GROUP_CONFIG

    sample_rate: float = Field(default=1.0, ge=0, le=1)
    """Share of valid messages judged, 0 to 1, drawn by a keyed hash of the case_id,
    so redeliveries and replays decide alike and a lower rate judges a subset of a
    higher one. The rest are counted as seen, with no judge call and no result."""
    sample_rules: tuple[SampleRule, ...] = ()
    """Rules tried in order before ``sample_rate`` (fields below); the first whose
    ``match`` fits a message decides. Empty: ``sample_rate`` for every message."""
    budget_usd_per_hour: float | None = Field(default=None, gt=0)
    """Cap in USD on this worker's judge spend over the last hour (sliding; each
    worker has its own). Near it the effective sample rate halves, step by step;
    judging never stops. Needs the judge's price, or the worker refuses to start.
    Unset: no USD cap."""
    budget_tokens_per_hour: int | None = Field(default=None, gt=0)
    """The same cap in judge tokens (input plus output); needs no price. Unset: no
    token cap."""
    budget_min_sample_rate: float = Field(default=0.01, gt=0, le=1)
    """The budget never lowers the effective sample rate below this; a ``sample_rate``
    already below it is not lowered at all."""
    budget_step_seconds: float = Field(default=30.0, gt=0)
    """Shortest time in seconds between two steps of the effective rate, down (halved)
    or up (doubled, back to ``sample_rate`` at most)."""
