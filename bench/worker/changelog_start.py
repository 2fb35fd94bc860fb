"""Start time on a long window changelog (issue 23, item 1).

    python bench/worker/changelog_start.py [--expired 1000000] [--live 10000] [--partitions 2]

The window table's changelog (``<app_id>-window-counts-changelog``, created
first with the worker's partition count) gets ``--expired`` records of
expired window cells, stamped over two days that end three hours ago (far
beyond ``live_horizon_seconds(300, 3600)`` = 4020 s) with window starts that
match their stamps, then ``--live`` cells of the current 300 s window
(``--live / 2`` groups x 2 metrics), stamped now. Keys and values are what
Faust writes (``guardrail/agents/window_cells.py``): key
``["toxicity|model=m,model_version=v7,prompt_version=-",[start,start+299.9]]``,
value ``WindowCounts.as_dict()`` as compact JSON. Each cell goes to a
partition fixed by its window key, records of a partition in time order.

Then a worker (windows of 300 s expiring after 3600 s, the stand-in judge in
its own process, no input) is started once per scenario, and the time from
``Popen`` until ``GET /rates`` (scope group) answers ``caught_up: true`` with
exactly the ``--live`` current cells is taken:

- ``horizon``: today's code (table recovery and the rates view start at the
  first record written within the horizon, found by a binary search);
- ``beginning``: the code before 44dbf2e (both read from the beginning),
  patched in at start: ``rates_view._horizon`` answers None and
  ``transport._offsets_since_horizon`` finds nothing, so the view seeks to the
  beginning and recovery starts at Faust's earliest offsets.

Both run the worker through this file (``_worker SCENARIO worker ...``), which
also adds ``records_read`` (``WindowCells.records``: records the view applied)
to ``/rates``'s status; nothing under ``guardrail/`` is edited. The worker is
stopped with SIGTERM between scenarios (it leaves the group at once), and the
changelog is checked to be unchanged. Also reported: when Faust logged
``Worker ready`` (table recovery done) and how many records recovery read
(from the worker's ``table recovery starts at ...`` line and the produced
partition sizes), and the seconds from Popen to the log lines of each step
(group joined, recovery start found, Worker ready, rates view caught up).
Last, the same worker on a fresh, empty changelog gives the fixed cost of a
start (``--no-empty`` skips it). ``--scenarios horizon,horizon,beginning``
repeats starts on the same changelog. ``/rates`` is polled every 0.25 s (the
figure can be up to that late): each answer with 10k rows costs the worker
some CPU, the same in both scenarios. The workers' logs are kept (``logs_dir``
in the JSON written to ``bench/results/changelog_start-*.json``).
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import sys


def _run_worker(argv: list[str]) -> None:
    """``python bench/worker/changelog_start.py _worker SCENARIO worker --web-port N``."""
    scenario, args = argv[0], argv[1:]
    from guardrail.agents import transport
    from guardrail.agents import rates_view

    plain_status = rates_view.RatesView.status

    def status(self):  # type: ignore[no-untyped-def]
        return {**plain_status(self), "records_read": self.cells.records}

    rates_view.RatesView.status = status  # type: ignore[method-assign]
    if scenario == "beginning":
        async def no_horizon(*_args, **_kwargs):  # type: ignore[no-untyped-def]
            return {}

        rates_view._horizon = lambda settings: None  # type: ignore[assignment]
        transport._offsets_since_horizon = no_horizon  # type: ignore[assignment]
    elif scenario != "horizon":
        raise SystemExit(f"unknown scenario {scenario!r}")
    from guardrail.cli import main

    sys.argv[0] = "guardrail"
    main(args)


if __name__ == "__main__" and sys.argv[1:2] == ["_worker"]:
    _run_worker(sys.argv[2:])
    raise SystemExit(0)

import argparse
import asyncio
import json
import math
import os
import re
import tempfile
import time
import urllib.request
import zlib
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from bench.common import (BROKERS, PY, JudgeProc, broker_label, meta, new_env, running_broker,
                          write_json)

from guardrail.agents.window_cells import changelog_topic, live_horizon_seconds
from guardrail.stream.alerts import WindowCounts
from guardrail._event_time import utc_iso

WINDOW, EXPIRES = 300.0, 3600.0
HORIZON = live_horizon_seconds(WINDOW, EXPIRES)
#: The expired records are stamped over this span, ending OLD_END before now.
OLD_SPAN, OLD_END = 2 * 86400.0, 3 * 3600.0
GROUPS_EXPIRED = 5000
RECOVERY_LINE = re.compile(r"table recovery starts at the first changelog records of the "
                           r"live windows: (\{.*\})")
SCENARIOS = ("horizon", "beginning")


def cell_key(metric: str, version: int, start: float) -> bytes:
    window = f"{metric}|model=m,model_version=v{version},prompt_version=-"
    return orjson.dumps([window, [start, round(start + WINDOW - 0.1, 1)]])


def cell_value(total: int, unsafe: int, offset: int) -> bytes:
    counts = WindowCounts(total=total, unsafe=unsafe, errors=0, seen=total,
                          marks={"live|in|0": offset})
    return orjson.dumps(counts.as_dict())


def partition_of(key: bytes, partitions: int) -> int:
    return zlib.crc32(key) % partitions


def records(expired: int, live: int, now: float, partitions: int):  # type: ignore[no-untyped-def]
    """(partition, key, value, timestamp_ms) in time order: expired cells, then
    the live ones of the current window."""
    t0 = now - OLD_END - OLD_SPAN
    step = OLD_SPAN / max(expired, 1)
    for i in range(expired):
        ts = t0 + i * step
        start = math.floor(ts / WINDOW) * WINDOW
        key = cell_key("toxicity" if i % 2 == 0 else "bias", (i // 2) % GROUPS_EXPIRED, start)
        yield (partition_of(key, partitions), key, cell_value(3 + i % 7, i % 3, i),
               int(ts * 1000))
    current = math.floor(now / WINDOW) * WINDOW
    for i in range(live):
        key = cell_key("toxicity" if i % 2 == 0 else "bias", i // 2, current)
        yield partition_of(key, partitions), key, cell_value(5, i % 2, i), int(now * 1000)


async def produce_changelog(bootstrap: str, topic: str, source: Any) -> dict[int, int]:
    """Produce in whole record batches (``send_batch``, ~1 MB each), at most a
    few in flight per partition; every batch acked. Records per partition."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=50,
                                max_batch_size=1 << 20, max_request_size=8 << 20)
    await producer.start()
    counts: dict[int, int] = {}
    batches: dict[int, Any] = {}
    pending: list[Any] = []
    try:
        async def send(partition: int) -> None:
            pending.append(await producer.send_batch(batches.pop(partition), topic,
                                                     partition=partition))
            if len(pending) >= 16:
                await asyncio.gather(*pending)
                pending.clear()

        for partition, key, value, ts in source:
            batch = batches.get(partition)
            if batch is None:
                batch = batches[partition] = producer.create_batch()
            if batch.append(key=key, value=value, timestamp=ts) is None:
                await send(partition)
                batch = batches[partition] = producer.create_batch()
                batch.append(key=key, value=value, timestamp=ts)
            counts[partition] = counts.get(partition, 0) + 1
        for partition in list(batches):
            await send(partition)
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return counts


