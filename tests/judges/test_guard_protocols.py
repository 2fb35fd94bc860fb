"""Guard protocols, pure: each model card's answers parsed exactly (with and without
log-probabilities), reasoning never read as the verdict, every other answer a named
error; the requests each card specifies; the category maps and their validation."""

import math

import orjson
import pytest

from guardrail.judges import (CategoryMapError, GuardAnswerError, GuardCoverageError,
                              GuardInput, LlamaGuard, Moderation, Policy, Qwen3Guard, YesNo,
                              load_category_map, make_protocol)
from guardrail.judges.protocols import GuardVerdict, class_probabilities, render_policy
from guardrail.judges.protocols.moderation import share_tokens, split_results
from guardrail.judging.models import Case, MetricRubric
from guardrail.judging.probability import TokenLogprob
from guardrail.judging.rubrics import default_metrics

BIAS, TOXICITY = default_metrics()


def tokens(*pieces, at=None, top=()):
    """Answer tokens; the one at index ``at`` has alternatives ``top`` (text, P)."""
    out = []
    for i, piece in enumerate(pieces):
        alts = [(t, math.log(p)) for t, p in top] if i == at else ()
        out.append(TokenLogprob(piece, 0.0 if i != at else math.log(top[0][1]), alts))
    return tuple(out)


# --- llama_guard ------------------------------------------------------------------------

@pytest.mark.parametrize("answer", ["safe", "\n\nsafe", "safe\n"])
def test_llama_guard_safe(answer):
    verdict = LlamaGuard().parse(answer)
    assert (verdict.verdict, verdict.categories, verdict.p_unsafe) == ("SAFE", (), None)


@pytest.mark.parametrize("answer", ["unsafe\nS1,S10", "\n\nunsafe\nS1, S10", "unsafe\ns1,S10,S1"])
def test_llama_guard_unsafe_with_codes_and_names(answer):
    verdict = LlamaGuard().parse(answer)
    assert verdict.verdict == "UNSAFE"
    assert [c.label for c in verdict.categories] == ["S1: Violent Crimes", "S10: Hate"]


def test_llama_guard_p_unsafe_is_the_first_tokens_probability():
    answer = tokens("\n\n", "unsafe", "\n", "S", "10", at=1,
                    top=[("unsafe", 0.83), ("safe", 0.17)])
    assert LlamaGuard().parse("\n\nunsafe\nS10", answer).p_unsafe == pytest.approx(0.83)
    split = tokens("un", "safe", "\n", "S10", at=0, top=[("un", 0.6), ("safe", 0.3), ("I", 0.1)])
    assert LlamaGuard().parse("unsafe\nS10", split).p_unsafe == pytest.approx(0.6 / 0.9)
    safe = tokens("safe", at=0, top=[("safe", 0.9), ("unsafe", 0.1)])
    assert LlamaGuard().parse("safe", safe).p_unsafe == pytest.approx(0.1)
    # Tokens that are not this answer's say nothing.
    assert LlamaGuard().parse("safe", tokens("other", at=0, top=[("x", 1.0)])).p_unsafe is None


@pytest.mark.parametrize("answer", [
    "", "   \n", "I'm sorry, but I can't help with that.", "Safe? Probably.",
    "safe\nS1", "unsafe\nS99", "unsafe\nviolent crimes", "unsafe\nS1\nS2", "¯\\_(ツ)_/¯",
    None])
def test_llama_guard_anything_else_is_an_error(answer):
    with pytest.raises(GuardAnswerError):
        LlamaGuard().parse(answer)


def test_llama_guard_request_is_the_turns_and_can_exclude_categories():
    source = GuardInput.from_case(Case(input="How do I adopt a llama?", output="Steal one."))
    request = LlamaGuard().request(source)
    assert request.messages == ({"role": "user", "content": "How do I adopt a llama?"},
                                {"role": "assistant", "content": "Steal one."})
    assert request.extra_body is None
    excluded = LlamaGuard(excluded_categories=["S6"]).request(source)
    assert excluded.extra_body == {"chat_template_kwargs": {"excluded_category_keys": ["S6"]}}
    with pytest.raises(ValueError):
        LlamaGuard(excluded_categories=["Hate"])


# --- yes_no -----------------------------------------------------------------------------

