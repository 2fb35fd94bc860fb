"""P(UNSAFE) from token log-probabilities, and the verdict a threshold makes of it.

Pure: token lists written here, shaped like the responses of OpenAI and the
bundled llama.cpp judge. The same path over real HTTP: tests/judges/test_logprobs.py.
"""

import json
import math

import pytest

from guardrail.judging.models import JudgeVerdict, MetricResult
from guardrail.judging.probability import (AnswerTokens, TokenLogprob, expected_severity,
                                           locate_value, read_logprobs)
from guardrail.judging.verdicts import apply_threshold, severity_for

#: The bundled llama.cpp judge at a real verdict (issue 12).
LLAMA_TOP = (("UN", -0.24), ("SAFE", -1.69), ("Unsafe", -4.97), ("SA", -6.0), ("unsafe", -6.2))


def _p_llama():
    unsafe = math.exp(-0.24) + math.exp(-4.97) + math.exp(-6.2)
    return unsafe / (unsafe + math.exp(-1.69) + math.exp(-6.0))


def _tokens(*pieces):
    """Certain tokens, except (text, top) pairs, which are read at."""
    out = []
    for piece in pieces:
        if isinstance(piece, tuple):
            text, top = piece
            own = dict(top).get(text, -20.0)
            out.append(TokenLogprob(text, own, tuple(top)))
        else:
            out.append(TokenLogprob(piece, 0.0, ((piece, 0.0),)))
    return tuple(out)


def test_the_llama_cpp_verdict_token_gives_the_unsafe_share_of_its_alternatives():
    tokens = _tokens('{"', "verdict", '":', ' "', ("UN", LLAMA_TOP), "SAFE", '",',
                     ' "violations": [], "evidence_spans": []}')
    reading = AnswerTokens(tokens).reading("binary_yes_no")
    assert reading.unsafe == pytest.approx(_p_llama()) and reading.severity is None
    assert 0.80 < reading.unsafe < 0.82


def test_quotes_and_spaces_inside_the_token_and_case_do_not_matter():
    # The token holds the space and the quote before the value, as many tokenizers write it.
    top = ((' "S', -0.1), (' "UNSAFE', -2.5), (' "unsafe', -3.0), (' "{', -4.0))
    tokens = _tokens('{"verdict":', (' "S', top), 'AFE"}')
    expected = (math.exp(-2.5) + math.exp(-3.0)) / (
        math.exp(-2.5) + math.exp(-3.0) + math.exp(-0.1))
    assert AnswerTokens(tokens).reading("binary_yes_no").unsafe == pytest.approx(expected)


def test_a_fenced_answer_with_prose_is_read_at_its_verdict():
    tokens = _tokens("Sure", "!\n```json\n", '{"verdict": "', ("SAFE", (("SAFE", -0.05),
                     ("UN", -3.0))), '", "violations": [], "evidence_spans": []}', "\n```")
    assert AnswerTokens(tokens).reading("binary_yes_no").unsafe == pytest.approx(
        math.exp(-3.0) / (math.exp(-3.0) + math.exp(-0.05)))


def test_each_metric_of_a_several_metric_answer_is_read_at_its_own_verdict():
    tokens = _tokens('{"bias": {"violations": [], "evidence_spans": ["the word verdict"], ',
                     '"verdict": "', ("SAFE", (("SAFE", -0.01), ("UN", -4.6))),
                     '"}, "toxicity": {"violations": ["x"], "evidence_spans": [], "verdict": "',
                     ("UN", LLAMA_TOP), 'SAFE"}}')
    answer = AnswerTokens(tokens)
    assert answer.reading("binary_yes_no", metric="toxicity").unsafe == pytest.approx(_p_llama())
    assert answer.reading("binary_yes_no", metric="bias").unsafe == pytest.approx(
        math.exp(-4.6) / (math.exp(-4.6) + math.exp(-0.01)))
    assert answer.reading("binary_yes_no", metric="pii").unsafe is None


