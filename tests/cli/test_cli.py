"""The CLI as a user runs it: real processes, the spec's command lines verbatim."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from guardrail.providers.litellm import count_message_tokens
from guardrail.batch.estimate import GROUP_ENTRY_TOKENS, estimate_nonce
from guardrail.local.rule_judge import ErrorReply, JudgeServer
from guardrail.judging.models import Case
from guardrail.judging.prompts import render_group_prompt, render_prompt
from guardrail.judging.rubrics import default_metrics

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
    run = _estimate_here(workdir, server, "--json", "--model", "openai/gpt-4o-mini",
                         input_name="sample.json")
    assert run.exit_code == 0, run.output
    report = json.loads(run.stdout)
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
    run = _estimate_here(workdir, server, "--json", "--model", "openai/gpt-4o-mini",
                         input_name="sample.json", GUARDRAIL_JUDGE_CALLS="per_metric")
    assert run.exit_code == 0, run.output
    report = json.loads(run.stdout)
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


def test_estimate_gives_the_cascade_ceiling_priced_for_the_escalation_model(workdir, server):
    lines = [json.dumps({"case_id": f"c{i}", "output": f"answer number {i}"}) for i in range(4)]
    (workdir / "cases.jsonl").write_text("\n".join(lines))
    cascade = {"GUARDRAIL_ESCALATE_MODEL": "openai/gpt-4o", "GUARDRAIL_ESCALATE_BAND": "0.3,0.7"}
    run = _estimate_here(workdir, server, "--json", "--sample-rate", "0.5",
                         "--model", "openai/gpt-4o-mini", **cascade)
    assert run.exit_code == 0, run.output
    report = json.loads(run.stdout)
    expected = 0
    for line in lines:
        case = Case.model_validate_json(line)
        prompt = render_group_prompt(default_metrics(), case, scoring_mode="binary_yes_no",
                                     include_reasoning=False,
                                     nonce=estimate_nonce(case, "bias+toxicity"))
        expected += count_message_tokens("openai/gpt-4o", list(prompt.messages))
    output = 4 * 2 * (30 + GROUP_ENTRY_TOKENS)
    ceiling = report["escalation"]
    assert ceiling["model"] == "openai/gpt-4o" and ceiling["band"] == [0.3, 0.7]
    assert ceiling["calls"] == 2  # every sampled message escalated, one call each
    assert ceiling["input_tokens"] == pytest.approx(expected / 2)
    assert ceiling["cost"] == pytest.approx((expected * 2.5e-6 + output * 10e-6) / 2)
    assert report["calls"] == 2 and report["cost"]["cost"] < ceiling["cost"]  # first judge apart
    # The same command in this process (no second litellm import per call).
    text = _estimate_here(workdir, server,
                          GUARDRAIL_ESCALATE_MODEL="openai/unpriced-escalation")
    assert "escalation to openai/unpriced-escalation: at most 4 more judge calls" in text.stdout
    assert "unknown (no price" in text.stdout and "band 0.2-0.8" in text.stdout
    plain = _estimate_here(workdir, server, "--json")
    assert json.loads(plain.stdout)["escalation"] is None
    assert server.calls == 0  # no API call


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
    report = json.loads((workdir / "out/redteam/eval/shakespeare-hamlet-short.json").read_text())
    assert report["case_id"] == "shakespeare-hamlet-short"
    assert report["fields"]["reference"].startswith("Hamlet's")
    assert set(report["redteam"]) == {"metrics", "cost"}


def test_run_eval_after_run_redteam_into_one_folder_keeps_both(workdir, server):
    out = workdir / "out/redteam"
    first = _bash('OUTPUT_DIR=./out/redteam; mkdir -p "$OUTPUT_DIR"; nexagauge run redteam '
                  '--input ./sample.json --output-dir "$OUTPUT_DIR" --limit 5',
                  workdir, _env(server))
    assert first.returncode == 0, first.stderr
    redteam = (out / "shakespeare-hamlet-short.json").read_bytes()
    redteam_summary = (out / "summary.json").read_bytes()
    second = _bash('nexagauge run eval --input ./sample.json --output-dir ./out/redteam '
                   '--limit 5 --quiet', workdir, _env(server))
    assert second.returncode == 0, second.stderr
    # The spec's redteam output is where the spec puts it, untouched by eval.
    assert (out / "shakespeare-hamlet-short.json").read_bytes() == redteam
    assert (out / "summary.json").read_bytes() == redteam_summary
    assert set(json.loads(redteam)) == {"metrics", "cost"}
    report = json.loads((out / "eval/shakespeare-hamlet-short.json").read_text())
    assert report["case_id"] == "shakespeare-hamlet-short" and "redteam" in report
    assert json.loads((out / "eval/summary.json").read_text())["cases"] == 1
    assert "wrote out/redteam/eval/summary.json" in second.stdout
    # Progress: not a terminal, so one plain closing line; --quiet: none.
    assert "judged 1/1 cases in " in first.stderr
    assert "judged" not in second.stderr


@pytest.mark.parametrize("content", [
    b"",                                                              # empty file
    b"{oops\n",                                                       # its only line invalid
    b'{"case_id": "fine", "output": "a kind answer"}\n'
    b'{"case_id": "rude", "output": "you idiot \xff"}\n',                # a toxic line not UTF-8
], ids=["empty", "only-invalid", "toxic-line-not-utf8"])
def test_gate_does_not_pass_input_it_did_not_read(workdir, server, content):
    (workdir / "cases.jsonl").write_bytes(content)
    command = "guardrail run redteam --input cases.jsonl --output-dir out"
    proc = _bash(command + " --fail-on-unsafe", workdir, _env(server))
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "gate: exit 4: " in proc.stderr and "Traceback" not in proc.stderr
    summary = json.loads((workdir / "out/summary.json").read_text())
    assert summary["not_judged"] == 0 and summary["judged"] == summary["cases"] <= 1
    assert _bash(command, workdir, _env(server)).returncode == 0  # no gate, no verdict


def test_unreachable_judge_means_not_judged_with_the_reason(workdir, server):
    server.set_outage(True)
    lines = [json.dumps(SAMPLE), json.dumps({"case_id": "blank", "output": " "}), "{oops"]
    (workdir / "cases.jsonl").write_text("\n".join(lines))
    proc = _bash("guardrail run redteam --input cases.jsonl --output-dir out --fail-on-unsafe",
                 workdir, _env(server, GUARDRAIL_JUDGE_MAX_RETRIES="0"))
    assert proc.returncode == 3, proc.stdout + proc.stderr  # not judged beats skipped (4)
    assert "cases: 2  judged: 0  not judged: 2  skipped input records: 1" in proc.stdout
    reasons = next(line for line in proc.stdout.splitlines()
                   if line.startswith("metrics not judged: "))
    assert "2 (judge unavailable after 1 attempts: " in reasons and "503" in reasons
    assert "2 (output is required and is missing or empty)" in reasons
    summary = json.loads((workdir / "out/summary.json").read_text())
    assert (summary["judged"], summary["not_judged"]) == (0, 2)
    assert sorted(summary["not_judged_reasons"].values()) == [2, 2]
    # The spec's per-case JSON is unchanged: errors per metric, null score.
    result = json.loads((workdir / "out/shakespeare-hamlet-short.json").read_text())
    assert set(result) == {"metrics", "cost"} and result["metrics"][0]["score"] is None


def test_help_lists_every_exit_code():
    proc = subprocess.run([str(BIN / "guardrail"), "run", "redteam", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    codes = [line.split()[0] for line in proc.stdout.split("Exit codes:")[1].splitlines()
             if line.strip()[:1].isdigit()]
    assert codes == ["0", "1", "2", "3", "4"]
    assert "first of 1, 3, 4 wins" in proc.stdout


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


CONFIG_ERRORS = {
    "key refused": (ErrorReply(401, message=f"Incorrect API key provided: {SECRET}"),
                    "judge_api_key"),
    "unknown model": (ErrorReply(404, message="The model `test-judge` does not exist."),
                      "judge_model"),
}
JUDGING_COMMANDS = {
    "run": "guardrail run redteam --input sample.json --output-dir out --fail-on-unsafe",
    "calibrate": "guardrail calibrate --limit 2 --output-dir out",
}


@pytest.mark.parametrize("command", JUDGING_COMMANDS)
@pytest.mark.parametrize("problem", CONFIG_ERRORS)
def test_a_misconfigured_judge_exits_2_with_one_line_naming_the_setting(workdir, server,
                                                                      command, problem):
    reply, setting = CONFIG_ERRORS[problem]
    server.script(*[reply] * 8)  # every call (left-overs are cleared by the next reset)
    proc = _bash(JUDGING_COMMANDS[command], workdir, _env(server))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: judge configuration error:"), lines
    assert f"check {setting} (GUARDRAIL_{setting.upper()})" in lines[0]
    assert SECRET not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    # Not turned into per-metric errors: no result, report or summary was written.
    assert not (workdir / "out").exists() or not any((workdir / "out").iterdir())


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


@pytest.fixture
def silent_listener():
    """A port that accepts connections and never answers (a firewall, a wrong service)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


