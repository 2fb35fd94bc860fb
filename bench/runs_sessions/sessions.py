"""Sessions (issue 37): turns through session assembly to a verdict, turn -> session
verdict latency, judge tokens per 1,000 turns, memory of open sessions.

    python bench/runs_sessions/sessions.py [--broker embedded|apache]
        [--only throughput,latency,tokens,memory]
        [--sessions 250] [--turns 12] [--latency-sessions 20] [--turn-gap 2]
        [--token-turns 1000] [--open-sessions 10000]

A fresh worker per measurement (``input_format=case``, 2 partitions), the stand-in
judge answering at once. A turn is a case with a ``conversation_id``, a user
message of ~40 words and an answer of ~150 (the texts of bench/runs_sessions/session_prefix.py;
none flagged by the rule judge), each its own record on a random partition.

1. throughput: ``--sessions`` x ``--turns`` turns interleaved at random, each
   session's in order, as one backlog; turns / (first record sent -> the last
   turn's own verdict), and to the last result (every session judged over all its
   turns and closed, ``session_idle_seconds`` 2); beside it the same records with
   ``session_judging: false`` (the per-turn path).
2. latency: ``--latency-sessions`` sessions of 9 turns, each session's turns
   ``--turn-gap`` s apart, at ``session_judge_every`` 1 and 3: from the ack of the
   turn that completes a trigger (every n-th) to the arrival here of the first
   session judgment covering it; the turns' own verdicts beside.
3. tokens: ``--token-turns`` turns in sessions of 12, paced as in 2 (every session
   judged at 3, 6, 9, 12 turns, then closed when idle 2.5 gaps), session judging on and
   off; input tokens from the results' ``cost`` (split turns / sessions) and what a
   prefix-caching judge reads anew (``bench/judge_proc.py --prefix-cache``: blocks of
   16 tokens as vLLM's prefix cache; the worker's ``guardrail_judge_cached_prompt_tokens``).
4. memory: ``--open-sessions`` sessions of 10 turns held open (``session_judge_every``
   1000, idle 3,600 s), the turns sent straight to ``<app_id>-session-turns`` (their
   own judgment is not what is measured): the worker's VmRSS and the session gauges
   over its RSS with 200 sessions held, per 10,000 sessions; and the same turns
   applied to the assembler over a dict table in this process (tracemalloc).

Prints figures (asserts nothing about time); raw ones: bench/results/sessions-BROKER-*.json
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import asyncio
import random
import time
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer
from bench.common import JudgeProc
from bench.runs_sessions.live import (PARTITIONS, Records, Results, Rig, broker_options, drain,
                                      latencies, metric_values, num, paced, pct, run_figures,
                                      tell_missing, worker)
from bench.runs_sessions.session_memory import memory
from bench.runs_sessions.session_prefix import session as synthetic_turns

FIGURES = ("throughput", "latency", "tokens", "memory")
LATENCY_TURNS, TOKEN_SESSION_TURNS = 9, 12
TOKENS = ('guardrail_judge_tokens_total{direction="input"}',
          "guardrail_judge_cached_prompt_tokens_total")
RNG = random.Random(37)  # the partition of each paced record
Session = list[tuple[str, bytes]]  # (case id, case record) per turn, in order


def conversations(n: int, turns: int, tag: str) -> dict[str, Session]:
    """``n`` sessions of ``turns`` case records each, by session id."""
    rng, out = random.Random(tag), {}
    for index in range(n):
        sid = f"{tag}-s{index}"
        out[sid] = [(f"{tag}-{t.turn_id}", orjson.dumps(
            {"case_id": f"{tag}-{t.turn_id}", "conversation_id": sid, "input": t.user,
             "output": t.answer, "metadata": {"model": "acme", "model_version": "v1"}}))
            for t in synthetic_turns(rng, index, turns)]
    return out


def warm_cases() -> Records:
    """Five judged cases without a conversation before each measurement."""
    return [(RNG.randrange(PARTITIONS), orjson.dumps({"case_id": f"warm-{i}",
                                                       "output": f"A warm-up answer {i}."}))
            for i in range(5)]


def interleaved(sessions: dict[str, Session], seed: int) -> Records:
    """Every turn on a random partition, sessions mixed at random, each in order."""
    rng, queues, out = random.Random(seed), [list(s) for s in sessions.values()], []
    while queues:
        queue = rng.choice(queues)
        out.append((rng.randrange(PARTITIONS), queue.pop(0)[1]))
        if not queue:
            queues.remove(queue)
    return out


def round_robin(sessions: dict[str, Session]) -> list[tuple[str, int, str, bytes]]:
    """(session id, turn number from 1, case id, record): turn 1 of every session,
    then turn 2, ...; sent at a steady rate, each session's turns come evenly apart."""
    turns = max(len(s) for s in sessions.values())
    return [(sid, n + 1, *s[n]) for n in range(turns) for sid, s in sessions.items()]


