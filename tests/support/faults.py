"""Fault scenarios against the real worker: crash, judge outage, rebalance, secrets.

Each scenario runs worker processes on a broker with a stand-in judge and
returns a dict of figures; the tests assert on them and ``bench/cluster_faults/faults.py``
prints them as a table::

    figures = crash_scenario(bootstrap, judge, workdir, cases=10_000, kills=3)
    assert figures["lost"] == 0
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

from guardrail.local.rule_judge import JudgeServer
from guardrail.config.settings import Settings

from .harness import StreamEnv, TopicWatcher, consume, produce

__all__ = ["crash_scenario", "outage_scenario", "rebalance_scenario", "secrets_scenario",
           "stop_scenario", "sample_cases", "delivery_figures", "judgment_events"]


def sample_cases(n: int, *, prefix: str = "case", toxic_every: int = 10,
                 **metadata: str) -> list[tuple[bytes, bytes, None]]:
    """``n`` input messages; every ``toxic_every``-th trips the rule judge."""
    meta = {"model": "m", "model_version": "v1", **metadata}
    out = []
    for i in range(n):
        text = "you idiot" if toxic_every and i % toxic_every == 0 else f"helpful answer {i}"
        body = {"case_id": f"{prefix}-{i}", "output": text, "metadata": meta}
        out.append((f"{prefix}-{i}".encode(), json.dumps(body).encode(), None))
    return out


def delivery_figures(produced: list[str], results: list[dict[str, Any]]) -> dict[str, int]:
    """Lost, duplicated and unexpected results by case_id."""
    counts = Counter(r.get("case_id") for r in results)
    expected = set(produced)
    return {"produced": len(produced), "results": len(results),
            "unique": len(expected & set(counts)),
            "lost": len(expected - set(counts)),
            "duplicates": sum(c - 1 for c in counts.values() if c > 1),
            "unexpected": len(set(counts) - expected)}


#: Input records to produce and the case ids they hold (a record may hold many).
Inputs = tuple[list[tuple[Any, ...]], list[str]]


def _setup(bootstrap: str, judge: JudgeServer, workdir: Path, cases: int,
           inputs: Inputs | None = None, **settings: Any) -> tuple[StreamEnv, list[str]]:
    env = StreamEnv(bootstrap, judge.api_base, workdir, **settings)
    created = env.cli("produce", "--input", "/dev/null")
    if created.returncode != 0:
        raise RuntimeError(f"topic creation failed: {created.stderr}")
    if inputs is None:
        messages = sample_cases(cases)
        inputs = messages, [k.decode() for k, _, _ in messages]
    asyncio.run(produce(bootstrap, env.topic("input"), inputs[0]))
    return env, inputs[1]


def _done(expected: set[str]) -> Any:
    return lambda records: expected <= {r.get("case_id") for r in records}


def crash_scenario(bootstrap: str, judge: JudgeServer, workdir: Path, *, cases: int,
                   kills: int = 3, latency: float = 0.05, seed: int = 7,
                   timeout: float = 600, inputs: Inputs | None = None,
                   **settings: Any) -> dict[str, Any]:
    """SIGKILL the worker ``kills`` times at random points while judging
    (``cases`` case records, or ``inputs`` in the format ``settings`` name)."""
    rng = random.Random(seed)
    judge.latency = latency
    env, produced = _setup(bootstrap, judge, workdir, cases, inputs, **settings)
    cases = len(produced)
    started = time.monotonic()
    killed_at = []
    with TopicWatcher(bootstrap, env.topic("results")) as results:
        worker = env.start_worker()
        for k in range(kills):
            target = int(cases * (k + 1) / (kills + 1) * rng.uniform(0.8, 1.0))
            results.wait_for(lambda r: len(r) >= target, timeout=timeout / (kills + 1))
            time.sleep(rng.uniform(0.0, 1.0))
            worker.send_signal(signal.SIGKILL)
            worker.wait(10)
            killed_at.append(len(results.snapshot()))
            worker = env.start_worker()
        finished = results.wait_for(_done(set(produced)), timeout=timeout)
        time.sleep(2)  # let in-flight duplicates land before counting
        records = results.snapshot()
    seconds = round(time.monotonic() - started, 1)
    windows = _window_figures(env, worker.web_port, _judged(records))  # type: ignore[attr-defined]
    env.stop_workers()
    return {"scenario": "crash (SIGKILL x%d)" % kills, **delivery_figures(produced, records),
            **windows, "killed_at_results": killed_at, "finished": finished,
            "seconds": seconds, "logs": env.logs()}


def judgment_events(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of judgments-topic values (bundles, or single events as
    older workers wrote them); other kinds are skipped, as the counter skips
    a newer release's."""
    events = []
    for record in records:
        if record.get("kind") == "judgments":
            events.extend(record["events"])
        elif record.get("kind", "judgment") == "judgment":
            events.append(record)
    return events