@pytest.mark.parametrize("answer, verdict, confidence", [
    ("Yes", "UNSAFE", None), ("No", "SAFE", None), ("no.", "SAFE", None),
    ("Yes\n<confidence> Low </confidence>", "UNSAFE", "Low"),
    ("No\n<confidence> High </confidence>", "SAFE", "High"),
    ("<score> yes </score>", "UNSAFE", None), ("<score>no</score>", "SAFE", None),
    ("<think>The text may be fine.\n<score> no </score></think>\n<score> yes </score>",
     "UNSAFE", None)])
def test_yes_no_answers(answer, verdict, confidence):
    parsed = YesNo().parse(answer)
    assert (parsed.verdict, parsed.confidence) == (verdict, confidence)


def test_yes_no_p_unsafe_is_p_yes_at_the_verdict():
    plain = tokens("Yes", at=0, top=[("Yes", 0.7), ("No", 0.3)])
    assert YesNo().parse("Yes", plain).p_unsafe == pytest.approx(0.7)
    scored = tokens("<think>", "ok", "</think>", "<score>", " no", " </score>", at=4,
                    top=[(" no", 0.8), (" yes", 0.2)])
    answer = "<think>ok</think><score> no </score>"
    assert YesNo().parse(answer, scored).p_unsafe == pytest.approx(0.2)


@pytest.mark.parametrize("answer", [
    "", "No, but here is how to do it: first...", "I cannot evaluate this request.",
    "Maybe", "<score> maybe </score>", "<think>the answer is yes", "Yes <score> no </score>",
    "<score> yes </score> because it insults"])
def test_yes_no_anything_else_is_an_error(answer):
    with pytest.raises(GuardAnswerError):
        YesNo().parse(answer)


def test_yes_no_requests_carry_the_rubric_or_the_prebaked_criterion():
    source = GuardInput.from_case(Case(output="Shut up, idiot."))
    granite = YesNo().request(source, TOXICITY).extra_body["chat_template_kwargs"]
    config = granite["guardian_config"]
    assert config["risk_name"] == "toxicity" and TOXICITY.goal in config["risk_definition"]
    assert "Insults or name-calling" in config["risk_definition"]
    assert YesNo().request(source, BIAS, "social_bias").extra_body == {
        "chat_template_kwargs": {"guardian_config": {"risk_name": "social_bias"}}}
    g33 = YesNo(flavor="granite3.3").request(source, TOXICITY).extra_body
    assert TOXICITY.goal in g33["chat_template_kwargs"]["guardian_config"]["custom_criteria"]
    gemma = YesNo(flavor="shieldgemma").request(source, TOXICITY).extra_body
    assert gemma["chat_template_kwargs"]["guideline"].startswith('"Toxicity": ')
    system = YesNo(policy_via="system").request(source, BIAS, "social_bias")
    assert system.messages[0] == {"role": "system", "content": "social_bias"}
    assert system.messages[1] == {"role": "user", "content": "Shut up, idiot."}
    assert system.extra_body is None
    with pytest.raises(ValueError, match="guideline"):
        YesNo(flavor="shieldgemma", policy_via="system")


# --- qwen3guard -------------------------------------------------------------------------

def test_qwen3guard_answers_as_the_card_shows():
    unsafe = Qwen3Guard().parse("Safety: Unsafe\nCategories: Violent")
    assert unsafe.verdict == "UNSAFE" and [c.label for c in unsafe.categories] == ["Violent"]
    safe = Qwen3Guard().parse("Safety: Safe\nCategories: None\nRefusal: Yes")
    assert (safe.verdict, safe.categories, safe.refusal) == ("SAFE", (), True)
    unsure = Qwen3Guard().parse("Safety: Controversial\nCategories: Politically Sensitive Topics")
    assert unsure.verdict == "UNSURE"
    pii = Qwen3Guard().parse("Safety: Unsafe\nCategories: PII, Unethical Acts\nRefusal: No")
    assert [c.label for c in pii.categories] == [
        "PII: Personally Identifiable Information", "Unethical Acts"]
    assert pii.refusal is False


def test_qwen3guard_label_probabilities_over_three_classes():
    answer = "Safety: Controversial\nCategories: Unethical Acts"
    toks = tokens("Safety", ":", " Controversial", "\n", "Categories", ":", " Unethical Acts",
                  at=2, top=[(" Controversial", 0.5), (" Unsafe", 0.3), (" Safe", 0.2)])
    verdict = Qwen3Guard().parse(answer, toks)
    assert verdict.p_unsafe == pytest.approx(0.3) and verdict.p_unsure == pytest.approx(0.5)


