"""Memory of open sessions, for ``bench/runs_sessions/sessions.py --only memory``: sessions of 10
turns held open (``session_judge_every`` 1000, idle 3,600 s), measured two ways.

- In a worker: the turns sent straight to ``<app_id>-session-turns`` as the
  judging agent forwards them (their own judgment is not what is measured); the
  worker's VmRSS and the session gauges once all are held, over its RSS with 200
  sessions held, per 10,000 sessions.
- In this process: the same turns applied to the assembler (its book and a dict
  table standing in for the Faust table's store): RSS growth, and tracemalloc.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import time
import tracemalloc
from types import SimpleNamespace
from typing import Any

from aiokafka import AIOKafkaProducer
from bench.common import rss_mb
from bench.runs_sessions.live import Rig, metric_values, steady_rss, tell_missing, worker
from bench.runs_sessions.session_prefix import session as synthetic_turns

from guardrail.agents.assembly import BATCH, Assembler
from guardrail.agents.session_assembly import session_turns_topic
from guardrail.assembly.sessions import Turn
from guardrail.assembly.sessions.gathering import SessionGathering
from guardrail.config.settings import Settings
from guardrail.stream.telemetry import Telemetry
from tests.support.assembly_records import Message
from tests.support.harness import poll

__all__ = ["OPEN_TURNS", "memory"]

OPEN_TURNS, WARM_OPEN = 10, 200
GAUGES = ("guardrail_open_sessions", "guardrail_open_session_turns",
          "guardrail_open_session_bytes")


def open_turns(n: int, tag: str) -> list[tuple[str, bytes]]:
    """(session id, turn record) for ``n`` sessions of 10 turns, as the judging agent
    forwards them (a trace and labels per turn, not flagged)."""
    rng, out = random.Random(tag), []
    for index in range(n):
        for t in synthetic_turns(rng, index, OPEN_TURNS):
            turn = Turn(turn_id=f"{tag}-{t.turn_id}", started_ms=t.started_ms, user=t.user,
                        answer=t.answer, trace_id=f"{rng.getrandbits(128):032x}",
                        span_id=f"{rng.getrandbits(64):016x}",
                        metadata={"model": "acme", "model_version": "v1"})
            out.append((f"{tag}-s{index}", turn.to_bytes()))
    return out


async def _send_turns(bootstrap: str, topic: str, turns: list[tuple[str, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20)
    await producer.start()
    try:
        for start in range(0, len(turns), 20_000):  # bounded memory for the futures
            await asyncio.gather(*[await producer.send(
                topic, value, key=sid.encode(), headers=[("guardrail-session", b"turn")])
                for sid, value in turns[start:start + 20_000]])
    finally:
        await producer.stop()


def wait_held(port: int, turns: int, timeout: float = 240) -> dict[str, float]:
    """The session gauges once ``turns`` turns are held (or at the timeout)."""
    def read() -> dict[str, float]:
        return metric_values(port, GAUGES)
    return poll(lambda: (g := read()).get(GAUGES[1], 0) >= turns and g, timeout, 0.5) or read()


def worker_memory(rig: Rig, warm: list[tuple[str, bytes]],
                  turns: list[tuple[str, bytes]]) -> dict[str, Any]:
    with worker(rig, "memory", session_judge_every=1000, session_idle_seconds=3600) as (env, p):
        topic = session_turns_topic(env.env["GUARDRAIL_APP_ID"])
        asyncio.run(_send_turns(env.bootstrap, topic, warm))
        base = wait_held(p.web_port, len(warm))
        idle, started = steady_rss(p.pid), time.time()
        asyncio.run(_send_turns(env.bootstrap, topic, turns))
        produced = time.time() - started
        held = wait_held(p.web_port, len(warm) + len(turns))
        absorbed, busy = time.time() - started, steady_rss(p.pid)
        tell_missing(env, "memory: turns held", int(held.get(GAUGES[1], 0)),
                     len(warm) + len(turns))
    sessions = held.get(GAUGES[0], 0) - base.get(GAUGES[0], 0)
    per_10k = 10_000 / sessions if sessions else 0.0
    turn_mb = (held.get(GAUGES[2], 0) - base.get(GAUGES[2], 0)) / 1e6
    return {"idle_rss_mb": idle, "held_rss_mb": busy, "base_gauges": base, "gauges": held,
            "sessions_held": sessions, "produce_s": round(produced, 1),
            "absorbed_s": round(absorbed, 1),
            "rss_mb_per_10k": round((busy - idle) * per_10k, 1),
            "turn_mb_per_10k": round(turn_mb * per_10k, 1)}


def _assembled(turns: list[tuple[str, bytes]]) -> Assembler:
    settings = Settings(session_judge_every=1000, session_idle_seconds=3600)
    assembler = Assembler(SessionGathering(settings.sessions, Telemetry()), {}, "bench")
    stream = SimpleNamespace(_set_current_event=lambda event: None)
    for offset, (sid, value) in enumerate(turns):
        message = Message(sid.encode(), value, [("guardrail-session", b"turn")], offset=offset)
        assembler.apply(SimpleNamespace(message=message))
        if offset % BATCH == BATCH - 1:  # headers written once per batch, as the worker does
            assembler.write_headers(stream)
    assembler.write_headers(stream)
    return assembler


def in_process(turns: list[tuple[str, bytes]], sessions: int) -> dict[str, Any]:
    """The same turns applied to the assembler (its book and a dict table) in this
    process: RSS growth, then (a second assembler) the bytes tracemalloc traces."""
    gc.collect()
    before = rss_mb(os.getpid()) or 0.0
    assembler = _assembled(turns)
    rss, held = (rss_mb(os.getpid()) or 0.0) - before, assembler.book.bytes_held
    del assembler
    gc.collect()
    tracemalloc.start()
    assembler = _assembled(turns)
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    per_10k = 10_000 / sessions / 1e6
    return {"rss_mb_per_10k": round(rss * 1e6 * per_10k, 1),
            "traced_mb_per_10k": round(traced * per_10k, 1),
            "turn_mb_per_10k": round(held * per_10k, 1), "table_keys": len(assembler.table)}


def memory(rig: Rig, n: int) -> dict[str, Any]:
    warm, turns = open_turns(WARM_OPEN, "warm"), open_turns(n, "open")
    out = {"sessions": n, "turns": len(turns), "warm_sessions": WARM_OPEN,
           "turn_bytes_avg": round(sum(len(v) for _, v in turns) / len(turns))}
    out["worker"] = worker_memory(rig, warm, turns)
    out["in_process"] = in_process(turns, n)
    return out