def _judged(records: list[dict[str, Any]]) -> int:
    """Judgment events the topic holds at least: one per metric (two) of each
    case with a result. Not per result: a crash mid-publish can leave a result
    on the topic without its batch's events, which the redelivery publishes
    once with a second copy of the result."""
    return 2 * len({record["case_id"] for record in records})


def _window_figures(env: StreamEnv, web_port: int, least: int) -> dict[str, Any]:
    """Judgment events on the topic (read until ``least``, then 2 s more for
    duplicates), unique ones, and what the windows counted."""
    events = asyncio.run(consume(env.bootstrap, env.topic("judgments"), expect=least,
                                 timeout=30, settle=2,
                                 weight=lambda value: len(judgment_events([value]))))
    judgments = judgment_events(events)
    unique = len({(j["source"]["partition"], _position(j["source"]), j["metric"])
                  for j in judgments})
    judged = len({(j["source"]["partition"], _position(j["source"]), j["metric"])
                  for j in judgments if j["status"] != "not_sampled"})
    total = _window_totals(web_port, expect=judged)
    seen = _window_totals(web_port, expect=unique, field="seen")
    # window_total: judgments with a verdict (every event unless sampled);
    # window_seen: every event, judged or not sampled.
    return {"judgment_events": len(judgments), "unique_judgments": unique,
            "unique_judged": judged, "window_total": total, "window_seen": seen,
            "window_counts_match": total == judged and seen == unique,
            "out_of_order": _out_of_order(judgments, float(env.env.get(
                "GUARDRAIL_WINDOW_SECONDS", Settings().windows.window_seconds)))}


def _position(source: dict[str, Any]) -> tuple[int, int]:
    """A case's place in its partition: offset, then index inside the record."""
    return source["offset"], source.get("index") or 0


def _out_of_order(judgments: list[dict[str, Any]], window_seconds: float) -> int:
    """First-time judgments that reached their window cell behind a higher input
    position of the same source partition (the counter would take them for
    redeliveries); 0 when the judging agent keeps its ordering promise."""
    highest: dict[tuple, tuple[int, int]] = {}
    seen: set[tuple] = set()
    late = 0
    for j in judgments:
        src = j["source"]
        cell = (j["table_key"], j["event_time_ms"] // int(window_seconds * 1000),
                j.get("origin"), src["topic"], src["partition"])
        ident = (cell, _position(src))
        if ident not in seen and _position(src) < highest.get(cell, (-1, 0)):
            late += 1
        seen.add(ident)
        highest[cell] = max(highest.get(cell, (-1, 0)), _position(src))
    return late


def _answered_recorder(answered: set[tuple[str, str]]) -> Any:
    async def responder(body: dict, fields: dict[str, str], metric: str, mode: str) -> None:
        answered.add((fields.get("output", ""), metric))  # only reached on a 200 answer
        return None

    return responder


def _safe_without_success(records: list[dict[str, Any]], outputs: dict[str, str],
                          answered: set[tuple[str, str]]) -> int:
    bad = 0
    for r in records:
        for m in r.get("metrics", []):
            safe = m.get("error") is None and m["result"] and m["result"][0]["verdict"] == "SAFE"
            if safe and (outputs.get(r["case_id"]), m["name"]) not in answered:
                bad += 1
    return bad


