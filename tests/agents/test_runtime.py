"""WorkerRuntime.close: what it closes, in which order, once; and, on the real
worker, that an alert raised just before SIGTERM still reaches the webhook."""

import asyncio
import json
import logging
import signal
import subprocess
import time
from types import SimpleNamespace

import pytest
from support.harness import StreamEnv, WebhookSink, produce

from guardrail.agents.runtime import WorkerRuntime
from guardrail.config.settings import load_settings
from guardrail.stream.alerts import AlertDispatcher
from guardrail.stream.telemetry import Telemetry


class _Evaluator:
    def __init__(self, events, fail=False):
        self.events, self.fail = events, fail

    async def aclose(self):
        self.events.append("evaluator closed")
        if self.fail:
            raise RuntimeError("cache already gone")


class _App:
    def __init__(self, events):
        self.events = events

    async def flush_producer(self):
        self.events.append("producer flushed")


def _runtime(events, *, stop_deadline=0.8, evaluator_fails=False):
    async def send_to_topic(alert):
        if alert["alert_id"] == "stuck":
            await asyncio.Event().wait()  # never delivered
        await asyncio.sleep(0.05)
        events.append(f"alert {alert['alert_id']} delivered")

    dispatcher = AlertDispatcher(webhook_url=None, timeout=1, send_to_topic=send_to_topic)
    return WorkerRuntime(
        app=_App(events), telemetry=Telemetry(), dispatcher=dispatcher,
        settings=load_settings(environ={}, stop_deadline_seconds=stop_deadline),
        message_judge=SimpleNamespace(evaluator=_Evaluator(events, evaluator_fails),
                                      exporter=None, close_registry=_no_registry))


async def _no_registry() -> None:
    """The message judge's registry client: none without the registry formats."""


def _alert(alert_id):
    return {"alert_id": alert_id, "metric": "toxicity", "group": {"model": "a"},
            "reasons": ["unsafe rate 90.0% above 20.0%"],
            "examples": [{"case_id": "c1", "evidence_spans": ["SECRET OUTPUT TEXT"]}]}


async def test_close_drains_alerts_then_closes_the_evaluator_then_flushes_once(caplog):
    events = []
    # A drain of 1 s: the quick delivery's 0.05 s fits even on a loaded machine
    # (with 0.2 s, a suite on 2 cores once lost it too).
    runtime = _runtime(events, stop_deadline=4.0)
    runtime.dispatcher.dispatch(_alert("quick"))
    runtime.dispatcher.dispatch(_alert("stuck"))
    with caplog.at_level(logging.INFO):
        await asyncio.gather(runtime.close(), runtime.close())
        await runtime.close()
    assert events == ["alert quick delivered", "evaluator closed", "producer flushed"]
    assert runtime.dispatcher.in_flight == 0  # the stuck delivery was stopped
    lost = [r.getMessage() for r in caplog.records if "lost" in r.getMessage()]
    assert any("1 alert(s) not delivered within 1.0s" in m for m in lost), lost
    assert any("lost alert stuck" in m and "toxicity" in m and "'model': 'a'" in m
               for m in lost), lost
    assert not any("quick" in m for m in lost)
    assert "SECRET OUTPUT TEXT" not in caplog.text


async def test_a_failing_step_does_not_skip_the_next():
    events = []
    runtime = _runtime(events, evaluator_fails=True)
    await runtime.close()
    assert events == ["evaluator closed", "producer flushed"]


class _Service:
    """A background service whose start may wait on ``gate``."""

    def __init__(self, name, events, gate=None):
        self.name, self.events, self.gate = name, events, gate

    async def start(self):
        self.events.append(f"{self.name} started")
        if self.gate is not None:
            await self.gate.wait()

    async def stop(self):
        self.events.append(f"{self.name} stopped")


async def test_a_stop_during_start_up_stops_what_started_and_starts_nothing_more():
    # SIGTERM as the app starts: the close begins while the start is under way.
    # A service started after its stop ran would run on and hold the stop for good.
    events, gate = [], asyncio.Event()
    runtime = _runtime(events)
    runtime.services = [_Service("a", events, gate), _Service("b", events)]
    starting = asyncio.ensure_future(runtime.start())
    await asyncio.sleep(0)
    closing = asyncio.ensure_future(runtime.close())
    await asyncio.sleep(0.05)
    assert "a stopped" not in events  # the close waits for the start under way
    gate.set()
    await asyncio.wait_for(closing, 5)
    await starting
    assert "b started" not in events and "b stopped" in events
    assert events.index("a started") < events.index("a stopped")