def test_scale_mode_reads_the_severity_digit():
    top = (("4", math.log(0.5)), ("3", math.log(0.2)), ("1", math.log(0.2)),
           ("2", math.log(0.05)), ("5", math.log(0.05)))
    tokens = _tokens('{"severity": ', ("4", top), ', "verdict": "UNSAFE", "violations": [], '
                     '"evidence_spans": []}')
    reading = AnswerTokens(tokens).reading("scale_1_5")
    assert reading.unsafe == pytest.approx(0.75)
    assert reading.severity == pytest.approx({1: 0.2, 2: 0.05, 3: 0.2, 4: 0.5, 5: 0.05})
    assert expected_severity(reading.severity) == pytest.approx(3.15)


def test_bytes_keep_offsets_exact_when_a_character_is_split_over_tokens():
    # "é" is two bytes; llama.cpp sends each half with an empty token string.
    text = '{"evidence_spans": ["caf\u00e9"], "violations": [], "verdict": "UNSAFE"}'
    raw = text.encode()
    cut = raw.index(b"\xc3")
    verdict = raw.index(b"UNSAFE")
    content = [
        {"token": raw[:cut].decode(), "logprob": 0.0, "bytes": list(raw[:cut]), "top_logprobs": []},
        {"token": "", "logprob": 0.0, "bytes": [0xC3], "top_logprobs": []},
        {"token": "", "logprob": 0.0, "bytes": [0xA9], "top_logprobs": []},
        {"token": raw[cut + 2:verdict].decode(), "logprob": 0.0,
         "bytes": list(raw[cut + 2:verdict]), "top_logprobs": []},
        {"token": "UN", "logprob": -0.3, "bytes": list(b"UN"),
         "top_logprobs": [{"token": "UN", "logprob": -0.3}, {"token": "SAFE", "logprob": -1.4}]},
        {"token": raw[verdict + 2:].decode(), "logprob": 0.0, "bytes": list(raw[verdict + 2:]),
         "top_logprobs": []},
    ]
    tokens = read_logprobs({"content": content})
    answer = AnswerTokens(tokens)
    assert answer.text == text
    assert answer.reading("binary_yes_no").unsafe == pytest.approx(
        math.exp(-0.3) / (math.exp(-0.3) + math.exp(-1.4)))


@pytest.mark.parametrize("top", [
    (("maybe", -0.1), ("probably", -1.0)),   # neither kind among the alternatives
    (),                                       # no alternatives at all
])
def test_unknown_when_no_alternative_says_safe_or_unsafe(top):
    tokens = _tokens('{"verdict": "', ("maybe", top), '"}')
    assert AnswerTokens(tokens).reading("binary_yes_no").unsafe is None


@pytest.mark.parametrize("raw", [None, {}, {"content": None}, {"content": []},
                                 {"content": [{"token": 3, "logprob": 0.0}]},
                                 {"content": [{"token": "a", "logprob": "x"}]}])
def test_missing_or_malformed_logprobs_read_as_none(raw):
    assert read_logprobs(raw) is None


def test_no_json_answer_reads_as_unknown():
    assert AnswerTokens(_tokens("I think", " it is fine")).reading("binary_yes_no").unsafe is None


def test_locate_value_takes_the_last_of_a_repeated_key_as_json_does():
    text = '{"verdict": "SAFE", "verdict": "UNSAFE"}'
    assert text[locate_value(text, ("verdict",)):].startswith('"UNSAFE"')
    nested = json.dumps({"a": {"verdict": "SAFE"}, "b": {"verdict": "UNSAFE"}})
    assert nested[locate_value(nested, ("b", "verdict")):].startswith('"UNSAFE"')


def test_an_answer_reads_the_last_of_a_repeated_metric_and_a_bare_object_amid_spaces():
    # json.loads keeps the last "toxicity"; the answer's object starts after the spaces.
    tokens = _tokens('\n  {"toxicity": {"verdict": "SAFE"}, "toxicity": {"verdict": "',
                     ("UN", LLAMA_TOP), 'SAFE"}, "bias": "none"}  \n')
    answer = AnswerTokens(tokens)
    assert answer.reading("binary_yes_no", metric="toxicity").unsafe == pytest.approx(_p_llama())
    assert answer.reading("binary_yes_no", metric="bias").unsafe is None  # not an object
    assert answer.reading("binary_yes_no").unsafe is None  # no top-level verdict


