"""The streaming worker's settings groups: ``worker`` (batching, outages, stops, web
pages, stalls), ``windows`` (windowed rates and the alert rules on them) and
``sampling`` (which messages are judged, and the judge budget); part of
:class:`guardrail.config.Settings`.

Every field's docstring is its description (``use_attribute_docstrings``), read by
pydantic and printed in the generated settings reference
(:mod:`guardrail.reference.settings`).
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, Field, model_validator

from .._group_config import GROUP_CONFIG
from ..assembly.runs.settings import RunSettings
from ..assembly.sessions.settings import SessionSettings
from ..formats.settings import InputSettings
from ..kafka.registry_settings import RegistrySettings
from ..kafka.settings import KafkaSettings
from ..review.settings import ReviewSettings

__all__ = ["WorkerSettings", "WindowSettings", "AlertRule", "SamplingSettings", "SampleRule",
           "StreamGroups"]


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
    that holds every fetch for the full wait adds it to every latency). In gate mode
    the worker's input is fetched with ``gate_fetch_wait_ms`` instead."""
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


class StreamGroups(Protocol):
    """The settings groups the stream reads, each from the wing that owns it
    (:class:`guardrail.config.Settings` has them all): what
    :meth:`~guardrail.stream.processing.MessageJudge.from_settings` takes, so the
    stream never imports the settings of everything."""

    @property
    def worker(self) -> WorkerSettings: ...
    @property
    def windows(self) -> WindowSettings: ...
    @property
    def kafka(self) -> KafkaSettings: ...
    @property
    def inputs(self) -> InputSettings: ...
    @property
    def runs(self) -> RunSettings: ...
    @property
    def sessions(self) -> SessionSettings: ...
    @property
    def review(self) -> ReviewSettings: ...
    @property
    def registry(self) -> RegistrySettings: ...
