"""5. Memory: worker RSS over a long run with small, expiring windows.

    python bench/worker/memory.py [--messages 100000] [--pool 4000]

A backlog of ``--messages`` (event timestamps 20 ms apart, so 100k messages
span ~33 min of event time: ~400 tumbling windows of 5 s, expiring after
30 s; four model versions) is judged by an instant judge. Outputs cycle
through ``--pool`` distinct texts: the first round is judged over HTTP, the
rest are judgment-cache hits, which keeps 100k messages inside the run.py
time budget (``--pool 0``: every output distinct, every message judged).
RSS (/proc VmRSS) is sampled about every 0.8 s against results published.
Target: <= 400 MB and flat: the second half's peak RSS at most 5 % above the
peak between 10 % and 50 % of the run (see ``summarize``; a 300k-message run
is the longer check: ``--messages 300000 --timeout 900``).
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import json
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.common import (JudgeProc, Stopwatch, cases, collect, kill_workers, meta, new_env,
                          print_table, produce_values, row, rss_mb, running_broker, start_process,
                          steady_rate, write_json)

LIMIT_MB = 400
FLAT_PEAK_GROWTH_PCT = 5.0


def _slope(samples: list[tuple[int, float]]) -> float | None:
    """Least-squares MB per 10k messages."""
    if len(samples) < 3:
        return None
    xs, ys = [s[0] for s in samples], [s[1] for s in samples]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return None if var == 0 else 10_000 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var


def _live_windows(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/rates", timeout=5) as resp:
            return len(json.loads(resp.read())["rates"])
    except OSError:
        return None


def summarize(samples: list[tuple[int, float]], n: int) -> dict[str, Any]:
    """Start, peak, end; and the flatness test: the peak of the second half against
    the peak from 10 % to 50 % (after the judged round and warm-up). RSS is a
    peak-hold figure (freed memory rarely goes back to the OS), so a leak shows
    as new peaks, while read-ahead buffers make it wobble by ~±10 MB."""
    working = [s for s in samples if s[0] > 0]
    first = [m for c, m in working if n / 10 <= c < n / 2]
    second = [m for c, m in working if c >= n / 2]
    growth = (100 * (max(second) - max(first)) / max(first)) if first and second else None
    slope = _slope([s for s in working if s[0] >= n / 2])
    return {"start_mb": round(working[0][1], 1) if working else None,
            "peak_mb": round(max(s[1] for s in samples), 1) if samples else None,
            "end_mb": round(working[-1][1], 1) if working else None,
            "first_half_peak_mb": round(max(first), 1) if first else None,
            "second_half_peak_mb": round(max(second), 1) if second else None,
            "peak_growth_pct": None if growth is None else round(growth, 1),
            "slope_mb_per_10k_second_half": None if slope is None else round(slope, 2),
            "samples": [(c, round(m, 1)) for c, m in samples]}


def measure(bootstrap: str, tmp: Path, *, n: int = 100_000, pool: int = 1000,
            experiment: str = "", timeout: float = 420) -> dict[str, Any]:
    clock = Stopwatch()
    start_ms = int(time.time() * 1000) - n * 20
    values = cases(n, prefix="mem", start_ms=start_ms, step_ms=20, versions=4,
                   pool=pool or None)
    with JudgeProc(0) as judge:
        env = new_env(bootstrap, judge.api_base, tmp, window_seconds=5,
                      window_expires_seconds=30)
        produce_values(bootstrap, env.topic("input"), values)
        proc = start_process(env, "guardrail", experiment)
        samples: list[tuple[int, float]] = []

        def sample(count: int) -> None:
            mb = rss_mb(proc.pid)
            if mb is not None:
                samples.append((count, mb))

        try:
            stamps = collect(bootstrap, env.topic("results"), n, timeout, sample)
            time.sleep(1.0)
            live = _live_windows(proc.web_port)  # type: ignore[attr-defined]
        finally:
            kill_workers(env)
    out = {"messages": n, "pool": pool, "experiment": experiment, "results": len(stamps),
           "msgs_per_s": round(steady_rate(stamps)["rate"], 1), "live_window_cells": live,
           "wall_seconds": clock.seconds, **summarize(samples, n)}
    print(f"  memory: start {out['start_mb']} peak {out['peak_mb']} end {out['end_mb']} MB, "
          f"slope {out['slope_mb_per_10k_second_half']} MB/10k msgs, {len(stamps)}/{n} "
          f"results at {out['msgs_per_s']} msgs/s, {live} live window cells "
          f"({out['wall_seconds']}s wall)", flush=True)
    return out


def rows(r: dict[str, Any]) -> list[dict[str, Any]]:
    peak, growth = r["peak_mb"] or 0, r["peak_growth_pct"]
    flat = growth is not None and growth <= FLAT_PEAK_GROWTH_PCT
    done = r["results"] >= r["messages"]
    return [row(f"5 memory, {r['results'] // 1000}k msgs, 5 s windows expiring",
                f"RSS start {r['start_mb']} / peak {peak} / end {r['end_mb']} MB; "
                f"2nd-half peak {growth:+.1f}% vs 10-50% peak "
                f"(slope {r['slope_mb_per_10k_second_half']} MB/10k msgs)",
                f"<= {LIMIT_MB} MB, flat", LIMIT_MB / peak if peak else None,
                done and peak <= LIMIT_MB and flat)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--pool", type=int, default=1000, help="distinct outputs (0: all)")
    parser.add_argument("--experiment", default="", help="patch from bench/worker_exp.py")
    parser.add_argument("--timeout", type=float, default=420, help="longest run (s)")
    parser.add_argument("--bootstrap", help="use this broker instead of an embedded one")
    args = parser.parse_args()
    info = meta()  # load and commit before the run
    with tempfile.TemporaryDirectory() as tmp, running_broker(args.bootstrap) as bootstrap:
        r = measure(bootstrap, Path(tmp), n=args.messages, pool=args.pool,
                    experiment=args.experiment, timeout=args.timeout)
    table = rows(r)
    print_table(table, info)
    write_json("memory", {"meta": info, "run": r, "rows": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