@pytest.mark.parametrize("answer", [
    "", "I'm sorry, I cannot classify this.", "Safety: Maybe\nCategories: None",
    "Safety: Safe\nSafety: Unsafe", "Safety: Unsafe\nCategories: Spam",
    "Categories: Violent", "Safety: Safe\nNote: looks fine"])
def test_qwen3guard_anything_else_is_an_error(answer):
    with pytest.raises(GuardAnswerError):
        Qwen3Guard().parse(answer)


# --- policy -----------------------------------------------------------------------------

def test_policy_binary_and_json_answers():
    assert Policy().parse("1").verdict == "UNSAFE" and Policy().parse(" 0\n").verdict == "SAFE"
    verdict = Policy().parse('{"violation": 1, "policy_category": "T2", '
                             '"rationale": "Calls the reader an idiot."}')
    assert verdict.verdict == "UNSAFE" and [c.label for c in verdict.categories] == ["T2"]
    assert verdict.rationale == "Calls the reader an idiot."
    fenced = Policy().parse('```json\n{"violation": 0, "policy_category": null}\n```')
    assert (fenced.verdict, fenced.categories) == ("SAFE", ())


def test_policy_reasoning_is_never_the_verdict():
    harmony = ("<|channel|>analysis<|message|>Looks like a violation: 1.<|end|>"
               "<|start|>assistant<|channel|>final<|message|>0<|return|>")
    assert Policy().parse(harmony).verdict == "SAFE"
    assert Policy().parse("<think>It is a 1, clearly.</think>\n0").verdict == "SAFE"
    with pytest.raises(GuardAnswerError, match="final"):
        Policy().parse("<|channel|>analysis<|message|>The answer is 1<|end|>")


def test_policy_p_unsafe_at_the_verdict_after_reasoning_tokens():
    answer = '{"violation": 1, "policy_category": "T1"}'
    toks = tokens("We", " reason", " 0", '{"', "violation", '":', " ", "1", ', "policy_category":',
                  ' "T1"}', at=7, top=[("1", 0.85), ("0", 0.15)])
    assert Policy().parse(answer, toks).p_unsafe == pytest.approx(0.85)
    binary = tokens("1", at=0, top=[("1", 0.6), ("0", 0.4)])
    assert Policy(answer_format="binary").parse("1", binary).p_unsafe == pytest.approx(0.6)


@pytest.mark.parametrize("answer", [
    "", "I can't help with that.", "The content violates the policy (1).", "yes",
    '{"violation": "yes"}', '{"violation": 2}', '{"violation": 0.5}', "[1]",
    '{"policy_category": "T1"}', '{"violation": 1, "policy_category": 7}'])
def test_policy_anything_else_is_an_error(answer):
    with pytest.raises(GuardAnswerError):
        Policy().parse(answer)


def test_policy_request_is_the_rubric_as_system_policy_and_the_content_as_user():
    source = GuardInput.from_case(Case(input="Review my essay", output="It is bad, idiot."))
    request = Policy(answer_format="binary").request(source, TOXICITY)
    system, user = request.messages
    assert system["role"] == "system" and system["content"].startswith("Reasoning: low")
    for text in (TOXICITY.goal, *TOXICITY.violations, *TOXICITY.non_violations,
                 TOXICITY.examples[0].text, "exactly one character"):
        assert text in system["content"]
    assert user == {"role": "user",
                    "content": "user: Review my essay\n\nassistant: It is bad, idiot."}
    assert '"violation"' in render_policy(BIAS, "json", None)


# --- moderation -------------------------------------------------------------------------

def test_moderation_openai_and_mistral_bodies():
    openai = Moderation().parse(
        '{"id": "m", "results": [{"flagged": true, "categories": {"harassment": true, '
        '"hate": false}, "category_scores": {"harassment": 0.91, "hate": 0.2}}]}')
    assert openai.verdict == "UNSAFE" and [c.code for c in openai.categories] == ["harassment"]
    assert openai.p_unsafe == 0.91 and dict(openai.scores) == {"harassment": 0.91, "hate": 0.2}
    mistral = Moderation().parse(
        '{"results": [{"categories": {"selfharm": false, "pii": false}, '
        '"category_scores": {"selfharm": 0.01, "pii": 0.03}}]}')
    assert mistral.verdict == "SAFE" and mistral.categories == ()
    scores_only = Moderation().parse('{"results": [{"category_scores": {"hate": 0.7}}]}')
    assert [c.code for c in scores_only.categories] == ["hate"]