def is_session(record: dict[str, Any]) -> bool:
    return "session" in record


def blocks(results: Results) -> list[tuple[dict[str, Any], float]]:
    """(session block, arrival) of every session judgment kept, repeats too."""
    return [(r["session"], arrival) for r, arrival, _ in results.kept if is_session(r)]


def closed_in_full(sessions: dict[str, Session]) -> Any:
    """Done when every session had a closing judgment over all its turns."""
    def done(results: Results) -> bool:
        closed = {b["id"] for b, _ in blocks(results)
                  if b["turns"] == len(sessions[b["id"]]) and b["status"] == "closed"}
        return len(closed) == len(sessions)
    return done


def triggers(results: Results) -> dict[str, int]:
    out: dict[str, int] = {}
    for block, _ in blocks(results):
        out[block["trigger"]] = out.get(block["trigger"], 0) + 1
    return out


# 1. Throughput --------------------------------------------------------------------------

def _sessions_drain(env: Any, records: Records, sessions: dict[str, Session]) -> dict[str, Any]:
    """The backlog until every session is closed over all its turns; turns/s counted
    to the last result (a closing judgment repeats its last ``every_n`` one's case id,
    so the last is taken from every session result kept, repeats too)."""
    r, results = asyncio.run(drain(env, records, closed_in_full(sessions), warm_cases(),
                                   keep=is_session))
    turn_ids = {case_id for s in sessions.values() for case_id, _ in s}
    own = [ts for case_id, (_, ts) in results.seen.items() if case_id in turn_ids]
    last = max([ts for _, _, ts in results.kept] + own) / 1000
    elapsed = last - r["started"]
    tell_missing(env, "sessions path: turns judged", len(own), len(turn_ids))
    tell_missing(env, "sessions path: sessions closed",
                 int(closed_in_full(sessions)(results)) * len(sessions), len(sessions))
    return {**r, "elapsed_s": round(elapsed, 2), "records_per_s": len(records) / elapsed,
            "turns_judged": len(own), "turns_judged_s": round(max(own) / 1000 - r["started"], 2),
            "session_judgments": len(results.kept), "triggers": triggers(results)}


def throughput(rig: Rig, n: int, turns: int) -> dict[str, Any]:
    sessions = conversations(n, turns, "tp")
    records = interleaved(sessions, seed=7)
    out = {}
    with worker(rig, "tp-sessions", session_idle_seconds=2) as (env, _):
        out["sessions"] = _sessions_drain(env, records, sessions)
    with worker(rig, "tp-per-turn", session_judging=False) as (env, _):
        out["per_turn"], _ = asyncio.run(drain(env, records, len(records), warm_cases()))
        tell_missing(env, "per-turn path", out["per_turn"]["results"], len(records))
    return {**out, "sessions_n": n, "turns": turns}


# 2. Turn -> session verdict -------------------------------------------------------------

def _turn_sender(every: int) -> Any:
    """Sends a turn and keeps its ack time by case id and, when it completes a trigger
    (every ``every``-th turn), by ``<session>#<turn>``."""
    async def send(producer: AIOKafkaProducer, topic: str, item: tuple[str, int, str, bytes],
                   acked: dict[str, float]) -> None:
        sid, number, case_id, value = item
        await (await producer.send(topic, value, partition=RNG.randrange(PARTITIONS)))
        acked[case_id] = time.time()
        if number % every == 0:
            acked[f"{sid}#{number}"] = acked[case_id]
    return send


def covered(sessions: dict[str, Session]) -> Any:
    """Done when every session had a judgment over all its turns."""
    def done(results: Results) -> bool:
        judged = {b["id"] for b, _ in blocks(results) if b["turns"] >= len(sessions[b["id"]])}
        return len(judged) == len(sessions)
    return done