async def count_records(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Records per partition, counted by reading (Tansu's listed end offsets
    stop inside the last batch)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                max_partition_fetch_bytes=8 << 20, fetch_max_wait_ms=100)
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    counts = {p: 0 for p in range(partitions)}
    idle = 0
    try:
        while idle < 6:
            batch = await consumer.getmany(timeout_ms=500, max_records=100_000)
            if not batch:
                idle += 1
                continue
            idle = 0
            for tp, msgs in batch.items():
                counts[tp.partition] += len(msgs)
    finally:
        await consumer.stop()
    return counts


def _rates(port: int) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/rates", timeout=10) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError):
        return None


LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")
#: Steps of a start, by the first log line that names them.
STEPS = {"joined_group_s": "Joined group", "recovery_search_done_s": "table recovery starts at",
         "worker_ready_s": "Worker ready", "view_caught_up_s": "rates view: caught up"}


def log_steps(text: str, started: float) -> dict[str, float | None]:
    """Seconds from Popen (wall clock ``started``) to the first log line of each step."""
    out: dict[str, float | None] = {name: None for name in STEPS}
    for line in text.splitlines():
        stamp = LOG_TIME.match(line)
        if not stamp:
            continue
        for name, marker in STEPS.items():
            if out[name] is None and marker in line:
                at = time.mktime(time.strptime(stamp.group(1)[:19], "%Y-%m-%d %H:%M:%S"))
                at += int(stamp.group(1)[20:]) / 1000
                out[name] = round(at - started, 2)
    return out


