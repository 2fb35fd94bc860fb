"""Drive the real worker against a broker: unique topics, worker processes,
produce and consume helpers, a webhook sink. Used by the tests, the fault
suite (bench/cluster_faults/faults.py) and the benchmarks."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from guardrail._processes import free_port

BIN = Path(sys.executable).parent


def poll(predicate: Any, timeout: float, interval: float = 0.25) -> Any:
    """``predicate()``'s first truthy value within ``timeout`` seconds, else its
    last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


class StreamEnv:
    """Unique topics + env for one test, and a handle on worker processes."""

    def __init__(self, bootstrap: str, judge_api_base: str, tmp: Path, **settings: Any) -> None:
        self.bootstrap = bootstrap
        self.tmp = tmp
        tag = uuid.uuid4().hex[:8]
        self.topics = {"input_topic": f"in-{tag}", "results_topic": f"res-{tag}",
                       "dlq_topic": f"dlq-{tag}", "alerts_topic": f"alerts-{tag}",
                       "judgments_topic": f"judg-{tag}"}
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDRAIL_")}
        self.env.update({
            "PATH": f"{BIN}{os.pathsep}{self.env.get('PATH', '')}",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "GUARDRAIL_BOOTSTRAP_SERVERS": bootstrap,
            "GUARDRAIL_APP_ID": f"guardrail-test-{tag}",
            "GUARDRAIL_JUDGE_MODEL": "openai/test-judge",
            "GUARDRAIL_JUDGE_API_BASE": judge_api_base,
            "GUARDRAIL_JUDGE_API_KEY": "sk-stream-test-secret",
            "GUARDRAIL_JUDGE_TIMEOUT": "5",
            "GUARDRAIL_BATCH_WITHIN": "0.2",
        })
        for key, value in {**self.topics, **settings}.items():
            self.env[f"GUARDRAIL_{key.upper()}"] = str(value)
        self.workers: list[subprocess.Popen[bytes]] = []

    def topic(self, name: str) -> str:
        return self.topics[f"{name}_topic"]

    def start_worker(self, web_port: int | None = None, extra_args: list[str] | None = None,
                     command: list[str] | None = None) -> subprocess.Popen[bytes]:
        """A worker process; ``command`` replaces ``guardrail`` (a test double)."""
        port = web_port or free_port()
        log = open(self.tmp / f"worker-{len(self.workers)}.log", "wb")
        proc = subprocess.Popen([*(command or ["guardrail"]), "worker", "--web-port", str(port),
                                 *(extra_args or [])],
                                env=self.env, stdout=log, stderr=subprocess.STDOUT)
        proc.web_port = port  # type: ignore[attr-defined]
        self.workers.append(proc)
        return proc

    def stop_workers(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def logs(self) -> str:
        logs = sorted(self.tmp.glob("worker-*.log"))
        return "\n".join(p.read_text(errors="replace") for p in logs)

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["guardrail", *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout)


async def produce(bootstrap: str, topic: str, values: list[tuple[Any, ...]]) -> None:
    """Send (key, value, timestamp_ms) triples, or (key, value, timestamp_ms,
    headers) with headers as (name, bytes) pairs, and wait for every ack."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                                max_request_size=32 * 1024 * 1024)
    await producer.start()
    try:
        futures = []
        for key, value, ts, *headers in values:
            futures.append(await producer.send(
                topic, value, key=key, timestamp_ms=ts,
                headers=list(headers[0]) if headers and headers[0] else None))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def consume(bootstrap: str, topic: str, *, expect: int, timeout: float,
                  settle: float = 0.0, weight: Callable[[Any], int] | None = None,
                  ) -> list[dict[str, Any]]:
    """Read a topic from the start until ``expect`` records (then ``settle`` more
    seconds, to catch extras) or ``timeout``; values parsed as JSON. With
    ``weight``, a record counts for ``weight(value)`` toward ``expect`` (a
    judgments bundle for its events)."""
    messages = await consume_messages(
        bootstrap, topic, expect=expect, timeout=timeout, settle=settle,
        weight=None if weight is None else (lambda m: weight(json.loads(m.value))))
    return [json.loads(m.value) for m in messages]


async def consume_messages(bootstrap: str, topic: str, *, expect: int, timeout: float,
                           settle: float = 0.0, weight: Callable[[Any], int] | None = None,
                           ) -> list[Any]:
    """As :func:`consume`, but the aiokafka records themselves (key, headers, value)."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    records: list[Any] = []
    counted = 0
    deadline = time.monotonic() + timeout
    settle_until: float | None = None
    try:
        while time.monotonic() < deadline:
            if settle_until is None and counted >= expect:
                settle_until = time.monotonic() + settle
            if settle_until is not None and time.monotonic() >= settle_until:
                break
            batch = await consumer.getmany(timeout_ms=300)
            for messages in batch.values():
                records.extend(messages)
                counted += sum(map(weight, messages)) if weight else len(messages)
    finally:
        await consumer.stop()
    return records


class WebhookSink:
    """A tiny HTTP server in a thread that records alert POSTs.

    ``received`` holds the POSTs answered 200. A scripted outage: the first
    ``failures`` POSTs are answered 503 after ``failure_delay`` seconds;
    ``attempts`` holds every POST and ``attempted`` is set by the first::

        with WebhookSink(failures=1) as sink:
            sink.attempted.wait(60)   # the first POST arrived (and gets a 503)
    """

    def __init__(self, *, failures: int = 0, failure_delay: float = 0.0) -> None:
        self.received: list[dict[str, Any]] = []
        self.attempts: list[dict[str, Any]] = []
        self.attempted = threading.Event()
        self.failures, self.failure_delay = failures, failure_delay
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/alerts"
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    #: The path POSTs are taken at.
    path = "/alerts"

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.attempts.append(body)
        self.attempted.set()
        if len(self.attempts) <= self.failures:
            await asyncio.sleep(self.failure_delay)
            return web.json_response({"error": "unavailable"}, status=503)
        self.received.append(body)
        return web.json_response({"ok": True})

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post(self.path, self.handle)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        self._loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self._ready.set()
        self._loop.run_forever()

    def __enter__(self) -> WebhookSink:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


class TopicWatcher:
    """Consume a topic from the start in a background thread, keeping every record
    (its value parsed as JSON, or what ``parse`` makes of the aiokafka record).

        with TopicWatcher(bootstrap, "redteam-results") as results:
            results.wait_for(lambda recs: len(recs) >= 100, timeout=60)
    """

    def __init__(self, bootstrap: str, topic: str,
                 parse: Callable[[Any], Any] = lambda m: json.loads(m.value), *,
                 isolation_level: str = "read_uncommitted") -> None:
        self.bootstrap, self.topic, self.parse = bootstrap, topic, parse
        self.isolation_level = isolation_level
        self.records: list[Any] = []
        #: Each record's timestamp (ms; the producer's create time), in step with ``records``.
        self.stamps: list[int] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        consumer = AIOKafkaConsumer(self.topic, bootstrap_servers=self.bootstrap, group_id=None,
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    isolation_level=self.isolation_level)
        await consumer.start()
        try:
            while not self._stop.is_set():
                batch = await consumer.getmany(timeout_ms=200)
                messages = [m for ms in batch.values() for m in ms]
                parsed = [self.parse(m) for m in messages]
                with self._lock:
                    self.records.extend(parsed)
                    self.stamps.extend(m.timestamp for m in messages)
        finally:
            await consumer.stop()

    def snapshot(self) -> list[Any]:
        with self._lock:
            return list(self.records)

    def timestamps(self) -> list[int]:
        with self._lock:
            return list(self.stamps)

    def wait_for(self, predicate: Any, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self.snapshot()):
                return True
            time.sleep(0.2)
        return predicate(self.snapshot())

    def __enter__(self) -> TopicWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


class OtlpLogSink(WebhookSink):
    """An OTLP/HTTP logs endpoint in a thread (``POST /v1/logs``): keeps each
    ``ExportLogsServiceRequest``, parsed with opentelemetry-proto, and answers
    as a Collector does. ``url`` is the endpoint to configure (no path)."""

    def __init__(self) -> None:
        super().__init__()
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests: list[Any] = []

    path = "/v1/logs"

    async def handle(self, request: web.Request) -> web.Response:
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
            ExportLogsServiceRequest, ExportLogsServiceResponse)

        body = await request.read()
        if body[:2] == b"\x1f\x8b":  # gzip, unless aiohttp already inflated it
            body = gzip.decompress(body)
        self.requests.append(ExportLogsServiceRequest.FromString(body))
        return web.Response(content_type="application/x-protobuf",
                            body=ExportLogsServiceResponse().SerializeToString())

    def log_records(self) -> list[Any]:
        return [record for req in list(self.requests) for rl in req.resource_logs
                for sl in rl.scope_logs for record in sl.log_records]


def worker_page(port: int, path: str) -> str:
    """A page of a worker's web server (``/metrics``, ``/rates``, ...), as text."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return response.read().decode()


def worker_ready(worker: Any) -> bool:
    """The worker subprocess answers ``/health`` with ok; AssertionError if it exited."""
    if worker.poll() is not None:
        raise AssertionError(f"the worker exited with {worker.returncode}")
    try:
        return json.loads(worker_page(worker.web_port, "/health")).get("status") == "ok"
    except OSError:
        return False