def trigger_latencies(acked: dict[str, float], results: Results) -> dict[str, Any]:
    """Per trigger turn, ms to the first session judgment covering it; and how many
    judgments covered more than one trigger's turns (judged late, together)."""
    judged: dict[str, list[tuple[int, float]]] = {}
    for block, arrival in blocks(results):
        judged.setdefault(block["id"], []).append((block["turns"], arrival))
    waits, missing = [], 0
    for key, sent in acked.items():
        sid, _, number = key.partition("#")
        arrivals = [a for turns, a in judged.get(sid, ()) if number and turns >= int(number)]
        if number and arrivals:
            waits.append((min(arrivals) - sent) * 1000)
        elif number:
            missing += 1
    return {"triggers": len(waits) + missing, "judged": len(waits), "p50_ms": pct(waits, 50),
            "p95_ms": pct(waits, 95), "max_ms": pct(waits, 100),
            "session_judgments": len(results.kept)}


def session_latency(rig: Rig, n: int, gap: float) -> dict[str, Any]:
    out = {}
    for every in (1, 3):
        sessions = conversations(n, LATENCY_TURNS, f"every{every}")
        items = round_robin(sessions)
        with worker(rig, f"latency-{every}", session_judge_every=every,
                    session_idle_seconds=600) as (env, _):
            acked, results = asyncio.run(paced(env, n / gap, items, _turn_sender(every), 90,
                                               warm=warm_cases(), expect=covered(sessions),
                                               keep=is_session))
            own = latencies(env, f"every {every}: own verdicts",
                            {c: t for c, t in acked.items() if "#" not in c}, results)
        found = trigger_latencies(acked, results)
        tell_missing(env, f"every {every}: triggers judged", found["judged"], found["triggers"])
        out[f"every_{every}"] = {"every": every, "sessions": n, "turn_gap_s": gap,
                                 **found, "own": own}
    return out


# 3. Judge tokens ------------------------------------------------------------------------

def _baseline_sender(port: int, baseline: dict[str, float]) -> Any:
    """The turn sender, reading the worker's token counters once, before the first
    turn (after the warm-up): the turns' share is what they add."""
    send = _turn_sender(3)

    async def first_reads(producer: AIOKafkaProducer, topic: str, item: Any,
                          acked: dict[str, float]) -> None:
        if not baseline:
            baseline.update(metric_values(port, TOKENS), read=1.0)
        await send(producer, topic, item, acked)
    return first_reads


def _token_counts(proc: Any, results: Results, baseline: dict[str, float]) -> dict[str, Any]:
    """Input tokens from the results (turns and session judgments apart) and the
    worker's counters (input, cached) over their baseline, once every result is in."""
    split = {"turns": 0.0, "sessions": 0.0}
    for record, _, _ in results.kept:
        if not record["case_id"].startswith("warm-"):
            split["sessions" if is_session(record) else "turns"] += \
                record["cost"]["input_tokens"]
    now = metric_values(proc.web_port, TOKENS)
    return {"input_turns": split["turns"], "input_sessions": split["sessions"],
            "input": now.get(TOKENS[0], 0.0) - baseline.get(TOKENS[0], 0.0),
            "cached": now.get(TOKENS[1], 0.0) - baseline.get(TOKENS[1], 0.0),
            "judgments": triggers(results)}