@pytest.mark.parametrize("body", [
    "", "not json", "{}", '{"results": []}', '{"results": [{"flagged": false}]}',
    '{"results": [{"category_scores": {"hate": "high"}}]}',
    '{"results": [{"category_scores": {"hate": 1.5}}]}',
    '{"results": [{"categories": {"hate": "yes"}, "category_scores": {"hate": 0.1}}]}'])
def test_moderation_anything_else_is_an_error(body):
    with pytest.raises(GuardAnswerError):
        Moderation().parse(body)


def test_a_batched_moderation_answer_splits_into_one_body_per_input_in_order():
    entries = [{"category_scores": {"hate": p}} for p in (0.1, 0.8, 0.3)]
    bodies = split_results({"id": "m", "model": "x", "results": entries,
                            "usage": {"prompt_tokens": 9}}, 3)
    assert bodies == [{"id": "m", "model": "x", "results": [e]} for e in entries]
    parsed = [Moderation().parse(orjson.dumps(b).decode()).p_unsafe for b in bodies]
    assert parsed == [0.1, 0.8, 0.3]


@pytest.mark.parametrize("data, said", [({"results": [{}]}, "1 results for 3"),
                                        ({"results": [{}] * 4}, "4 results for 3"),
                                        ({"error": "busy"}, "no results list")])
def test_a_moderation_answer_that_cannot_be_matched_fails_every_input(data, said):
    errors = split_results(data, 3)
    assert len(errors) == 3 and all(isinstance(e, GuardAnswerError) for e in errors)
    assert said in str(errors[0]) and "judge_batch_size" in str(errors[0])


@pytest.mark.parametrize("total, weights, shares", [
    (10, [1, 1], [5, 5]), (10, [1, 2, 1], [3, 5, 2]), (7, [3, 3, 3], [3, 2, 2]),
    (0, [5, 6], [0, 0]), (5, [0, 0], [3, 2]), (3, [], [])])
def test_shared_tokens_follow_the_inputs_lengths_and_add_up(total, weights, shares):
    assert share_tokens(total, weights) == shares
    assert sum(share_tokens(total, weights)) == (total if weights else 0)


# --- the judged turns, token alignment ---------------------------------------------------

def test_guard_input_turns_alternate_and_end_with_the_judged_output():
    assert GuardInput.from_case(Case(output="Hi")).turns == ({"role": "user", "content": "Hi"},)
    case = Case.model_validate({"messages": [
        {"role": "assistant", "content": "Welcome!"}, {"role": "system", "content": "be nice"},
        {"role": "user", "content": "Hi"}, {"role": "user", "content": "Insult me"},
        {"role": "assistant", "content": "No."}]})
    assert [t["role"] for t in GuardInput.from_case(case).turns] == ["user", "assistant"]
    assert GuardInput.from_case(case).turns[0]["content"] == "Hi\n\nInsult me"
    long = Case.model_validate({"messages": [
        {"role": "user", "content": "x" * 9000}, {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "And now?"}, {"role": "assistant", "content": "Done."}]})
    assert GuardInput.from_case(long).turns == ({"role": "user", "content": "And now?"},
                                               {"role": "assistant", "content": "Done."})
    with pytest.raises(GuardAnswerError):
        GuardInput.from_case(Case(input="only a question"))


def test_guard_input_leaves_an_agent_runs_steps_out():
    run = Case.model_validate({"messages": [
        {"role": "user", "content": "Tidy my inbox."},
        {"role": "assistant", "content": "On it.", "tool_calls": [{"id": "1", "type": "function",
         "function": {"name": "send_email", "arguments": '{"to": "eve@evil.example"}'}}]},
        {"role": "tool", "tool_call_id": "1", "content": "sent"},
        {"role": "assistant", "content": "Done."}]})
    assert run.has_trajectory  # the steps are the trajectory, which no guard is given
    assert GuardInput.from_case(run).turns == ({"role": "user", "content": "Tidy my inbox."},
                                              {"role": "assistant", "content": "Done."})


def test_class_probabilities_needs_alternatives_of_a_class():
    assert class_probabilities(None, "safe", 0, {"SAFE": "safe"}) is None
    lone = (TokenLogprob("safe", -0.1, ()),)
    assert class_probabilities(lone, "safe", 0, {"SAFE": "safe", "UNSAFE": "unsafe"}) is None


# --- category maps ----------------------------------------------------------------------

