"""Records forwarded twice after three kills, with and without ``gate_transactional``.

    python bench/gate/kills.py [--broker embedded|apache] [--transactional] [--records 2000]

The input is filled with records of 50 keys (every 13th an insult, every 500th
not JSON), one gate-mode worker starts, and it is killed (SIGKILL) three times
at about a quarter, a half and three quarters of the records placed, each time
restarted at once. Every input offset is then looked for on the approved topic,
the held topic and the DLQ: missing, in two places, forwarded twice. With
``--transactional`` (Apache Kafka only) the topics are read twice: as a
``read_committed`` consumer reads them (what a downstream consumer of a
transactional gate sees) and as a plain one (what the kills' aborted
transactions left on the log). Targets: 0 missing, 0 in two places; with
``--transactional`` 0 copies for a ``read_committed`` reader.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import asyncio
import random
import signal
import time
from pathlib import Path
from typing import Any

from arrivals import broker_parser, run_and_report

from bench.common import JudgeProc, row
from tests.support.gate_traffic import Placements, gate_env, keyed_cases, start_ready
from tests.support.harness import produce


def measure(bootstrap: str, tmp: Path, *, records: int, transactional: bool,
            seed: int = 3) -> dict[str, Any]:
    rng = random.Random(seed)
    extra = {"gate_transactional": "true", "topic_partitions": 2} if transactional else {}
    values = keyed_cases(records, keys=50, broken_every=500)
    started = time.monotonic()
    with JudgeProc(5, latency_max_ms=50) as judge:
        env = gate_env(bootstrap, judge, tmp, **extra)
        try:
            worker = start_ready(env, timeout=120)
            level = "read_committed" if transactional else "read_uncommitted"
            with Placements(env, isolation_level=level) as placed, Placements(env) as written:
                asyncio.run(produce(env.bootstrap, env.topic("input"), values))
                for k in range(3):
                    placed.wait(int(records * (k + 1) / 4 * rng.uniform(0.8, 1.0)), 120,
                                settle=rng.uniform(0.0, 0.5))
                    worker.send_signal(signal.SIGKILL)
                    worker.wait(10)
                    worker = start_ready(env, timeout=120)
                placed.wait(records, 240)
                seen, log = placed.account(records), written.account(records)
        finally:
            env.stop_workers()
    out = {"records": records, "transactional": transactional, "reader": level,
           "seconds": round(time.monotonic() - started, 1),
           **{k: seen[k] for k in ("missing", "both", "twice", "inversions", "approved",
                                   "held", "dlq", "unsafe_approved")},
           "twice_on_the_log": log["twice"]}
    print(f"  {out}", flush=True)
    return out


def rows(r: dict[str, Any], broker: str) -> list[dict[str, Any]]:
    ok = r["missing"] == r["both"] == r["inversions"] == r["unsafe_approved"] == 0
    target = "0 missing, 0 in two places"
    if r["transactional"]:
        ok = ok and r["twice"] == 0
        target += ", 0 copies read committed"
    txn = "gate_transactional" if r["transactional"] else "without gate_transactional"
    return [row(f"gate, 3 kills, {broker}, {txn} ({r['records']} records)",
                f"{r['twice']} copies for a {r['reader']} reader ({r['twice_on_the_log']} "
                f"on the log), {r['missing']} missing, {r['both']} in two places, "
                f"{r['inversions']} inversions",
                target, None, ok)]


def main() -> int:
    parser = broker_parser(__doc__)
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--transactional", action="store_true")
    args = parser.parse_args()
    name = "gate-kills" + ("-transactional" if args.transactional else "")
    return run_and_report(name, args, measure, rows, records=args.records,
                          transactional=args.transactional)

if __name__ == "__main__":
    raise SystemExit(main())