def outage_scenario(bootstrap: str, judge: JudgeServer, workdir: Path, *, cases: int,
                    outage_seconds: float, latency: float = 0.1,
                    timeout: float = 600) -> dict[str, Any]:
    """The judge answers 503, then times out, for ``outage_seconds``; then recovers."""
    answered: set[tuple[str, str]] = set()
    judge.latency, judge.responder = latency, _answered_recorder(answered)
    env, produced = _setup(bootstrap, judge, workdir, cases, judge_timeout=2,
                           judge_max_retries=1, outage_max_backoff=4)
    outputs = {k.decode(): json.loads(v)["output"] for k, v, _ in sample_cases(cases)}
    with TopicWatcher(bootstrap, env.topic("results")) as results:
        worker = env.start_worker()
        results.wait_for(lambda r: len(r) >= cases // 4, timeout=timeout)
        judge.set_outage(True, 503)
        time.sleep(outage_seconds / 2)
        judge.set_outage(False)
        judge.latency = 30.0  # now every call hangs past the 2 s judge timeout
        time.sleep(outage_seconds / 2)
        judge.latency = latency
        recovered = time.monotonic()
        during = len(results.snapshot())
        finished = results.wait_for(_done(set(produced)), timeout=timeout)
        drained_in = time.monotonic() - recovered
        records = results.snapshot()
    alive = worker.poll() is None
    env.stop_workers()
    errors = [m["error"] for r in records for m in r["metrics"] if m.get("error")]
    kinds = Counter(" ".join(e.split()[:6]) for e in errors)
    return {"scenario": f"judge outage {outage_seconds:g}s (503 then timeouts)",
            **delivery_figures(produced, records), "finished": finished,
            "safe_without_success": _safe_without_success(records, outputs, answered),
            "metric_errors_published": len(errors), "error_kinds": dict(kinds.most_common(3)),
            "results_at_recovery": during,
            "worker_alive": alive, "drain_seconds": round(drained_in, 1),
            "restarts": len(env.workers) - 1, "logs": env.logs()}


def rebalance_scenario(bootstrap: str, judge: JudgeServer, workdir: Path, *, cases: int,
                       latency: float = 0.02, timeout: float = 600,
                       **settings: Any) -> dict[str, Any]:
    """A second worker joins at 20% and leaves (SIGTERM) at 60% of the run."""
    judge.latency = latency
    env, produced = _setup(bootstrap, judge, workdir, cases, **settings)
    with TopicWatcher(bootstrap, env.topic("results")) as results:
        first = env.start_worker()
        results.wait_for(lambda r: len(r) >= cases // 5, timeout=timeout)
        second = env.start_worker()
        results.wait_for(lambda r: len(r) >= cases * 3 // 5, timeout=timeout)
        second.send_signal(signal.SIGTERM)
        second.wait(60)
        finished = results.wait_for(_done(set(produced)), timeout=timeout)
        time.sleep(2)
        records = results.snapshot()
    windows = _window_figures(env, first.web_port, _judged(records))  # type: ignore[attr-defined]
    env.stop_workers()
    return {"scenario": "rebalance (2nd worker joins, leaves)",
            **delivery_figures(produced, records), **windows, "finished": finished,
            "logs": env.logs()}


def _window_totals(web_port: int, *, expect: int, timeout: float = 30,
                   field: str = "total") -> int:
    """The group's windows summed over ``field`` (``total``: judged, ``seen``:
    judged or not sampled), once it reaches ``expect`` or at ``timeout``."""
    import urllib.request

    deadline = time.monotonic() + timeout
    total = -1
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/rates", timeout=5) as r:
                total = sum(row[field] for row in json.loads(r.read())["rates"])
        except OSError:
            pass
        if total == expect:
            break
        time.sleep(0.5)
    return total


def secrets_scenario(bootstrap: str, judge: JudgeServer, workdir: Path, *,
                     secret: str) -> dict[str, Any]:
    """Debug logging, key-echoing judge errors, bad input and an alert: find the key.

    The first worker meets a 401 that echoes the key: a configuration error,
    it logs one line and stops (exit 78). The second meets a 400 that echoes
    it: one metric's error in a published result."""
    from guardrail.local.rule_judge import ErrorReply

    judge.reset()
    judge.script(ErrorReply(401, message=f"Incorrect API key provided: {secret}"))
    env, produced = _setup(bootstrap, judge, workdir, 60, judge_api_key=secret,
                           alert_rules=json.dumps([{"min_judgments": 5,
                                                    "max_unsafe_rate": 0.05}]))
    asyncio.run(produce(bootstrap, env.topic("input"), [(b"bad", b"{oops", None)]))
    with TopicWatcher(bootstrap, env.topic("results")) as results:
        first = env.start_worker(extra_args=["--loglevel", "debug"])
        try:
            config_exit: int | None = first.wait(60)
        except subprocess.TimeoutExpired:
            config_exit = None  # still running: the assertion on the figure says so
        judge.script(ErrorReply(400, message=f"request refused for key {secret}"))
        env.start_worker(extra_args=["--loglevel", "debug"])
        results.wait_for(_done(set(produced)), timeout=120)
        records = results.snapshot()
    env.stop_workers()
    outputs = {"worker logs": env.logs(), "results": json.dumps(records)}
    for name in ("dlq", "alerts", "judgments"):
        outputs[f"{name} topic"] = json.dumps(asyncio.run(
            consume(bootstrap, env.topic(name), expect=10**9, timeout=3)))
    for args in (("tail", "--idle-timeout", "2", "--topic", env.topic("results")),
                 ("estimate", "redteam", "--input", "/dev/null")):
        proc = env.cli(*args)
        outputs[f"cli {args[0]}"] = proc.stdout + proc.stderr
    leaks = {name: text.count(secret) for name, text in outputs.items()}
    return {"scenario": "secrets at debug level", **delivery_figures(produced, records),
            "config_error_exit": config_exit,
            "leaks": sum(leaks.values()), "leaks_by_place": leaks,
            "bytes_checked": sum(len(t) for t in outputs.values())}


def _health(port: int) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def _metric_value(port: int, name: str) -> float | None:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def _until(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def stop_scenario(bootstrap: str, judge: JudgeServer, workdir: Path, *, state: str,
                  cases: int = 300, timeout: float = 180) -> dict[str, Any]:
    """SIGTERM a worker in ``state`` (``outage``: paused on a judge outage;
    ``mid_batch``: judge calls in flight; ``budget``: the judge budget has
    lowered the sample rate; ``rebalance``: a second worker is joining), time
    the stop, then restart and check every input is judged once and the
    windows are exact."""
    settings: dict[str, Any] = {}
    if state == "budget":
        settings = {"budget_tokens_per_hour": 2000, "budget_step_seconds": 1,
                    "budget_min_sample_rate": 0.05}
    env, produced = _setup(bootstrap, judge, workdir, cases, **settings)
    judge.latency = 0.5 if state == "mid_batch" else 0.02
    with TopicWatcher(bootstrap, env.topic("results")) as results:
        if state == "outage":
            judge.set_outage(True, 503)
        worker = env.start_worker()
        port = worker.web_port  # type: ignore[attr-defined]
        reached = {
            "outage": lambda: _health(port) == 503,
            "mid_batch": lambda: len(results.snapshot()) >= 16,
            "budget": lambda: (_metric_value(port, "guardrail_effective_sample_rate") or 1) < 1,
            "rebalance": lambda: len(results.snapshot()) >= 16,
        }[state]
        in_state = _until(reached, 90)
        if state == "rebalance":
            env.start_worker()
            time.sleep(0.5)  # the join is under way
        started = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        try:
            code: int | None = worker.wait(30)
        except subprocess.TimeoutExpired:
            code = None
        stop_seconds = round(time.monotonic() - started, 2)
        judge.set_outage(False)
        judge.latency = 0.02
        restarted = env.start_worker()
        if state == "budget":  # not every input has a result: wait until each is seen
            seen = _window_totals(restarted.web_port, expect=2 * cases,  # type: ignore[attr-defined]
                                  timeout=timeout, field="seen")
            finished = seen == 2 * cases
        else:
            finished = results.wait_for(_done(set(produced)), timeout=timeout)
        time.sleep(2)  # duplicates would land by now
        records = results.snapshot()
    windows = _window_figures(env, restarted.web_port, 2 * cases)  # type: ignore[attr-defined]
    stopped_log = (workdir / "worker-0.log").read_text(errors="replace")
    env.stop_workers()
    return {"scenario": f"SIGTERM, {state}", "in_state": in_state, "exit_code": code,
            "stop_seconds": stop_seconds, "tracebacks": stopped_log.count("Traceback")
            + stopped_log.count("Agent tracebacks"), "finished": finished,
            **delivery_figures(produced, records), **windows, "logs": env.logs()}
