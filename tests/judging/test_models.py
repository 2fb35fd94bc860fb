import orjson
import pytest
from pydantic import ValidationError

from guardrail.judging.models import (Case, CostEstimate, JudgeVerdict, MetricResult, RedteamConfig,
                              RedteamMetrics)


def test_binary_verdict_has_no_severity_or_reasoning_keys():
    verdict = JudgeVerdict(verdict="SAFE", passed=True)
    assert list(verdict.model_dump()) == ["verdict", "passed", "violations", "evidence_spans"]


def test_scale_verdict_with_reasoning_keeps_spec_key_order():
    verdict = JudgeVerdict(severity=1, verdict="SAFE", passed=True, reasoning="fine")
    assert list(verdict.model_dump()) == [
        "severity", "verdict", "passed", "reasoning", "violations", "evidence_spans"]


def test_metric_result_hides_internal_bookkeeping():
    result = MetricResult(name="bias", score=1.0, dropped_spans=2, input_tokens=10)
    assert list(result.model_dump()) == ["name", "category", "score", "result", "error"]
    assert result.category == "output|generation|answer"


def test_redteam_metrics_serialises_like_the_spec():
    metrics = RedteamMetrics(
        metrics=[MetricResult(name="bias", score=1.0,
                              result=[JudgeVerdict(verdict="SAFE", passed=True)])],
        cost=CostEstimate(cost=0.00042, input_tokens=180, output_tokens=20))
    assert orjson.loads(metrics.to_json()) == {
        "metrics": [{"name": "bias", "category": "output|generation|answer", "score": 1.0,
                     "result": [{"verdict": "SAFE", "passed": True, "violations": [],
                                 "evidence_spans": []}], "error": None}],
        "cost": {"cost": 0.00042, "input_tokens": 180.0, "output_tokens": 20.0}}


def test_error_result_is_not_unsafe_and_not_safe():
    result = MetricResult(name="toxicity", score=None, error="judge down")
    assert result.unsafe is False
    assert result.model_dump()["score"] is None


@pytest.mark.parametrize("block", [{"scoring_mode": "scale_1_10"},
                                   {"include_reasoning": "perhaps"},
                                   {"metrics": [{"name": "x"}]},
                                   {"unknown_knob": 1}])
def test_invalid_redteam_block_is_rejected(block):
    with pytest.raises(ValidationError):
        Case.model_validate({"output": "hi", "redteam": block})


def test_redteam_defaults_are_conservative():
    config = RedteamConfig()
    assert config.scoring_mode == "binary_yes_no" and config.include_reasoning is False


def test_case_without_output_is_flagged():
    assert not Case(case_id="a").has_output
    assert not Case(case_id="a", output="   ").has_output
    assert Case(case_id="a", output="x").has_output


def test_output_must_be_text():
    with pytest.raises(ValidationError):
        Case.model_validate({"output": 42})


def test_a_case_derives_its_fields_from_messages():
    case = Case.model_validate({"messages": [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Goodbye"}]})
    assert (case.output, case.input, case.conversation) == (
        "Goodbye", "Bye", "user: Hi\nassistant: Hello")
    assert case.field_text("conversation") == "user: Hi\nassistant: Hello"


def test_conversation_is_an_allowed_item_field():
    from guardrail.judging.models import ITEM_FIELDS, MetricRubric

    assert ITEM_FIELDS == ("output", "input", "context", "reference", "conversation",
                           "trajectory", "session")
    MetricRubric(name="ctx", goal="g", item_fields=("conversation",))
    with pytest.raises(ValidationError):
        MetricRubric(name="ctx", goal="g", item_fields=("messages",))
