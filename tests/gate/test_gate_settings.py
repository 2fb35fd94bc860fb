"""Gate mode's settings: where they come from, and what makes the worker refuse to
start (anything that would let a record through unjudged)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from guardrail.config import load_settings
from guardrail.errors import ConfigError
from guardrail.gate import check_gate, gate_topics


def test_flat_names_env_and_a_nested_block_all_set_the_gate():
    assert not load_settings(environ={}).gate.gate
    env = load_settings(environ={"GUARDRAIL_GATE": "true", "GUARDRAIL_GATE_ORDER": "partition"})
    assert env.gate.gate and env.gate.gate_order == "partition"
    nested = load_settings(environ={}, gate={"gate": True, "approved_topic": "ok"})
    assert nested.gate.gate and nested.gate.approved_topic == "ok"
    assert load_settings(environ={}, gate=True).gate.gate  # the flat name, a boolean


def test_gate_mode_refuses_sampling_and_one_topic_for_both():
    for sampling in ({"sample_rate": 0.5}, {"sample_rules": [{"rate": 1.0}]}):
        s = load_settings(environ={}, gate=True, **sampling)
        with pytest.raises(ConfigError, match="gate mode judges every record"):
            check_gate(s.gate, s.sampling)
    s = load_settings(environ={}, gate=True, approved_topic="x", held_topic="x")
    with pytest.raises(ConfigError, match="approved_topic and held_topic"):
        check_gate(s.gate, s.sampling)
    off = load_settings(environ={}, sample_rate=0.5)
    check_gate(off.gate, off.sampling)  # no gate: sampling is fine
    budget = load_settings(environ={}, gate=True, budget_tokens_per_hour=1000)
    check_gate(budget.gate, budget.sampling)  # a budget's cut is held, not passed


def test_gate_mode_judges_each_model_call_unless_agent_runs_is_set():
    assert load_settings(environ={}).runs.agent_runs
    assert not load_settings(environ={"GUARDRAIL_GATE": "true"}).runs.agent_runs
    assert not load_settings(environ={}, gate={"gate": "yes"}).runs.agent_runs
    chosen = load_settings(environ={"GUARDRAIL_GATE": "true", "GUARDRAIL_AGENT_RUNS": "true"})
    assert chosen.runs.agent_runs  # runs whole: their spans pass the gate as NONE


def test_holds_that_wait_for_a_reviewer_need_the_review_queue(tmp_path):
    for setting in ("gate_hold_blocks_key", "gate_session_hold"):
        s = load_settings(environ={}, gate=True, **{setting: True})
        with pytest.raises(ConfigError, match=f"{setting}.*GUARDRAIL_REVIEW_USERS_FILE"):
            check_gate(s.gate, s.sampling, s.review)
        users = tmp_path / "users"
        users.write_text("")
        on = load_settings(environ={}, gate=True, review_users_file=users, **{setting: True})
        check_gate(on.gate, on.sampling, on.review)


def test_the_gate_topics_are_partitioned_like_the_input_and_only_in_gate_mode():
    s = load_settings(environ={}, gate=True, topic_partitions=3)
    assert gate_topics(s.gate, 3) == {"model-outputs-approved": 3, "model-outputs-held": 3}
    assert gate_topics(load_settings(environ={}).gate, 3) == {}


def test_the_worker_says_why_it_will_not_start_with_sampling_in_gate_mode(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDRAIL_")}
    env.update(GUARDRAIL_GATE="true", GUARDRAIL_SAMPLE_RATE="0.1",
               GUARDRAIL_BOOTSTRAP_SERVERS="127.0.0.1:1", LITELLM_LOCAL_MODEL_COST_MAP="True")
    proc = subprocess.run([sys.executable, "-m", "guardrail.cli", "worker"], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "gate mode judges every record" in proc.stderr and "Traceback" not in proc.stderr
