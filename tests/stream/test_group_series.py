"""Per-group judgment series on /metrics: labels model / model_version /
prompt_version, at most ``metrics_max_groups`` groups per worker, the rest
folded into ``other`` and counted; the unsafe-rate gauge per group."""

from __future__ import annotations

import orjson
from prometheus_client.parser import text_string_to_metric_families

from guardrail.judging.evaluate import Evaluator
from guardrail.judges.llm import LLMJudge
from guardrail.stream.envelope import Source
from guardrail.stream.group_series import FOLDED_MEMORY, GROUP_LABELS
from guardrail.stream.processing import MessageJudge, RawMessage
from guardrail.stream.telemetry import Telemetry


def _samples(telemetry: Telemetry, name: str) -> list[tuple[dict[str, str], float]]:
    text = telemetry.render().decode()
    return [(s.labels, s.value) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name]


def _groups(telemetry: Telemetry, name: str = "guardrail_judgments_total") -> set[tuple]:
    return {tuple(labels[k] for k in GROUP_LABELS) for labels, _ in _samples(telemetry, name)}


def _folded(telemetry: Telemetry) -> float:
    [(_, value)] = _samples(telemetry, "guardrail_metrics_groups_folded_total")
    return value


def test_120_groups_get_at_most_max_series_groups_plus_other_and_the_fold_is_counted():
    telemetry = Telemetry()
    telemetry.expect_metrics(["toxicity", "bias"])
    series = telemetry.groups
    series.max_groups = 50
    for round_ in range(2):  # the same groups twice: each folded group counted once
        for i in range(120):
            group = series.group_of({"model": f"m{i % 6}", "model_version": f"v{i}",
                                     "prompt_version": "p1"})
            series.count("toxicity", "unsafe" if i % 4 == 0 else "safe", group)
            series.count("bias", "error", group)
    groups = _groups(telemetry)
    assert len(groups) == 51 and ("other", "other", "other") in groups
    assert {("m0", "v0", "p1"), ("m1", "v49", "p1")} < groups  # the first 50 seen
    assert ("m2", "v50", "p1") not in groups
    assert _folded(telemetry) == 70
    samples = {(labels["metric"], labels["verdict"], labels["model"], labels["model_version"]):
               value for labels, value in _samples(telemetry, "guardrail_judgments_total")}
    # other: 70 groups x 2 rounds; v50..v119 with i % 4 == 0 are 17 of the 70.
    assert samples[("toxicity", "unsafe", "other", "other")] == 34
    assert samples[("toxicity", "safe", "other", "other")] == 106
    assert samples[("bias", "error", "other", "other")] == 140
    assert samples[("toxicity", "unsafe", "m0", "v0")] == 2
    # Every verdict series of a group with its own series starts at 0.
    assert samples[("toxicity", "error", "m0", "v0")] == 0
    assert samples[("bias", "unsafe", "m1", "v1")] == 0
    rates = {(labels["metric"], labels["model_version"]): value
             for labels, value in _samples(telemetry, "guardrail_unsafe_rate")}
    assert len({version for _, version in rates}) == 51
    assert rates[("toxicity", "other")] == 34 / 140
    assert rates[("toxicity", "v0")] == 1.0 and rates[("toxicity", "v1")] == 0.0
    assert ("bias", "v0") not in rates  # errors only: no share to show


def test_missing_labels_are_a_dash_and_long_values_are_cut():
    telemetry = Telemetry()
    series = telemetry.groups
    group = series.group_of({"model": "bot" * 100})
    series.count("toxicity", "safe", group)
    [(model, version, prompt)] = _groups(telemetry)
    assert (len(model), version, prompt) == (128, "-", "-")


def test_the_fold_memory_is_bounded():
    telemetry = Telemetry()
    series = telemetry.groups
    series.max_groups = 1
    for i in range(FOLDED_MEMORY + 50):
        series.group_of({"model_version": str(i)})
    assert series.groups == 1
    assert _folded(telemetry) == FOLDED_MEMORY
    assert len(series._folded_groups) == FOLDED_MEMORY