def tokens(rig: Rig, turns: int, gap: float) -> dict[str, Any]:
    n = max(1, turns // TOKEN_SESSION_TURNS)
    sessions = conversations(n, TOKEN_SESSION_TURNS, "tok")
    out: dict[str, Any] = {"turns": n * TOKEN_SESSION_TURNS, "sessions": n}
    for name, judging in (("on", True), ("off", False)):
        # A judge (and a prefix cache) of its own per worker: nothing cached from the other.
        with JudgeProc(0, prefix_cache=True) as judge, \
                worker((rig[0], judge.api_base, rig[2]), f"tokens-{name}",
                       session_judging=judging, session_idle_seconds=2.5 * gap) as (env, proc):
            expect = closed_in_full(sessions) if judging else n * TOKEN_SESSION_TURNS
            baseline: dict[str, float] = {}
            _, results = asyncio.run(paced(
                env, n / gap, round_robin(sessions), _baseline_sender(proc.web_port, baseline),
                120, warm=warm_cases(), expect=expect, keep=lambda r: True))
            time.sleep(1.5)  # the counters are the worker's: let the last batch count
            out[name] = _token_counts(proc, results, baseline)
        out[name]["judge_usage"] = judge.usage  # the judge's own sums, warm-up included
    return out


# Table ----------------------------------------------------------------------------------

def _per_1k(figs: dict[str, Any], tokens: float) -> str:
    return num(tokens * 1000 / figs["turns"])


def _rows_tokens(t: dict[str, Any]) -> list[tuple[str, str]]:
    on, off = t["on"], t["off"]
    judged = sum(on["judgments"].values())
    return [(f"judge input tokens per 1,000 turns, session judging off ({t['turns']:,} turns)",
             f"{_per_1k(t, off['input'])}; read anew by a prefix-caching judge "
             f"{_per_1k(t, off['input'] - off['cached'])}"),
            (f"the same, session judging on ({t['sessions']} sessions of "
             f"{TOKEN_SESSION_TURNS}, every 3, {judged} judgments: {on['judgments']})",
             f"{_per_1k(t, on['input'])} ({_per_1k(t, on['input_sessions'])} of them session "
             f"judgments); read anew {_per_1k(t, on['input'] - on['cached'])}")]


def rows(figs: dict[str, Any]) -> list[tuple[str, str]]:
    """(measure, figure) per row of the table."""
    out = []
    if tp := figs.get("throughput"):
        s, p = tp["sessions"], tp["per_turn"]
        own = s["records"] / s["turns_judged_s"]
        per_1k = 1000 * s["session_judgments"] / s["records"]
        out += [(f"turns/s judged on their own with sessions on, {tp['sessions_n']} sessions x "
                 f"{tp['turns']} turns as one backlog",
                 f"{num(own)} turns/s ({s['turns_judged_s']} s); "
                 f"{num(own / p['records_per_s'], 2)}x the per-turn path"),
                ("the same, until every session is judged over all its turns and closed "
                 "(idle 2 s)",
                 f"{num(s['records_per_s'])} turns/s ({s['elapsed_s']} s; {num(per_1k)} session "
                 f"judgments per 1,000 turns, {s['triggers']}); "
                 f"{num(s['records_per_s'] / p['records_per_s'], 2)}x the per-turn path"),
                ("the same turns, per-turn path (session_judging=false)",
                 f"{num(p['records_per_s'])} turns/s ({p['results']:,} in {p['elapsed_s']} s)")]
    out += [(f"turn -> session verdict, session_judge_every {r['every']} ({r['sessions']} "
             f"sessions, a turn each every {r['turn_gap_s']:g} s)",
             f"p50 {num(r['p50_ms'])} ms, p95 {num(r['p95_ms'])} ms ({r['judged']}/"
             f"{r['triggers']} triggers, {r['session_judgments']} judgments); own verdict p50 "
             f"{num(r['own']['p50_ms'])} ms") for r in figs.get("latency", {}).values()]
    if t := figs.get("tokens"):
        out += _rows_tokens(t)
    if m := figs.get("memory"):
        w, i = m["worker"], m["in_process"]
        out += [(f"memory per 10,000 open sessions of 10 turns ({m['sessions']:,} held, "
                 f"~{m['turn_bytes_avg']} B a turn)",
                 f"worker RSS +{num(w['rss_mb_per_10k'], 1)} MB ({w['idle_rss_mb']} -> "
                 f"{w['held_rss_mb']} MB); turn bytes held {num(w['turn_mb_per_10k'], 1)} MB; "
                 f"absorbed in {w['absorbed_s']} s"),
                ("the assembler's book and table alone, one process",
                 f"tracemalloc {num(i['traced_mb_per_10k'], 1)} MB, RSS "
                 f"+{num(i['rss_mb_per_10k'], 1)} MB")]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=250, help="sessions, throughput")
    parser.add_argument("--turns", type=int, default=12, help="turns a session, throughput")
    parser.add_argument("--latency-sessions", type=int, default=20)
    parser.add_argument("--turn-gap", type=float, default=2.0, help="s between a session's turns")
    parser.add_argument("--token-turns", type=int, default=1000)
    parser.add_argument("--open-sessions", type=int, default=10_000)
    broker_options(parser, FIGURES)
    args = parser.parse_args()

    def steps(rig: Rig) -> dict[str, Any]:
        return {"throughput": lambda: throughput(rig, args.sessions, args.turns),
                "latency": lambda: session_latency(rig, args.latency_sessions, args.turn_gap),
                "tokens": lambda: tokens(rig, args.token_turns, args.turn_gap),
                "memory": lambda: memory(rig, args.open_sessions)}

    return run_figures("sessions", args, FIGURES, steps, rows)


if __name__ == "__main__":
    raise SystemExit(main())
