"""The ``otlp`` input format's throughput: judged spans per second vs ``case`` records.

    python bench/worker/otlp_throughput.py [--spans 6000] [--seconds 15] [--rounds 1]

The ceiling setup (``ceiling.py``: the stand-in judge answers at once, a
backlog is produced before the worker starts, the worker is killed after),
once per kind of input, each with its own topics, judge process and worker:

- ``case``: ``--spans`` case JSON records (``common.cases``), one judged
  message each;
- ``otlp x k`` for k = 1, 10, 100: the same outputs as GenAI ``chat`` spans
  built by the OpenTelemetry SDK (``tests/support/otel_traffic.py``), encoded
  by the real OTLP encoder (``otlp_proto``), k spans to a Kafka record (no
  key, as the Collector's kafka exporter sends them), the worker started with
  ``input_format=otlp``.

Every kind judges ``--spans`` messages (one result and one judge call each),
so results/s are judged messages per second in every row.

The rate is counted over the whole drain: results read / (last result's
Kafka timestamp - the judge's first call), not from the results' timestamps
alone as ``ceiling.py`` does. A batch is 64 *records*: with 100 spans a
record, one batch holds the whole default backlog (6,000 spans), so the
worker judges for seconds before its first result and then publishes 6,000
results in ~2 s; a rate from the results' timestamps alone reads ~3x too
high there. The judge process counts calls per whole second; the start
inside the first second is interpolated from its count at the rate of the
next seconds (``judging_began``), so a drain needs a few seconds: ``--spans``
well below the default (~8 s of judging here) makes the figures coarse.
The judge's calls/s over its whole seconds (judging without the last
batch's publishing) are shown beside. Target: otlp / case >= 0.9 per judged
message, for each k. Rates move by +-20 % between runs on 2 shared cores (see
the README): ``--rounds N`` repeats the four kinds N times, in reverse order
every other round, and takes each kind's median.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import json
import tempfile
from itertools import pairwise
from pathlib import Path
from typing import Any

from bench.common import (JudgeProc, Stopwatch, cases, collect, kill_workers, meta, new_env,
                          print_table, produce_values, row, running_broker, start_process,
                          steady_rate, write_json)

from tests.support.otel_traffic import chunks, genai_spans, otlp_proto

#: (input format, spans per record); ``case`` records hold one message each.
KINDS = (("case", 1), ("otlp", 1), ("otlp", 10), ("otlp", 100))
#: The results' own rate (kept in the JSON) skips this much warm-up, as ceiling.py.
SKIP = 1.0
#: Results come a batch at a time; a longer silence starts a new burst.
BURST_GAP_MS = 100
#: The worker's default ``max_message_bytes``: a larger record goes to the DLQ.
MAX_MESSAGE_BYTES = 1_000_000
TARGET = 0.9


def label(fmt: str, k: int) -> str:
    return fmt if fmt == "case" else f"otlp x{k}"


def backlog(fmt: str, k: int, n: int, prefix: str) -> list[tuple[bytes | None, bytes, None]]:
    """``n`` judged messages: case records, or the same outputs as GenAI spans,
    ``k`` to an OTLP record (the Collector's kafka exporter sends no key)."""
    values = cases(n, prefix=prefix)
    if fmt == "case":
        return values
    outputs = [json.loads(value)["output"] for _, value, _ in values]
    spans = genai_spans(outputs, service_version="v0")
    return [(None, otlp_proto(chunk), None) for chunk in chunks(spans, k)]


def judging_began(per_second: dict[int, int]) -> float | None:
    """When the judge's first call was answered (epoch ms): the judge process
    counts calls per whole second, so the start inside the first second is
    taken from how many calls it got at the rate of the seconds after it."""
    if not per_second:
        return None
    ordered = sorted(per_second)
    first = ordered[0]
    full = [per_second[t] for t in ordered[1:-1]] or [per_second[first]]
    rate = sorted(full)[len(full) // 2]  # calls per second while judging (median)
    return (first + 1 - min(1.0, per_second[first] / rate)) * 1000


def run_kind(fmt: str, k: int, bootstrap: str, tmp: Path, n: int, *, seconds: float,
             timeout: float = 300, **settings: Any) -> dict[str, Any]:
    name = label(fmt, k).replace(" ", "")
    folder = tmp / name
    folder.mkdir(parents=True, exist_ok=True)
    values = backlog(fmt, k, n, name)
    sizes = [len(v) for _, v, _ in values]
    clock = Stopwatch()
    with JudgeProc(0) as judge:
        env = new_env(bootstrap, judge.api_base, folder, input_format=fmt, **settings)
        produce_values(bootstrap, env.topic("input"), values)
        start_process(env, "guardrail")
        try:
            stamps = collect(bootstrap, env.topic("results"), n, timeout, seconds=seconds)
        finally:
            kill_workers(env)
    ordered = sorted(stamps)
    began = judging_began(judge.per_second)
    rate = len(ordered) / ((ordered[-1] - began) / 1000) if ordered and began else 0.0
    seconds_judging = sorted(judge.per_second)[1:-1]  # whole seconds only
    calls = (sum(judge.per_second[t] for t in seconds_judging) / len(seconds_judging)
             if seconds_judging else None)
    gaps = [i + 1 for i, (a, b) in enumerate(pairwise(ordered)) if b - a >= BURST_GAP_MS]
    bursts = [b - a for a, b in zip([0, *gaps], [*gaps, len(ordered)])]
    return {"kind": label(fmt, k), "input_format": fmt, "spans_per_record": k,
            "records": len(values), "judged_messages": n,
            "record_bytes_max": max(sizes), "record_bytes_mean": round(sum(sizes) / len(sizes)),
            "over_max_message_bytes": sum(s > MAX_MESSAGE_BYTES for s in sizes),
            "results_read": len(stamps), "judge_calls": judge.calls,
            "results_per_s": rate, "judge_calls_per_s": calls,
            "drain_seconds": round((ordered[-1] - began) / 1000, 2) if began and ordered else None,
            "results_span_s": round((ordered[-1] - ordered[0]) / 1000, 2) if ordered else None,
            "steady_after_first_result": steady_rate(stamps, SKIP, seconds),
            "bursts": len(bursts),
            "largest_burst": max(bursts, default=0), "wall_seconds": clock.seconds}


def measure(bootstrap: str, tmp: Path, n: int, *, seconds: float, rounds: int = 1,
            kinds: tuple[tuple[str, int], ...] = KINDS, **settings: Any) -> list[dict[str, Any]]:
    """Each kind ``rounds`` times, in reverse order every other round (a load
    drifting over the run then favours no kind); each kind's median round."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for round_ in range(rounds):
        for fmt, k in (kinds if round_ % 2 == 0 else kinds[::-1]):
            r = run_kind(fmt, k, bootstrap, tmp / f"r{round_}", n, seconds=seconds, **settings)
            runs.setdefault(r["kind"], []).append(r)
            calls = "-" if r["judge_calls_per_s"] is None else f"{r['judge_calls_per_s']:.0f}"
            print(f"  {r['kind']:<9} {r['records']:6d} records  {r['results_per_s']:6.0f} "
                  f"results/s ({r['results_read']} results in {r['drain_seconds']}s from the "
                  f"first judge call, {r['results_span_s']}s from the first result; judge "
                  f"{calls} calls/s, {r['judge_calls']} calls; record "
                  f"<= {r['record_bytes_max']:,} B; {r['wall_seconds']}s wall)", flush=True)
    out = []
    for done in (runs[label(fmt, k)] for fmt, k in kinds):
        ranked = sorted(done, key=lambda r: r["results_per_s"])
        median = dict(ranked[(len(ranked) - 1) // 2])  # the lower one of two
        median["rounds_results_per_s"] = [round(r["results_per_s"], 1) for r in done]
        out.append(median)
    return out


def print_runs(runs: list[dict[str, Any]]) -> None:
    case = next((r["results_per_s"] for r in runs if r["input_format"] == "case"), 0.0)
    print("\n| kind | spans/record | records | record bytes (max) | results/s | "
          "judge calls/s while judging | ratio to case |\n|---|---|---|---|---|---|---|")
    for r in runs:
        ratio = f"{r['results_per_s'] / case:.2f}" if case else "-"
        calls = "-" if r["judge_calls_per_s"] is None else f"{r['judge_calls_per_s']:.0f}"
        print(f"| {r['kind']} | {r['spans_per_record']} | {r['records']:,} | "
              f"{r['record_bytes_max']:,} | {r['results_per_s']:.0f} | {calls} | {ratio} |")


def rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    case = next((r for r in runs if r["input_format"] == "case"), None)
    out = []
    for r in runs:
        if r["input_format"] != "otlp" or case is None:
            continue
        ratio = r["results_per_s"] / case["results_per_s"] if case["results_per_s"] else None
        out.append(row(f"otlp x{r['spans_per_record']} / case per judged message",
                       f"{r['results_per_s']:.0f} vs {case['results_per_s']:.0f} results/s",
                       f">= {TARGET}x", ratio,
                       None if ratio is None else ratio >= TARGET))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=6000,
                        help="judged messages per kind (spans, or case records)")
    parser.add_argument("--seconds", type=float, default=15.0,
                        help="longest time results are read after the first one")
    parser.add_argument("--rounds", type=int, default=1, help="repeat; each kind's median")
    parser.add_argument("--bootstrap", help="use this broker instead of an embedded one")
    args = parser.parse_args()
    info = meta()  # load and commit before the run
    clock = Stopwatch()
    with tempfile.TemporaryDirectory() as tmp, running_broker(args.bootstrap) as bootstrap:
        runs = measure(bootstrap, Path(tmp), args.spans, seconds=args.seconds,
                       rounds=args.rounds)
    info["wall_seconds"] = clock.seconds
    print_runs(runs)
    table = rows(runs)
    print_table(table, info)
    write_json("otlp_throughput", {"meta": info, "runs": runs, "rows": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