def start_worker(env: Any, scenario: str, *, live: int, window_start: str | None,
                 sizes: dict[int, int], timeout: float) -> dict[str, Any]:
    """One worker start, timed from Popen to a complete fleet-wide /rates:
    caught up, with exactly ``live`` rows, all of the window ``window_start``."""
    index = len(env.workers)
    started, t0 = time.time(), time.monotonic()
    proc = env.start_worker(command=[PY, str(Path(__file__).resolve()), "_worker", scenario])
    log_path = env.tmp / f"worker-{index}.log"
    out: dict[str, Any] = {"scenario": scenario, "complete": False}
    while time.monotonic() - t0 < timeout and proc.poll() is None:
        body = _rates(proc.web_port)  # type: ignore[attr-defined]
        at = round(time.monotonic() - t0, 2)
        if body is not None and "first_answer_s" not in out:
            out["first_answer_s"] = at
        if body and body.get("caught_up"):
            rows = body["rates"]
            if "caught_up_s" not in out:
                out["caught_up_s"], out["rows_at_caught_up"] = at, len(rows)
            out["rows"], out["records_read"] = len(rows), body.get("records_read")
            if len(rows) == live and all(r["window_start"] == window_start for r in rows):
                out.update(complete=True, complete_s=at)
                break
        time.sleep(0.25)
    # Table recovery may end after /rates is complete: wait for it (briefly).
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline and \
            "Worker ready" not in log_path.read_text(errors="replace"):
        time.sleep(0.25)
    text = log_path.read_text(errors="replace")
    out.update(log_steps(text, started))
    found = RECOVERY_LINE.search(text)
    recovery_from = ({} if found is None else
                     {k: int(v) for k, v in json.loads(found.group(1).replace("'", '"')).items()})
    topic = changelog_topic(env.env["GUARDRAIL_APP_ID"])
    starts = {p: recovery_from.get(f"{topic}[{p}]", 0) for p in sizes}
    out["recovery_from"] = starts
    out["recovery_records"] = sum(sizes[p] - starts[p] for p in sizes)
    out["exited"] = proc.poll()
    out["log"] = str(log_path)
    env.stop_workers()
    return out