async def test_message_judge_counts_each_result_under_its_group_with_the_settings_limit(
        make_settings):
    settings = make_settings(metrics_max_groups=3)
    evaluator = Evaluator(LLMJudge(settings.judge), evaluation=settings.evaluation)
    telemetry = Telemetry()
    telemetry.expect_metrics(["bias", "toxicity"])  # as the worker does
    judge = MessageJudge.from_settings(evaluator, settings, telemetry=telemetry)
    try:
        batch = [RawMessage(orjson.dumps({
            "case_id": f"c{i}", "output": "you idiot" if i % 5 == 1 else "glad to help",
            "metadata": {"model": "bot", "model_version": f"v{i % 5}"}}),
            Source("in", 0, i, timestamp_ms=1_700_000_000_000)) for i in range(10)]
        await judge.process(batch)
    finally:
        await evaluator.aclose()
    assert telemetry.groups.max_groups == 3
    assert _groups(telemetry) == {("bot", "v0", "-"), ("bot", "v1", "-"), ("bot", "v2", "-"),
                                  ("other", "other", "other")}
    assert _folded(telemetry) == 2
    by_group = {}
    for labels, value in _samples(telemetry, "guardrail_judgments_total"):
        key = (labels["model_version"], labels["verdict"])
        by_group[key] = by_group.get(key, 0) + value
    # Two messages per version, two metrics each; v3 and v4 under other.
    assert sum(v for (version, _), v in by_group.items() if version == "other") == 8
    assert sum(v for (version, _), v in by_group.items() if version == "v1") == 4
    assert by_group[("v1", "unsafe")] == 2 and by_group[("v0", "unsafe")] == 0  # v1 is rude
    rates = {(labels["metric"], labels["model_version"]): value
             for labels, value in _samples(telemetry, "guardrail_unsafe_rate")}
    assert rates[("toxicity", "v1")] == 1.0 and rates[("toxicity", "v0")] == 0.0


def test_session_judgments_have_series_of_their_own_under_unit_session():
    """unit="turn" on every answer's series (as before, one label more); a session
    judgment counts under unit="session", also when its group is folded, and its
    verdict series start at 0 with its first count."""
    telemetry = Telemetry()
    telemetry.expect_metrics(["toxicity"])
    series = telemetry.groups
    series.max_groups = 1
    turn = series.group_of({"model": "bot", "model_version": "v2"})
    session = series.group_of({"model": "bot", "model_version": "v2"}, unit="session")
    series.count("toxicity", "safe", turn)
    series.count("toxicity", "unsafe", session)
    late = {"model": "bot", "model_version": "v3"}  # beyond max_groups: folded
    series.count("toxicity", "unsafe", series.group_of(late, unit="session"))
    series.count("toxicity", "safe", series.group_of(late))
    assert series.groups == 1 and _folded(telemetry) == 1
    counts = {(labels["model_version"], labels["unit"], labels["verdict"]): value
              for labels, value in _samples(telemetry, "guardrail_judgments_total")}
    assert counts == {("v2", "turn", "safe"): 1, ("v2", "turn", "unsafe"): 0,
                      ("v2", "turn", "error"): 0, ("v2", "session", "unsafe"): 1,
                      ("v2", "session", "safe"): 0, ("v2", "session", "error"): 0,
                      ("other", "session", "unsafe"): 1, ("other", "turn", "safe"): 1}
    rates = {(labels["model_version"], labels["unit"]): value
             for labels, value in _samples(telemetry, "guardrail_unsafe_rate")}
    assert rates == {("v2", "turn"): 0.0, ("v2", "session"): 1.0, ("other", "session"): 1.0,
                     ("other", "turn"): 0.0}


async def test_message_judge_counts_a_session_judgment_under_unit_session(make_settings):
    settings = make_settings()
    evaluator = Evaluator(LLMJudge(settings.judge), evaluation=settings.evaluation)
    telemetry = Telemetry()
    judge = MessageJudge.from_settings(evaluator, settings, telemetry=telemetry)
    session = {"id": "chat-7", "turns": 3, "traces": 3, "status": "open", "trigger": "every_n"}
    try:
        await judge.process([RawMessage(orjson.dumps(case), Source("in", 0, i))
                             for i, case in enumerate([
                                 {"case_id": "t3", "conversation_id": "chat-7",
                                  "output": "glad to help", "metadata": {"model": "bot"}},
                                 {"case_id": "chat-7#3", "output": "glad to help",
                                  "metadata": {"model": "bot"}, "session_block": session}])])
    finally:
        await evaluator.aclose()
    units = {labels["unit"] for labels, value in _samples(telemetry, "guardrail_judgments_total")
             if value and labels["model"] == "bot"}
    assert units == {"turn", "session"}
