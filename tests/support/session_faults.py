"""Sessions under faults: workers killed while sessions are open, others joining.

Conversations of case JSON turns (``conversation_id``), every turn its own
record, spread over the input partitions; the scenario kills the worker with
SIGKILL once session judgments flow, starts two workers (a restart and one
joining the group) and waits for every session's closing judgment::

    figures = session_crash_scenario(bootstrap, judge, workdir, sessions=40, turns=6)
    assert figures["sessions_missing_turns"] == [] and figures["window_sessions"] == ...
"""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

from guardrail.local.rule_judge import JudgeServer

from .faults import _setup
from .harness import TopicWatcher

__all__ = ["session_crash_scenario", "session_turns", "session_window_total"]

def session_turns(sessions: int, turns: int) -> tuple[list[tuple[bytes, bytes, None]], list[str]]:
    """Turn records, interleaved across sessions (each session's turns in order
    of their timestamps, the last one now: windows expire), and the turns' case ids."""
    records, ids = [], []
    start_ms = int(time.time() * 1000) - sessions * turns * 1000
    for t in range(turns):
        for s in range(sessions):
            case_id = f"s{s}-t{t}"
            body = {"case_id": case_id, "conversation_id": f"session-{s}",
                    "input": f"question {t} of session {s}", "output": f"answer {t}",
                    "timestamp": start_ms + (t * sessions + s) * 1000,
                    "metadata": {"model": "m", "model_version": "v1"}}
            records.append((case_id.encode(), json.dumps(body).encode(), None))
            ids.append(case_id)
    return records, ids


def _closing(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The latest closing judgment of each session (most turns), by session id."""
    closing: dict[str, dict[str, Any]] = {}
    for record in records:
        block = record.get("session")
        if block and block["trigger"] == "idle":
            known = closing.get(block["id"])
            if known is None or known["session"]["turns"] < block["turns"]:
                closing[block["id"]] = record
    return closing


def session_window_total(web_port: int, *, expect: int, timeout: float = 30) -> int:
    """Judged counts of the ``unit=session`` window cells, summed (once ``expect``
    or at ``timeout``)."""
    deadline, total = time.monotonic() + timeout, -1
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/rates", timeout=5) as r:
                rows = json.loads(r.read())["rates"]
            total = sum(row["total"] for row in rows if "unit=session" in row["group"])
        except OSError:
            pass
        if total == expect:
            break
        time.sleep(0.5)
    return total


def session_crash_scenario(bootstrap: str, judge: JudgeServer, workdir: Path, *,
                           sessions: int, turns: int, latency: float = 0.02,
                           timeout: float = 240, **settings: Any) -> dict[str, Any]:
    """SIGKILL the only worker once session judgments flow, then run two."""
    judge.latency = latency
    env, produced = _setup(bootstrap, judge, workdir, 0, session_turns(sessions, turns),
                           **settings)
    expected = {f"session-{s}" for s in range(sessions)}
    with TopicWatcher(bootstrap, env.topic("results")) as results:
        worker = env.start_worker()
        results.wait_for(lambda r: any("session" in x for x in r), timeout=timeout)
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        killed_at = len(results.snapshot())
        restarted, joined = env.start_worker(), env.start_worker()
        finished = results.wait_for(
            lambda r: {k for k, v in _closing(r).items() if v["session"]["turns"] == turns}
            >= expected, timeout=timeout)
        time.sleep(2)  # let in-flight duplicates land before counting
        records = results.snapshot()
    closing = _closing(records)
    lives = {(r["session"]["id"], r["session"]["turns"]) for r in records
             if r.get("session", {}).get("trigger") == "idle"}
    metrics = len(next(iter(closing.values()))["metrics"]) if closing else 0
    window = max(session_window_total(w.web_port, expect=len(lives) * metrics)  # type: ignore[attr-defined]
                 for w in (restarted, joined))
    alive = restarted.poll() is None and joined.poll() is None
    env.stop_workers()
    turn_ids = {r["case_id"] for r in records if "session" not in r}
    return {"finished": finished, "killed_at_results": killed_at, "workers_alive": alive,
            "turns_lost": sorted(set(produced) - turn_ids),
            "sessions_missing_turns": sorted(s for s in expected
                                             if closing.get(s, {}).get("session", {})
                                             .get("turns") != turns),
            "closing_lives": len(lives), "metrics": metrics, "window_sessions": window,
            "logs": env.logs()}
