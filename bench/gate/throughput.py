"""Approved records/s with a judge of random latency, key order kept.

    python bench/gate/throughput.py [--broker embedded|apache] [--records 3000]
        [--keys 1000] [--concurrency 64] [--latency-ms 10 --latency-max-ms 2000]

The input is filled first (records of ``--keys`` keys, every 13th an insult the
stand-in judge calls UNSAFE), then one gate-mode worker starts with
``--concurrency`` judge calls in flight; the judge answers each call after a
uniform random latency in [``--latency-ms``, ``--latency-max-ms``]. Reported:
records placed (approved + held) per second and judge calls per second over the
steady part, against what the calls in flight allow (calls in flight ÷ mean
latency; a record is one call, its metrics asked together), and the order inversions
per key on the approved topic (a record of a key forwarded after a later one of
the key). Targets: ≥ 0.9× the calls the judge allows; 0 inversions.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import asyncio
from pathlib import Path
from typing import Any

from arrivals import (broker_parser, gate_bench_env, keyed_records, note_arrivals,
                      run_and_report)

from bench.common import JudgeProc, kill_workers, produce_values, row
from tests.support.gate_traffic import inverted, start_ready

#: One judge call per record: all its metrics in one call (``judge_calls: per_message``,
#: the default).
CALLS_PER_RECORD = 1


async def _placements(env: Any, n: int, timeout: float) -> tuple[dict, dict]:
    """Each record's arrival on the approved or the held topic, by topic."""
    placed: dict[str, Any] = {}
    await note_arrivals(env.bootstrap, (env.approved, env.held), placed, expect=n,
                        timeout=timeout)
    approved = {k: v for k, v in placed.items() if v[1].topic == env.approved}
    return approved, {k: v for k, v in placed.items() if k not in approved}


def _steady(stamps: list[float], skip: float = 0.1) -> tuple[float, float, float]:
    """Rate over the middle of the run (the first and last ``skip`` left out)."""
    stamps = sorted(stamps)
    lo, hi = stamps[int(len(stamps) * skip)], stamps[int(len(stamps) * (1 - skip)) - 1]
    count = int(len(stamps) * (1 - skip)) - int(len(stamps) * skip)
    return count / max(hi - lo, 1e-9), lo, hi


def measure(bootstrap: str, tmp: Path, *, records: int, keys: int, concurrency: int,
            latency_ms: float, latency_max_ms: float) -> dict[str, Any]:
    mean_s = (latency_ms + latency_max_ms) / 2 / 1000
    allowed_calls = concurrency / mean_s
    with JudgeProc(latency_ms, latency_max_ms=latency_max_ms) as judge:
        env = gate_bench_env(bootstrap, judge.api_base, tmp, judge_concurrency=concurrency)
        values = keyed_records(records, keys=keys)
        produce_values(bootstrap, env.topic("input"), values)
        try:
            start_ready(env, timeout=120)
            timeout = 3 * records / (allowed_calls / CALLS_PER_RECORD) + 120
            approved, held = asyncio.run(_placements(env, records, timeout))
        finally:
            kill_workers(env)
            judge.stop()
    stamps = [t for t, _ in (*approved.values(), *held.values())]
    rate, t0, t1 = _steady(stamps)
    calls = judge.calls_per_s(t0 * 1000, t1 * 1000)
    out = {"records": records, "keys": keys, "concurrency": concurrency,
           "latency_ms": [latency_ms, latency_max_ms], "approved": len(approved),
           "held": len(held), "placed_per_s": round(rate, 1),
           "judge_calls_per_s": None if calls is None else round(calls, 1),
           "allowed_calls_per_s": round(allowed_calls, 1),
           "allowed_records_per_s": round(allowed_calls / CALLS_PER_RECORD, 1),
           "inversions": len(inverted([m for _, m in approved.values()]))}
    print(f"  {out['placed_per_s']} records/s placed, {out['judge_calls_per_s']} calls/s "
          f"(allowed {out['allowed_calls_per_s']}); inversions {out['inversions']}", flush=True)
    return out


def rows(r: dict[str, Any], broker: str) -> list[dict[str, Any]]:
    ratio = r["placed_per_s"] / r["allowed_records_per_s"]
    ok = ratio >= 0.9 and r["inversions"] == 0 and r["approved"] + r["held"] == r["records"]
    lo, hi = r["latency_ms"]
    return [row(f"gate throughput, {broker} (judge {lo:.0f}–{hi:.0f} ms, {r['keys']} keys, "
                f"{r['concurrency']} calls in flight)",
                f"{r['placed_per_s']} records/s ({r['approved']} approved, {r['held']} held), "
                f"{r['judge_calls_per_s']} judge calls/s; {r['inversions']} inversions",
                f">= 0.9 x {r['allowed_records_per_s']} records/s, 0 inversions", ratio, ok)]


def main() -> int:
    parser = broker_parser(__doc__)
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=10)
    parser.add_argument("--latency-max-ms", type=float, default=2000)
    args = parser.parse_args()
    return run_and_report("gate-throughput", args, measure, rows, records=args.records,
                          keys=args.keys, concurrency=args.concurrency,
                          latency_ms=args.latency_ms, latency_max_ms=args.latency_max_ms)

if __name__ == "__main__":
    raise SystemExit(main())
