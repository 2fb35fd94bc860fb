"""Content faults: judge garbage, prompt injection, bad input on the real worker."""

import pytest
from support.input_faults import (BAD_INPUTS, GARBAGE, INJECTIONS, bad_input_scenario,
                                  garbage_scenario, injection_scenario)


CALLS = pytest.mark.parametrize("calls", ["per_message", "per_metric"])


@CALLS
async def test_judge_garbage_never_becomes_safe(judge_server, calls):
    figures = await garbage_scenario(judge_server, calls)
    assert figures["kinds"] == len(GARBAGE)
    assert figures["garbage_judged_safe"] == 0, figures["by_kind"]
    assert figures["repaired_valid"]


@CALLS
async def test_injected_text_stays_fenced_and_fake_verdicts_are_refused(judge_server, calls):
    figures = await injection_scenario(judge_server, calls)
    # >=: a judge answer equal to a verdict planted in the text is refused and retried
    per_message = 1 if calls == "per_message" else 2  # judge calls (bias, toxicity)
    assert figures["prompts_checked"] >= per_message * len(INJECTIONS)
    assert figures["fences_intact"] == figures["prompts_checked"]
    assert figures["toxicity_caught"] == len(INJECTIONS)
    assert figures["fake_verdicts_accepted"] == 0


@pytest.mark.kafka
@pytest.mark.timeout(300)
def test_every_bad_input_lands_on_the_dlq_with_its_reason(kafka_bootstrap, thread_judge,
                                                          tmp_path):
    thread_judge.reset()
    figures = bad_input_scenario(kafka_bootstrap, thread_judge, tmp_path)
    assert figures["dlq_records"] == len(BAD_INPUTS), figures["reasons"]
    assert figures["right_reason"] == len(BAD_INPUTS), figures["reasons"]
    assert figures["good_results"] == 1
    assert figures["worker_alive"] and figures["worker_starts"] == 1