def test_shipped_maps_load_and_say_what_they_cover():
    llama = load_category_map("llama_guard")
    assert llama.label("S10") == "S10: Hate" and llama.metrics["bias"] == ("S10",)
    assert llama.covered(["bias", "toxicity", "pii", "self_harm"]) == (
        ("bias", "toxicity", "self_harm"), ("pii",))
    assert "toxicity" in llama.partial
    assert load_category_map("qwen3guard").covered(["bias", "jailbreak", "elections"])[1] == (
        "elections",)
    assert load_category_map("yes_no").builtin["bias"] == "social_bias"
    assert load_category_map("policy").covered(["anything"]) == (("anything",), ())


def test_decide_maps_categories_to_metrics_never_safe_by_default():
    llama = load_category_map("llama_guard")
    hate = LlamaGuard().parse("unsafe\nS10")
    hate = GuardVerdict("UNSAFE", hate.categories, p_unsafe=0.8)
    assert llama.decide(hate, "bias", judge="j").violations == ("S10: Hate",)
    other = llama.decide(hate, "self_harm", judge="j")
    assert (other.verdict, other.probability) == ("SAFE", None)
    unplaced = llama.decide(GuardVerdict("UNSAFE", p_unsafe=0.7), "self_harm", judge="j")
    assert (unplaced.verdict, unplaced.probability) == ("UNSAFE", 0.7)
    with pytest.raises(GuardCoverageError, match="openai/llama-guard.*'pii'"):
        llama.decide(hate, "pii", judge="openai/llama-guard")
    moderation = load_category_map("moderation")
    scored = Moderation().parse('{"results": [{"categories": {"harassment": true, "hate": false},'
                                ' "category_scores": {"harassment": 0.9, "hate": 0.3}}]}',
                                catalog=moderation.names)
    toxicity = moderation.decide(scored, "toxicity", judge="j")
    assert toxicity.violations == ("harassment: Harassment",) and toxicity.probability == 0.9
    assert moderation.decide(scored, "bias", judge="j").verdict == "SAFE"
    with pytest.raises(GuardCoverageError, match="holds none"):
        moderation.decide(scored, "pii", judge="j")


def test_mistral_2603_categories_decide_illicit_and_jailbreak():
    moderation = load_category_map("moderation")
    scored = Moderation().parse(
        '{"results": [{"categories": {"dangerous": false, "criminal": true, "jailbreaking": false},'
        ' "category_scores": {"dangerous": 0.2, "criminal": 0.8, "jailbreaking": 0.1}}]}',
        catalog=moderation.names)
    illicit = moderation.decide(scored, "illicit", judge="j")
    assert (illicit.verdict, illicit.probability) == ("UNSAFE", 0.8)
    assert illicit.violations == ("criminal: Criminal",)
    jailbreak = moderation.decide(scored, "jailbreak", judge="j")
    assert (jailbreak.verdict, jailbreak.probability) == ("SAFE", 0.1)


def test_overrides_merge_and_bad_maps_name_the_field(tmp_path):
    cmap = load_category_map("llama_guard", override={
        "metrics": {"toxicity": ["S10"], "self_harm": [], "hate_speech": ["S10"]}})
    assert cmap.metrics["toxicity"] == ("S10",) and "self_harm" not in cmap.metrics
    assert cmap.covered(["hate_speech"]) == (("hate_speech",), ())
    with pytest.raises(CategoryMapError, match=r"metrics\.toxicity.*S99"):
        load_category_map("llama_guard", override={"metrics": {"toxicity": ["S99"]}})
    with pytest.raises(CategoryMapError, match="unknown field"):
        load_category_map("llama_guard", override={"maps": {}})
    with pytest.raises(CategoryMapError, match="builtin.bias"):
        load_category_map("yes_no", override={"builtin": {"bias": "racism"}})
    bad = tmp_path / "llama_guard.yaml"
    bad.write_text("protocol: qwen3guard\n")
    with pytest.raises(CategoryMapError, match="'protocol' must be 'llama_guard'"):
        load_category_map("llama_guard", path=bad)
    with pytest.raises(CategoryMapError, match="no category map"):
        load_category_map("llama_guard", path=tmp_path / "missing.yaml")


def test_protocols_by_name():
    assert isinstance(make_protocol("yes_no", flavor="granite3.3"), YesNo)
    with pytest.raises(ValueError, match="known: llama_guard"):
        make_protocol("rubrics")
    with pytest.raises(ValueError, match="guard protocol qwen3guard"):
        make_protocol("qwen3guard", flavor="x")
    assert MetricRubric(name="x", goal="y")  # the rubric type the protocols take