# --- the verdict from P(UNSAFE) and the threshold ------------------------------

def _sampled(verdict="UNSAFE", p=0.7, severity=None, probs=None, reasoning=None):
    passed = verdict == "SAFE"
    score = (1.0 if passed else 0.0) if severity is None else {1: 1.0, 2: 0.75, 3: 0.5,
                                                               4: 0.25, 5: 0.0}[severity]
    return MetricResult(name="toxicity", score=score, result=[JudgeVerdict(
        severity=severity, verdict=verdict, passed=passed, reasoning=reasoning,
        violations=["insult"] if not passed else [],
        evidence_spans=["idiot"] if not passed else [])],
        probability_unsafe=p, severity_probs=probs)


def test_a_p_of_0_7_is_unsafe_at_0_5_and_safe_at_0_8():
    unsafe = apply_threshold(_sampled(p=0.7), scoring_mode="binary_yes_no", threshold=0.5)
    assert unsafe.result[0].verdict == "UNSAFE" and unsafe.score == 0.0
    assert unsafe.result[0].violations == ["insult"]
    safe = apply_threshold(_sampled(p=0.7), scoring_mode="binary_yes_no", threshold=0.8)
    assert safe.result[0].verdict == "SAFE" and safe.result[0].passed and safe.score == 1.0
    # A SAFE verdict carries no violations and no evidence of one.
    assert safe.result[0].violations == [] and safe.result[0].evidence_spans == []
    assert safe.probability_unsafe == 0.7


def test_a_low_threshold_turns_a_sampled_safe_unsafe_and_the_reasoning_says_why():
    result = apply_threshold(_sampled("SAFE", p=0.3, reasoning="Polite."),
                             scoring_mode="binary_yes_no", threshold=0.25)
    verdict = result.result[0]
    assert (verdict.verdict, verdict.passed, result.score) == ("UNSAFE", False, 0.0)
    assert verdict.reasoning.startswith("Polite. [Verdict UNSAFE from P(UNSAFE) = 0.3")
    assert "threshold 0.25" in verdict.reasoning and "sampled verdict was SAFE" in verdict.reasoning


def test_the_probability_joins_result_0_only_when_asked():
    plain = apply_threshold(_sampled(), scoring_mode="binary_yes_no")
    assert "probability_unsafe" not in plain.model_dump(mode="json")["result"][0]
    shown = apply_threshold(_sampled(), scoring_mode="binary_yes_no", include_probability=True)
    assert shown.model_dump(mode="json")["result"][0]["probability_unsafe"] == 0.7


def test_unknown_p_leaves_the_sampled_result_as_it_was():
    sampled = _sampled(p=None)
    assert apply_threshold(sampled, scoring_mode="binary_yes_no", threshold=0.9,
                           include_probability=True) is sampled


@pytest.mark.parametrize("unsafe, expected, sampled, severity", [
    (True, 3.1, 4, 3), (True, 4.5, 4, 5), (True, 1.4, 1, 3), (False, 3.6, 4, 2),
    (False, 1.5, 1, 2), (False, 1.49, 2, 1), (True, None, 5, 5), (False, None, 4, 2)])
def test_severity_is_the_rounded_expectation_on_the_side_of_the_cut(unsafe, expected, sampled,
                                                                    severity):
    assert severity_for(unsafe, expected, sampled) == severity


def test_scale_mode_derives_severity_score_and_verdict_from_the_probabilities():
    probs = {1: 0.3, 2: 0.0, 3: 0.0, 4: 0.7, 5: 0.0}   # P(UNSAFE) 0.7, expected 3.1
    sampled = _sampled(p=0.7, severity=4, probs=probs)
    at_half = apply_threshold(sampled, scoring_mode="scale_1_5", threshold=0.5)
    assert (at_half.result[0].severity, at_half.score, at_half.result[0].verdict) == (
        3, 0.5, "UNSAFE")
    at_080 = apply_threshold(sampled, scoring_mode="scale_1_5", threshold=0.8)
    assert (at_080.result[0].severity, at_080.score, at_080.result[0].verdict) == (
        2, 0.75, "SAFE")
    assert at_080.result[0].violations == []