def run(bootstrap: str | None, *, expired: int, live: int, partitions: int,
        timeout: float, scenarios: tuple[str, ...], empty: bool,
        broker_kind: str = "embedded") -> dict[str, Any]:
    info = meta()
    info["broker"] = bootstrap or broker_label(broker_kind)
    result: dict[str, Any] = {"meta": info, "expired": expired, "live": live,
                              "partitions": partitions, "window_seconds": WINDOW,
                              "expires_seconds": EXPIRES, "horizon_seconds": HORIZON}
    tmp = tempfile.mkdtemp(prefix="changelog-start-")  # kept: the workers' logs
    result["logs_dir"] = tmp
    settings = {"window_seconds": int(WINDOW), "window_expires_seconds": int(EXPIRES),
                "topic_partitions": partitions}
    for sub in ("long", "empty"):
        (Path(tmp) / sub).mkdir()
    with running_broker(bootstrap, broker_kind) as broker, JudgeProc(0) as judge:
        env = new_env(broker, judge.api_base, Path(tmp) / "long", **settings)
        topic = changelog_topic(env.env["GUARDRAIL_APP_ID"])
        # The changelog exists with the worker's partition count before the worker.
        asyncio.run(_create(env, topic, partitions))
        now = time.time()
        window_start = utc_iso(math.floor(now / WINDOW) * WINDOW * 1000)  # as /rates says
        t = time.monotonic()
        sizes = asyncio.run(produce_changelog(broker, topic,
                                              records(expired, live, now, partitions)))
        produce_s = time.monotonic() - t
        result["produce_s"] = round(produce_s, 1)
        result["produce_per_s"] = round((expired + live) / produce_s)
        result["partition_records"] = sizes
        print(f"produced {expired + live:,} changelog records ({expired:,} expired, {live:,} "
              f"live) in {produce_s:.1f} s ({(expired + live) / produce_s:,.0f}/s); per "
              f"partition {sizes}", flush=True)
        runs = []
        for scenario in scenarios:
            one = start_worker(env, scenario, live=live, window_start=window_start,
                               sizes=sizes, timeout=timeout)
            one["changelog_records"] = expired + live
            runs.append(one)
            print(f"{scenario}: {one}", flush=True)
        after = asyncio.run(count_records(broker, topic, partitions))
        result["changelog_unchanged"] = after == sizes
        if after != sizes:
            print(f"note: the changelog changed during the runs: {sizes} -> {after}")
        if empty:  # the fixed cost of a start: the same worker on an empty changelog
            env = new_env(broker, judge.api_base, Path(tmp) / "empty", **settings)
            asyncio.run(_create(env, changelog_topic(env.env["GUARDRAIL_APP_ID"]), partitions))
            one = start_worker(env, "horizon", live=0, window_start=None,
                               sizes={p: 0 for p in range(partitions)}, timeout=timeout)
            one.update(scenario="horizon, empty changelog", changelog_records=0)
            runs.append(one)
            print(f"empty: {one}", flush=True)
        result["runs"] = runs
    return result


async def _create(env: Any, topic: str, partitions: int) -> None:
    from guardrail.kafka.topics import ensure_topics
    from guardrail.config.settings import load_settings

    settings = load_settings(environ=env.env)
    await ensure_topics(settings.kafka, {topic: partitions}, compacted=frozenset({topic}))


def print_table(result: dict[str, Any]) -> None:
    info = result["meta"]
    print(f"\n{info['date']}  {info['machine']}  {info.get('broker', '')}  "
          f"commit {info['commit']}  load {info.get('load_at_start')} (at start), "
          f"{result.get('load_at_end')} (at end)")
    print(f"produce: {result['expired'] + result['live']:,} changelog records in "
          f"{result['produce_s']} s ({result['produce_per_s']:,}/s)")
    print("| scenario | changelog records | live cells | s to complete /rates "
          "(target <= 10) | records the view read | records table recovery read | "
          "s to: group joined / recovery start found / Worker ready / view caught up |")
    print("|---|---|---|---|---|---|---|")
    for r in result["runs"]:
        done = f"{r['complete_s']}" if r["complete"] else "not within the timeout " \
            f"(caught up at {r.get('caught_up_s')} s with {r.get('rows_at_caught_up')} rows)"
        read = r.get("records_read")
        steps = " / ".join("-" if r.get(name) is None else f"{r[name]}" for name in STEPS)
        live = result["live"] if r["changelog_records"] else 0
        print(f"| {r['scenario']} | {r['changelog_records']:,} | {live:,} | {done} | "
              f"{'' if read is None else f'{read:,}'} | {r['recovery_records']:,} | {steps} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--expired", type=int, default=1_000_000)
    parser.add_argument("--live", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="per worker start (s)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help="comma-separated, repeats allowed: horizon, beginning")
    parser.add_argument("--no-empty", action="store_true",
                        help="skip the reference start on an empty changelog")
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--broker", choices=BROKERS, default="embedded",
                        help="the fresh broker: embedded (default) or Apache Kafka")
    args = parser.parse_args()
    if args.live % 2:
        parser.error("--live must be even (groups x 2 metrics)")
    scenarios = tuple(s for s in args.scenarios.split(",") if s)
    result = run(args.bootstrap, expired=args.expired, live=args.live,
                 partitions=args.partitions, timeout=args.timeout, scenarios=scenarios,
                 empty=not args.no_empty, broker_kind=args.broker)
    result["load_at_end"] = round(os.getloadavg()[0], 2)
    print_table(result)
    path = write_json("changelog_start", result)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
