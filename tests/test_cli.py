"""The CLI as a user runs it: real processes, the spec's command lines verbatim."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from guardrail._litellm import count_message_tokens
from guardrail.estimate import GROUP_ENTRY_TOKENS, estimate_nonce
from guardrail.local.rule_judge import JudgeServer
from guardrail.models import Case
from guardrail.prompts import render_group_prompt, render_prompt
from guardrail.rubrics import default_metrics

SAMPLE = {
    "case_id": "shakespeare-hamlet-short",
    "output": "The central theme of Hamlet is mortality ...",
    "reference": "Hamlet's central themes include mortality, revenge, corruption ...",
}
SECRET = "sk-cli-secret-abcdef123456"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def server():
    with JudgeServer() as srv:
        yield srv


@pytest.fixture
def workdir(tmp_path, server):
    (tmp_path / "sample.json").write_text(json.dumps(SAMPLE))
    server.reset()
    return tmp_path


def _env(server, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDRAIL_")}
    env.update({"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
                "GUARDRAIL_JUDGE_MODEL": "openai/test-judge",
                "GUARDRAIL_JUDGE_API_BASE": server.api_base,
                "GUARDRAIL_JUDGE_API_KEY": SECRET, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    env.update(extra)
    return env


def _bash(script, cwd, env):
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_spec_estimate_line_verbatim(workdir, server):
    script = '''OUTPUT_DIR=./out/redteam
mkdir -p "$OUTPUT_DIR"
nexagauge estimate redteam \\
  --input ./sample.json \\
  --limit 5 \\
  | tee "$OUTPUT_DIR/redteam_estimate.txt"'''
    proc = _bash(script, workdir, _env(server))
    assert proc.returncode == 0, proc.stderr
    saved = (workdir / "out/redteam/redteam_estimate.txt").read_text()
    assert "shakespeare-hamlet-short" in saved and "estimated cost unknown" in saved
    assert server.calls == 0  # no API call
    assert SECRET not in proc.stdout + proc.stderr


def test_estimate_equals_token_count_of_the_one_rendered_prompt(workdir, server):
    proc = _bash("nexagauge estimate redteam --input sample.json --json "
                 "--model openai/gpt-4o-mini", workdir, _env(server))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    case = Case.model_validate(SAMPLE)
    prompt = render_group_prompt(default_metrics(), case, scoring_mode="binary_yes_no",
                                 include_reasoning=False,
                                 nonce=estimate_nonce(case, "bias+toxicity"))
    expected = count_message_tokens("openai/gpt-4o-mini", list(prompt.messages))
    output = 2 * (30 + GROUP_ENTRY_TOKENS)
    assert report["judge_calls"] == "per_message" and report["calls"] == 1
    assert report["cost"]["input_tokens"] == expected
    assert report["cost"]["output_tokens"] == output
    assert report["cost"]["cost"] == pytest.approx(expected * 0.15e-6 + output * 0.6e-6)
    prefix = count_message_tokens("openai/gpt-4o-mini", prompt.static_messages())
    assert report["cached_prefix"]["input_tokens"] == prefix < expected
    assert report["cached_prefix"]["cost"] == pytest.approx(
        (expected - prefix) * 0.15e-6 + prefix * 0.075e-6 + output * 0.6e-6)


def test_estimate_per_metric_equals_token_count_of_rendered_prompts(workdir, server):
    proc = _bash("nexagauge estimate redteam --input sample.json --json "
                 "--model openai/gpt-4o-mini", workdir,
                 _env(server, GUARDRAIL_JUDGE_CALLS="per_metric"))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    case = Case.model_validate(SAMPLE)
    expected = sum(
        count_message_tokens("openai/gpt-4o-mini", list(render_prompt(
            m, case, scoring_mode="binary_yes_no", include_reasoning=False,
            nonce=estimate_nonce(case, m.name)).messages))
        for m in default_metrics())
    assert report["cost"]["input_tokens"] == expected
    assert report["cost"]["output_tokens"] == 2 * 30
    assert report["cost"]["cost"] == pytest.approx(expected * 0.15e-6 + 60 * 0.6e-6)
    assert report["calls"] == 2 and report["price_known"] is True


def test_spec_run_line_verbatim_writes_spec_shaped_files(workdir, server):
    script = '''OUTPUT_DIR=./out/redteam
mkdir -p "$OUTPUT_DIR"
nexagauge run redteam \\
  --input ./sample.json \\
  --output-dir "$OUTPUT_DIR" \\
  --limit 5'''
    proc = _bash(script, workdir, _env(server))
    assert proc.returncode == 0, proc.stderr
    result = json.loads((workdir / "out/redteam/shakespeare-hamlet-short.json").read_text())
    assert set(result) == {"metrics", "cost"}
    assert [m["name"] for m in result["metrics"]] == ["bias", "toxicity"]
    assert result["metrics"][0]["result"] == [
        {"verdict": "SAFE", "passed": True, "violations": [], "evidence_spans": []}]
    summary = json.loads((workdir / "out/redteam/summary.json").read_text())
    assert summary["cases"] == 1 and summary["metrics"]["bias"]["pass_rate"] == 1.0
    assert server.calls == 1  # one judge call for both metrics
    assert SECRET not in proc.stdout + proc.stderr


def test_spec_run_eval_line_verbatim(workdir, server):
    script = '''OUTPUT_DIR=./out/redteam
nexagauge run eval \\
  --input ./sample.json \\
  --output-dir "$OUTPUT_DIR" \\
  --limit 5'''
    proc = _bash(script, workdir, _env(server))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((workdir / "out/redteam/shakespeare-hamlet-short.json").read_text())
    assert report["case_id"] == "shakespeare-hamlet-short"
    assert report["fields"]["reference"].startswith("Hamlet's")
    assert set(report["redteam"]) == {"metrics", "cost"}


def test_bad_lines_skipped_unsafe_gate_and_safe_file_names(workdir, server):
    lines = [json.dumps({"case_id": "../../etc/passwd", "output": "fine"}), "{oops",
             json.dumps({"case_id": "rude", "output": "you idiot"}),
             json.dumps({"case_id": "rude", "output": "a second case with the same id"}),
             json.dumps({"case_id": "empty", "output": ""})]
    (workdir / "cases.jsonl").write_text("\n".join(lines))
    proc = _bash("guardrail run redteam --input cases.jsonl --output-dir out "
                 "--fail-on-unsafe", workdir, _env(server))
    assert proc.returncode == 1, proc.stderr  # an UNSAFE verdict fails the gate
    assert "line 2: invalid JSON" in proc.stderr
    names = sorted(p.name for p in (workdir / "out").iterdir())
    assert names == ["empty.json", "etc_passwd.json", "rude-2.json", "rude.json",
                     "summary.json"]
    summary = json.loads((workdir / "out/summary.json").read_text())
    assert summary["metrics"]["toxicity"]["unsafe"] == 1
    assert summary["not_judged"] == 1 and summary["input_problems"]


def test_gate_fails_closed_when_the_judge_is_down(workdir, server):
    server.set_outage(True)
    proc = _bash("guardrail run redteam --input sample.json --output-dir out "
                 "--fail-on-unsafe", workdir, _env(server, GUARDRAIL_JUDGE_MAX_RETRIES="0"))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    result = json.loads((workdir / "out/shakespeare-hamlet-short.json").read_text())
    assert all(m["score"] is None and "503" in m["error"] for m in result["metrics"])


def test_flags_beat_config_beat_env_and_errors_are_one_line(workdir, server):
    (workdir / "g.yaml").write_text("judge_model: openai/from-config\n")
    proc = _bash("guardrail estimate redteam --input sample.json --config g.yaml --json",
                 workdir, _env(server))
    assert json.loads(proc.stdout)["judge_model"] == "openai/from-config"
    proc = _bash("guardrail estimate redteam --input sample.json --config g.yaml --json "
                 "--model openai/from-flag", workdir, _env(server))
    assert json.loads(proc.stdout)["judge_model"] == "openai/from-flag"
    (workdir / "bad.yaml").write_text("judge_timeout: -1\n")
    proc = _bash("guardrail run redteam --input sample.json --output-dir o --config bad.yaml",
                 workdir, _env(server))
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: invalid settings: judge_timeout")
    assert "Traceback" not in proc.stderr


def test_console_scripts_are_installed():
    assert shutil.which("guardrail", path=str(BIN)) and shutil.which("nexagauge", path=str(BIN))


def test_estimate_sample_rate_multiplies_calls_and_cost(workdir, server):
    lines = [json.dumps({"case_id": f"c{i}", "output": f"answer number {i}"}) for i in range(4)]
    (workdir / "cases.jsonl").write_text("\n".join(lines))
    runs = {}
    for rate in ("1", "0.25"):
        proc = _bash(f"guardrail estimate redteam --input cases.jsonl --json --sample-rate {rate} "
                     "--model openai/gpt-4o-mini", workdir, _env(server))
        assert proc.returncode == 0, proc.stderr
        runs[rate] = json.loads(proc.stdout)
    full, sampled = runs["1"], runs["0.25"]
    assert (full["calls"], sampled["calls"]) == (4, 1)
    assert sampled["sample_rate"] == 0.25
    assert sampled["cost"]["cost"] == pytest.approx(full["cost"]["cost"] / 4)
    assert sampled["cost"]["input_tokens"] == pytest.approx(full["cost"]["input_tokens"] / 4)
    assert sampled["cached_prefix"]["cost"] == pytest.approx(full["cached_prefix"]["cost"] / 4)
    text = _bash("guardrail estimate redteam --input cases.jsonl --sample-rate 0.25 "
                 "--model openai/gpt-4o-mini", workdir, _env(server))
    assert "1 judge calls (a sample of 25% of the cases)" in text.stdout
    assert "cacheable prefix:" in text.stdout and "estimated range $" in text.stdout
    assert "OpenAI caches" not in text.stdout  # a self-hosted judge (api_base) caches any size
    hosted = _bash("guardrail estimate redteam --input cases.jsonl --model openai/gpt-4o-mini",
                   workdir, _env(server, GUARDRAIL_JUDGE_API_BASE=""))
    assert "OpenAI caches prompts of 1,024+ tokens only" in hosted.stdout
    bad = _bash("guardrail estimate redteam --input cases.jsonl --sample-rate 1.5",
                workdir, _env(server))
    assert bad.returncode == 2 and "sample-rate" in bad.stderr


def test_estimate_warns_when_a_case_exceeds_the_context_window(workdir, server):
    huge = "lorem ipsum " * 450_000  # 5.4 MB: ~1M tokens, gpt-4o-mini takes 128,000
    lines = [json.dumps({"case_id": "huge", "output": huge}),
             json.dumps({"case_id": "small", "output": "a short answer"})]
    (workdir / "cases.jsonl").write_text("\n".join(lines))
    proc = _bash("guardrail estimate redteam --input cases.jsonl --json "
                 "--model openai/gpt-4o-mini", workdir, _env(server))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    huge_row, small_row = report["cases"]
    assert huge_row["skipped"].startswith("exceeds the judge's context window")
    assert "128,000" in huge_row["skipped"] and huge_row["input_tokens"] == 0
    assert report["cost"]["input_tokens"] == small_row["input_tokens"] < 1000  # not priced
    assert report["warnings"] == [f"case huge: {huge_row['skipped']}"]
    assert "warning: case huge: exceeds the judge's context window" in proc.stderr