async def test_a_start_after_the_stop_began_starts_nothing():
    events = []
    runtime = _runtime(events)
    runtime.services = [_Service("a", events)]
    await runtime.close()
    await runtime.start()
    assert "a started" not in events


def test_the_alert_drain_stays_well_inside_the_stop_deadline():
    assert _runtime([], stop_deadline=45).alert_drain_seconds == 10.0
    assert _runtime([], stop_deadline=3).alert_drain_seconds == 0.75


def test_a_config_error_is_logged_once_and_stops_the_worker_with_exit_code_78(caplog):
    from guardrail.agents.runtime import EXIT_CONFIG_ERROR
    from guardrail.errors import JudgeConfigError

    runtime, stops = _runtime([]), []
    runtime.app.conf = SimpleNamespace(stream_wait_empty=True)
    runtime.request_stop = lambda: stops.append("stop")
    error = JudgeConfigError("judge configuration error: the judge refused the API key; "
                             "check judge_api_key (GUARDRAIL_JUDGE_API_KEY)",
                             setting="judge_api_key")
    with caplog.at_level(logging.INFO, "guardrail.worker"):
        runtime.stop_on_config_error(error)
        runtime.stop_on_config_error(error)  # a second batch failing the same way
    assert runtime.exit_code == EXIT_CONFIG_ERROR == 78 and stops == ["stop"]
    assert [r.getMessage() for r in caplog.records if "judge_api_key" in r.getMessage()] == [
        f"{error}. Stopping with exit code 78; nothing of the batch was acked, it is judged "
        "again once the setting is fixed"]
    # Faust's stop must not wait for the cancelled, never-acked batches.
    assert runtime.app.conf.stream_wait_empty is False


def _toxic_cases(n):
    """Cases the stand-in judge calls toxic ("idiot"), one model group."""
    return [(f"k{i}".encode(), json.dumps({
        "case_id": f"case-{i}", "output": f"you idiot {i}",
        "metadata": {"model": "a", "model_version": "v1"}}).encode(), None) for i in range(n)]


@pytest.mark.kafka
@pytest.mark.timeout(300)
def test_an_alert_raised_just_before_sigterm_reaches_the_webhook(kafka_bootstrap, thread_judge,
                                                                  tmp_path):
    deadline = 45.0
    rules = [{"metric": "toxicity", "max_unsafe_rate": 0.5, "min_judgments": 5,
              "baseline_windows": 0}]
    thread_judge.reset()
    # The webhook answers the first POST with a 503 after 2 s: delivery needs a
    # retry (after the dispatcher's backoff), well after SIGTERM arrived. Slow
    # on purpose: after stopping, mode's worker gives leftover tasks up to 1 s
    # before cancelling them, which a quick retry would get through even
    # without the drain on stop.
    with WebhookSink(failures=1, failure_delay=2.0) as sink:
        env = StreamEnv(kafka_bootstrap, thread_judge.api_base, tmp_path,
                        stop_deadline_seconds=deadline, alert_webhook_url=sink.url,
                        alert_rules=json.dumps(rules))
        try:
            assert env.cli("produce", "--input", "/dev/null").returncode == 0
            asyncio.run(produce(env.bootstrap, env.topic("input"), _toxic_cases(10)))
            worker = env.start_worker()
            assert sink.attempted.wait(120), env.logs()[-3000:]
            stopping = time.monotonic()
            worker.send_signal(signal.SIGTERM)
            try:
                code = worker.wait(deadline + 15)
            except subprocess.TimeoutExpired:
                code = None
            stopped_after = time.monotonic() - stopping
        finally:
            env.stop_workers()
    logs = env.logs()
    assert code == 0 and stopped_after < deadline, (code, stopped_after, logs[-4000:])
    assert len(sink.attempts) == 2, (sink.attempts, logs[-4000:])
    assert [a["alert_id"] for a in sink.received] == [sink.attempts[0]["alert_id"]]
    assert "lost alert" not in logs
    # The order Faust stopped things in: agents, then the runtime, then the producer.
    order = [logs.index(line) for line in ("judging agent stopped", "runtime closing",
                                           "runtime closed", "[^--Producer]: Stopping")]
    assert order == sorted(order), logs[-4000:]


def test_settle_heap_takes_the_startup_objects_out_of_the_collectors_walks():
    # Full collections walked every object alive since startup, stalling a busy
    # worker ~0.2 s at a time; frozen ones are no longer walked.
    import gc

    from guardrail.agents.runner import settle_heap

    judge = load_settings(environ={}, judge_input_cost_per_token=1e-6,
                          judge_output_cost_per_token=2e-6).judge
    assert gc.get_freeze_count() == 0
    try:
        settle_heap(judge)
        assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()