def _kafka_cli(command, workdir, env):
    import time

    args = {"produce": "guardrail produce --input sample.json", "worker": "guardrail worker"}
    started = time.monotonic()
    proc = _bash(args[command], workdir, env)
    return proc, time.monotonic() - started


@pytest.mark.parametrize("command", ["produce", "worker"])
def test_an_unreachable_broker_is_one_line_and_exit_2(workdir, server, command):
    from guardrail._processes import free_port

    address = f"127.0.0.1:{free_port()}"  # closed: nothing listens there
    proc, took = _kafka_cli(command, workdir, _env(server, GUARDRAIL_BOOTSTRAP_SERVERS=address))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot reach Kafka at {address} ("), \
        lines
    assert lines[0].endswith("; check bootstrap_servers (GUARDRAIL_BOOTSTRAP_SERVERS) and that "
                             "the brokers are up") and "guardrail broker" not in lines[0]
    assert took < 10 + 5  # refused at once; well under the default bootstrap_timeout


@pytest.mark.parametrize("command", ["produce", "worker"])
def test_with_no_broker_configured_the_hint_says_how_to_start_one(workdir, server, command):
    from guardrail._processes import port_open
    from guardrail.kafka.broker import DEFAULT_PORT

    if port_open(DEFAULT_PORT):
        pytest.skip(f"something listens on the embedded broker's port {DEFAULT_PORT}")
    proc, _ = _kafka_cli(command, workdir, _env(server))  # GUARDRAIL_BOOTSTRAP_SERVERS unset
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: cannot reach the embedded Kafka broker at 127.0.0.1:{DEFAULT_PORT}"), lines
    assert lines[0].endswith("start it with: guardrail broker")


@pytest.mark.parametrize("command", ["produce", "worker"])
def test_a_broker_that_never_answers_gives_up_after_bootstrap_timeout(workdir, server, command,
                                                                     silent_listener):
    address = f"127.0.0.1:{silent_listener}"
    proc, took = _kafka_cli(command, workdir, _env(
        server, GUARDRAIL_BOOTSTRAP_SERVERS=address, GUARDRAIL_BOOTSTRAP_TIMEOUT="2"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: cannot reach Kafka at {address} (no answer within 2s); check "
        "bootstrap_servers (GUARDRAIL_BOOTSTRAP_SERVERS) and that the brokers are up"]
    assert 2 <= took < 2 + 8  # the timeout, plus the command's start-up


def _estimate_here(workdir, server, *args, input_name="cases.jsonl", **env):
    """``guardrail estimate redteam`` in this process (no interpreter start and
    litellm import per call), with the environment ``_env`` gives a subprocess."""
    from click.testing import CliRunner

    from guardrail.cli import cli

    settings = {k: v for k, v in _env(server, **env).items() if k.startswith("GUARDRAIL_")}
    return CliRunner().invoke(cli, ["estimate", "redteam", "--input",
                                    str(workdir / input_name), *args], env=settings)


def test_estimate_sample_rate_multiplies_calls_and_cost(workdir, server):
    lines = [json.dumps({"case_id": f"c{i}", "output": f"answer number {i}"}) for i in range(4)]
    (workdir / "cases.jsonl").write_text("\n".join(lines))
    runs = {}
    for rate in ("1", "0.25"):
        result = _estimate_here(workdir, server, "--json", "--sample-rate", rate,
                                "--model", "openai/gpt-4o-mini")
        assert result.exit_code == 0, result.output
        runs[rate] = json.loads(result.stdout)
    full, sampled = runs["1"], runs["0.25"]
    assert (full["calls"], sampled["calls"]) == (4, 1)
    assert sampled["sample_rate"] == 0.25
    assert sampled["cost"]["cost"] == pytest.approx(full["cost"]["cost"] / 4)
    assert sampled["cost"]["input_tokens"] == pytest.approx(full["cost"]["input_tokens"] / 4)
    assert sampled["cached_prefix"]["cost"] == pytest.approx(full["cached_prefix"]["cost"] / 4)
    text = _estimate_here(workdir, server, "--sample-rate", "0.25",
                          "--model", "openai/gpt-4o-mini").stdout
    assert "1 judge calls (a sample of 25% of the cases)" in text
    assert "cacheable prefix:" in text and "estimated range $" in text
    assert "OpenAI caches" not in text  # a self-hosted judge (api_base) caches any size
    hosted = _estimate_here(workdir, server, "--model", "openai/gpt-4o-mini",
                            GUARDRAIL_JUDGE_API_BASE="")
    assert "OpenAI caches prompts of 1,024+ tokens only" in hosted.stdout
    bad = _estimate_here(workdir, server, "--sample-rate", "1.5")
    assert bad.exit_code == 2 and "sample-rate" in bad.stderr
    # The command line as installed parses the same options.
    proc = _bash("guardrail estimate redteam --input cases.jsonl --json --sample-rate 0.25",
                 workdir, _env(server))
    assert proc.returncode == 0 and json.loads(proc.stdout)["calls"] == 1, proc.stderr


def test_estimate_warns_when_a_case_exceeds_the_context_window(workdir, server):
    huge = "lorem ipsum " * 450_000  # 5.4 MB: ~1M tokens, gpt-4o-mini takes 128,000
    lines = [json.dumps({"case_id": "huge", "output": huge}),
             json.dumps({"case_id": "small", "output": "a short answer"})]
    (workdir / "cases.jsonl").write_text("\n".join(lines))
    run = _estimate_here(workdir, server, "--json", "--model", "openai/gpt-4o-mini")
    assert run.exit_code == 0, run.output
    report = json.loads(run.stdout)
    huge_row, small_row = report["cases"]
    assert huge_row["skipped"].startswith("exceeds the judge's context window")
    assert "128,000" in huge_row["skipped"] and huge_row["input_tokens"] == 0
    assert report["cost"]["input_tokens"] == small_row["input_tokens"] < 1000  # not priced
    assert report["warnings"] == [f"case huge: {huge_row['skipped']}"]
    assert "warning: case huge: exceeds the judge's context window" in run.stderr
