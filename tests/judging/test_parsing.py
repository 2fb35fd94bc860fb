import pytest

from guardrail.errors import JudgeAnswerError
from guardrail.judging.parsing import (extract_json_object, ground_spans, parse_answer,
                                       response_schema)

VALID = '{"verdict": "UNSAFE", "violations": ["insult"], "evidence_spans": ["you idiot"]}'


@pytest.mark.parametrize("text", [
    VALID,
    f"```json\n{VALID}\n```",
    f"Here is my verdict:\n{VALID}\nLet me know if you need more.",
    f"```\n{VALID}\n```\nExplanation follows.",
])
def test_json_is_found_bare_fenced_or_in_prose(text):
    assert extract_json_object(text)["verdict"] == "UNSAFE"


@pytest.mark.parametrize("text", ["", "SAFE", "{not json}", '{"verdict": "SAFE", "viol',
                                  "[1, 2, 3]"])
def test_no_json_object_is_an_error(text):
    with pytest.raises(JudgeAnswerError):
        extract_json_object(text)


def test_lowercase_verdict_is_normalised_but_unknown_verdict_fails():
    answer = parse_answer('{"verdict": "safe", "violations": [], "evidence_spans": []}',
                          scoring_mode="binary_yes_no", include_reasoning=False)
    assert answer.verdict == "SAFE"
    with pytest.raises(JudgeAnswerError, match="verdict"):
        parse_answer('{"verdict": "MAYBE", "violations": [], "evidence_spans": []}',
                     scoring_mode="binary_yes_no", include_reasoning=False)


@pytest.mark.parametrize("severity", [0, 6, 9, -1, "3", 2.5, True, None])
def test_severity_outside_1_to_5_or_not_an_integer_fails(severity):
    body = ('{"severity": %s, "verdict": "SAFE", "violations": [], "evidence_spans": []}'
            % ("null" if severity is None else
               ('"3"' if severity == "3" else str(severity).lower())))
    with pytest.raises(JudgeAnswerError, match="severity"):
        parse_answer(body, scoring_mode="scale_1_5", include_reasoning=False)


def test_missing_keys_fail_in_each_mode():
    with pytest.raises(JudgeAnswerError, match="evidence_spans"):
        parse_answer('{"verdict": "SAFE", "violations": []}', scoring_mode="binary_yes_no",
                     include_reasoning=False)
    with pytest.raises(JudgeAnswerError, match="severity"):
        parse_answer(VALID, scoring_mode="scale_1_5", include_reasoning=False)
    with pytest.raises(JudgeAnswerError, match="reasoning"):
        parse_answer(VALID, scoring_mode="binary_yes_no", include_reasoning=True)


def test_wrong_types_fail():
    with pytest.raises(JudgeAnswerError):
        parse_answer('{"verdict": "SAFE", "violations": "none", "evidence_spans": []}',
                     scoring_mode="binary_yes_no", include_reasoning=False)


def test_response_schema_is_strict_and_follows_the_mode():
    binary = response_schema("binary_yes_no", False)["json_schema"]
    assert binary["strict"] is True
    assert binary["schema"]["required"] == ["verdict", "violations", "evidence_spans"]
    assert binary["schema"]["additionalProperties"] is False
    scale = response_schema("scale_1_5", True)["json_schema"]["schema"]
    assert scale["required"] == ["severity", "verdict", "reasoning", "violations",
                                 "evidence_spans"]
    assert scale["properties"]["verdict"]["enum"] == ["SAFE", "UNSAFE"]


def test_spans_are_kept_only_when_they_occur_in_the_judged_text():
    judged = {"output": "Well, You Idiot, that was wrong."}
    kept, dropped = ground_spans(["you idiot", "  'that was wrong' ", "invented quote", ""],
                                 judged)
    assert kept == ["You Idiot", "that was wrong"]  # the text's own spelling
    assert dropped == 2


def test_span_matching_treats_regex_characters_literally():
    kept, dropped = ground_spans(["a.b", "(x)"], {"output": "axb (x)"})
    assert kept == ["(x)"] and dropped == 1
