"""BatchSummary: what counts as judged, the grouped reasons, and the gate's exit codes."""

from pathlib import Path

import pytest

from guardrail.batch.run import (EXIT_INPUT_INCOMPLETE, EXIT_NOT_JUDGED, EXIT_PASS, EXIT_UNSAFE,
                             BatchSummary, report_folder)
from guardrail.judging.evaluate import MISSING_OUTPUT
from guardrail.judging.models import CostEstimate, JudgeVerdict, MetricResult, RedteamMetrics

DOWN = "judge unavailable after 4 attempts: HTTP 503: judge outage"


def _verdict(name: str, safe: bool = True) -> MetricResult:
    verdict = JudgeVerdict(verdict="SAFE" if safe else "UNSAFE", passed=safe)
    return MetricResult(name=name, score=1.0 if safe else 0.0, result=[verdict])


def _error(name: str, reason: str) -> MetricResult:
    return MetricResult(name=name, score=None, error=reason)


def _case(*metrics: MetricResult) -> RedteamMetrics:
    return RedteamMetrics(metrics=list(metrics), cost=CostEstimate())


def _summary(*cases: RedteamMetrics, skipped: int = 0) -> BatchSummary:
    summary = BatchSummary(input_problems=[f"line {i}: not valid UTF-8" for i in range(skipped)])
    for number, case in enumerate(cases):
        summary.add(f"c{number}", case)
    return summary


def test_a_case_is_judged_only_when_every_metric_got_a_verdict():
    summary = _summary(_case(_verdict("bias"), _verdict("toxicity")),
                       _case(_verdict("bias"), _error("toxicity", DOWN)),
                       _case(_error("bias", DOWN), _error("toxicity", DOWN)))
    assert (summary.cases, summary.judged, summary.not_judged) == (3, 1, 2)
    assert summary.metrics["toxicity"]["errors"] == 2
    assert summary.metrics["bias"]["pass_rate"] == 1.0


def test_reasons_are_grouped_and_counted_most_frequent_first():
    summary = _summary(_case(_error("bias", MISSING_OUTPUT), _error("toxicity", MISSING_OUTPUT)),
                       _case(_error("bias", DOWN), _error("toxicity", DOWN)),
                       _case(_error("bias", DOWN), _verdict("toxicity")))
    assert list(summary.not_judged_reasons().items()) == [(DOWN, 3), (MISSING_OUTPUT, 2)]
    assert summary.to_json()["not_judged_reasons"] == {DOWN: 3, MISSING_OUTPUT: 2}


SAFE_CASE = _case(_verdict("bias"), _verdict("toxicity"))
UNSAFE_CASE = _case(_verdict("bias"), _verdict("toxicity", safe=False))
DOWN_CASE = _case(_error("bias", DOWN), _error("toxicity", DOWN))


@pytest.mark.parametrize("cases, skipped, code", [
    ((SAFE_CASE,), 0, EXIT_PASS),
    ((), 0, EXIT_INPUT_INCOMPLETE),                    # an empty file is not a pass
    ((), 1, EXIT_INPUT_INCOMPLETE),                    # its only line was invalid
    ((SAFE_CASE,), 1, EXIT_INPUT_INCOMPLETE),          # the skipped line may have been toxic
    ((SAFE_CASE, DOWN_CASE), 0, EXIT_NOT_JUDGED),
    ((SAFE_CASE, DOWN_CASE), 1, EXIT_NOT_JUDGED),      # unjudged beats skipped
    ((UNSAFE_CASE, DOWN_CASE), 1, EXIT_UNSAFE),        # unsafe beats both
    ((UNSAFE_CASE,), 0, EXIT_UNSAFE),
])
def test_gate_never_passes_what_it_did_not_read_and_judge(cases, skipped, code):
    gate_code, reason = _summary(*cases, skipped=skipped).gate()
    assert gate_code == code, reason
    assert _summary(*cases, skipped=skipped).gate_exit_code() == code


def test_gate_says_why():
    assert "1 input record(s) skipped" in _summary(SAFE_CASE, skipped=1).gate()[1]
    assert "no case" in _summary().gate()[1]
    assert "2 metric(s) of 1 case(s) not judged" in _summary(DOWN_CASE).gate()[1]


def test_eval_writes_beside_redteam_not_over_it():
    out = Path("out")
    assert report_folder(out, "redteam") == out
    assert report_folder(out, "eval") == out / "eval"


@pytest.mark.parametrize("cases, code", [
    ((DOWN_CASE, DOWN_CASE), EXIT_NOT_JUDGED),         # read, none judged
    ((_case(_verdict("bias", safe=False), _error("toxicity", DOWN)),), EXIT_NOT_JUDGED),
    ((SAFE_CASE, DOWN_CASE), None),                    # some judged: the gate's business
    ((UNSAFE_CASE,), None),
    ((), None),                                        # no case: nothing left unjudged
])
def test_without_the_gate_only_a_run_that_judged_no_case_fails(cases, code):
    outcome = _summary(*cases).nothing_judged()
    assert (outcome and outcome[0]) == code
    if code is not None:
        assert f"none of the {len(cases)} case(s)" in outcome[1]


@pytest.mark.parametrize("address", [
    "host 127.0.0.1:50167", "host judge.internal.example.com:8000", "host [::1]:8090",
    "http://judge.internal.example.com:8000/v1/chat/completions"])
def test_a_cut_reason_keeps_the_address_whole(address):
    from guardrail.cli.batch import REASON_WIDTH, not_judged_line

    head = "judge unavailable after 4 attempts: ClientConnectorError: Cannot connect to "
    reason = head + address + " ssl:default [Connect call failed] " + "x" * 80
    line = not_judged_line({reason: 2})
    assert address in line and line.endswith("…)")
    assert len(line) < len("metrics not judged: 2 ()") + REASON_WIDTH + len(address)
    plain = "y" * 200  # no address in it: cut at the width, as before
    assert not_judged_line({plain: 1}) == f"metrics not judged: 1 ({'y' * (REASON_WIDTH - 1)}…)"
