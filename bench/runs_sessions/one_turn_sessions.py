"""Judge calls per Pydantic AI run with sessions on, with and without the
one-turn rule (a session is judged as one from its second turn).

    python bench/runs_sessions/one_turn_sessions.py [--runs 1000]

Pydantic AI (2.68) writes a fresh ``gen_ai.conversation.id`` on every run without
message history, so every run is a conversation of one turn. ``--runs`` real
Pydantic AI runs (the four agent scenarios of ``tests/support/agent_traffic.py`` in
turn, each request made unique so the judgment cache saves nothing, against its
scripted model) are decoded as the worker decodes them, each run
judged once as a run by the stand-in rule judge (``judge_calls: per_message``), its
turn sent on to a session assembler (the real one, over a dict table), every session
aged past ``session_idle_seconds`` and ticked until nothing is due, each due session
case judged by the same judge. Judge calls are the stand-in's HTTP requests. "before"
runs the very same code with the rule switched off (``book.stands_in`` patched to
False), as the release before #54 behaved.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import asyncio
import os
import sys
from dataclasses import replace
from types import SimpleNamespace
from unittest import mock

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bench.common import ROOT, meta, write_json  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))  # agent_traffic imports its neighbours as support.*
from support.agent_traffic import SCENARIOS, ScriptedModel, run_agent  # noqa: E402
from support.assembly_records import Message  # noqa: E402

from guardrail.agents.assembly import Assembler  # noqa: E402
from guardrail.assembly.runs.case import run_case  # noqa: E402
from guardrail.assembly.runs.routing import RunRouter  # noqa: E402
from guardrail.assembly.sessions import book, gathering  # noqa: E402
from guardrail.config.settings import load_settings  # noqa: E402
from guardrail.formats.otlp import OtlpDecoder  # noqa: E402
from guardrail.judges.build import build_evaluator  # noqa: E402
from guardrail.local.rule_judge import JudgeServer  # noqa: E402
from guardrail.stream.envelope import Source  # noqa: E402
from guardrail.stream.processing import MessageJudge, RawMessage  # noqa: E402
from guardrail.stream.telemetry import Telemetry  # noqa: E402

import orjson  # noqa: E402


def pydantic_ai_runs(n: int) -> list[dict]:
    """``n`` run cases, each made of a real Pydantic AI run's spans."""
    scenarios = list(SCENARIOS.values())
    decoder, spans = OtlpDecoder(runs=RunRouter()), {}
    with ScriptedModel() as model:
        for i in range(n):
            scenario = scenarios[i % len(scenarios)]  # each request its own: no cache hits
            scenario = replace(scenario, request=f"{scenario.request} (request {i})")
            for record in run_agent("pydantic_ai", scenario, model).records:
                for span in decoder.decode(record, {}).run_spans:
                    spans.setdefault(span.trace_id, []).append(span)
    return [run_case(s, status="complete") for s in spans.values()]


async def judge_calls(cases: list[dict], server: JudgeServer, rule_on: bool) -> dict:
    settings = load_settings(environ={}, judge_model="openai/test-judge",
                             judge_api_base=server.api_base, judge_api_key="sk-bench",
                             judge_calls="per_message", session_idle_seconds=60)
    evaluator = build_evaluator(settings)
    judge = MessageJudge.from_settings(evaluator, settings, session_turns_topic="turns")
    assembler = Assembler(gathering.SessionGathering(settings.sessions, Telemetry()), {}, "t")
    server.reset()
    offset, sessions = 0, {}

    def apply(key: str, kind: bytes, value: bytes = b""):
        nonlocal offset
        offset += 1
        message = Message(key.encode(), value, [("guardrail-session", kind)], offset=offset)
        return assembler.apply(SimpleNamespace(message=message))

    with mock.patch.object(gathering, "stands_in", (lambda h: book.stands_in(h)) if rule_on
                           else (lambda h: False)), \
            mock.patch.object(book, "stands_in", book.stands_in if rule_on else (lambda h: False)):
        raws = [RawMessage(orjson.dumps(c), Source("in", 0, i, timestamp_ms=c["timestamp"]))
                for i, c in enumerate(cases)]
        for out in await judge.process(raws):
            if out.topic == "turns":
                sessions[out.key.decode()] = apply(out.key.decode(), b"turn", out.value)
        run_calls = server.calls
        judgments = 0
        for _ in range(3):  # due at once (flagged), then idle
            for key in list(assembler.book.headers):
                assembler.book.headers[key].last_ms -= 61_000
                due = apply(key, b"tick")
                if due is not None:
                    judgments += 1
                    await judge.process([due])
                    apply(key, b"done")
    await evaluator.aclose()
    return {"runs": len(cases), "sessions": len(sessions), "run_calls": run_calls,
            "session_cases": judgments, "judge_calls": server.calls}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    args = parser.parse_args()
    info, cases = meta(), pydantic_ai_runs(args.runs)

    async def both() -> list[dict]:
        async with JudgeServer() as server:
            return [{"rule": name, **await judge_calls(cases, server, rule_on)}
                    for name, rule_on in (("before", False), ("after", True))]

    rows = asyncio.run(both())
    print(f"\n{info['date']}  {info['machine']}  commit {info['commit']}")
    print("| | runs | sessions | judge calls on runs | session cases judged or counted "
          "| judge calls | per 1,000 runs |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['rule']} | {r['runs']} | {r['sessions']} | {r['run_calls']} "
              f"| {r['session_cases']} | {r['judge_calls']} "
              f"| {r['judge_calls'] * 1000 / r['runs']:,.0f} |")
    write_json("one_turn_sessions", {"meta": info, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
