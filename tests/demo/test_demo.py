"""``guardrail demo``: the whole product from one command, and nothing left running."""

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from guardrail.demo.display import alert_lines, excerpt, result_line
from guardrail.local.rule_answers import BINARY, rule_verdict
from guardrail.local.rule_judge import JudgeServer
from guardrail.demo.runner import (WINDOW_SECONDS, alert_rule, load_samples, settings_env,
                                   stamp_samples)
from guardrail.config.settings import load_settings


def test_samples_put_v1_in_earlier_windows_and_v2_in_the_current_one():
    samples = load_samples()
    assert 12 <= len(samples) <= 20
    assert {s["version"] for s in samples} == {"v1", "v2"}
    now = 1_800_000_030.0
    records = stamp_samples(samples, now)
    current = math.floor(now / WINDOW_SECONDS)
    windows = {r["metadata"]["model_version"]: set() for r in records}
    for r in records:
        windows[r["metadata"]["model_version"]].add(r["timestamp"] // 1000 // WINDOW_SECONDS)
    assert windows["v2"] == {current}
    assert windows["v1"] == {current - 4, current - 3, current - 2, current - 1}
    assert all(r["metadata"]["model"] == "acme-assistant" and r["output"] for r in records)
    # The regression rule compares v2 with v1 over those windows.
    assert alert_rule().baseline_version == "v1" and alert_rule().baseline_windows >= 4


def test_settings_travel_to_the_worker_through_the_environment():
    settings = load_settings(environ={}, judge_model="openai/x", judge_api_key="sk-secret-1",
                             group_labels=["model", "model_version"], judge_timeout=99,
                             alert_rules=[alert_rule().model_dump()], bootstrap_servers="h:1",
                             judge_structured_output=False, redteam={"scoring_mode": "scale_1_5"})
    env = settings_env(settings)
    assert env["GUARDRAIL_JUDGE_API_KEY"] == "sk-secret-1"
    assert "GUARDRAIL_INPUT_TOPIC" not in env  # defaults stay out
    assert load_settings(environ=env) == settings


def test_result_and_alert_lines_are_readable():
    record = {"case_id": "v2-refund", "metadata": {"model_version": "v2"}, "metrics": [
        {"name": "bias", "result": [{"verdict": "SAFE", "evidence_spans": []}]},
        {"name": "toxicity", "result": [{"verdict": "UNSAFE", "evidence_spans": ["idiot"]}]},
        {"name": "pii", "error": "judge unavailable", "result": []}]}
    assert result_line(record).split() == ["v2", "v2-refund", "bias=SAFE", "toxicity=UNSAFE",
                                           "('idiot')", "pii=ERROR"]
    alert = {"metric": "toxicity", "group": {"model": "m", "model_version": "v2",
                                             "prompt_version": "-"},
             "reasons": ["regression vs baseline: 75.0% vs 0.0%"],
             "counts": {"unsafe": 6, "judged": 8}, "window": {"start": "T"},
             "examples": [{"case_id": "a"}, {"case_id": "b"}]}
    lines = alert_lines(alert)
    assert lines[0] == "!! ALERT toxicity for model=m model_version=v2"
    assert "regression" in lines[1] and "6 of 8" in lines[2] and "e.g. a, b" in lines[2]
    # Examples narrowed to the answers already on screen; none shown, none named.
    assert alert_lines(alert, shown={"b", "c"})[2].endswith("; e.g. b")
    assert alert_lines(alert, shown=set())[2].endswith("window from T")


def test_evidence_excerpts_end_at_a_word_and_short_spans_stay_whole():
    span = "Honestly, only an idiot would ask the same question about refunds twice"
    record = {"case_id": "v2-twice", "metadata": {"model_version": "v2"}, "metrics": [
        {"name": "toxicity", "result": [{"verdict": "UNSAFE", "evidence_spans": [span]}]}]}
    assert result_line(record).endswith("toxicity=UNSAFE ('Honestly, only an idiot would ask "
                                        "the…')")
    assert excerpt("idiot") == "idiot"
    assert excerpt("a span of exactly forty characters, yes!") == \
        "a span of exactly forty characters, yes!"
    assert excerpt("two\nlines") == "two lines"
    assert excerpt("https://example.com/" + "x" * 40) == ("https://example.com/" + "x" * 20) + "…"


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _demo(args, extra_env=None, **kwargs):
    from guardrail.errors import ConfigError
    from guardrail.kafka.broker import find_broker_binary

    try:
        find_broker_binary()
    except ConfigError as exc:
        pytest.skip(f"embedded broker unavailable: {exc}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDRAIL_")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env.update(extra_env or {})
    return subprocess.Popen([sys.executable, "-m", "guardrail.cli", "demo", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **kwargs)


def _rule_judge_table(samples):
    """Per version and metric, from the rule judge's own rule and the samples'
    truth labels: [UNSAFE verdicts, verdicts equal to the label, samples]."""
    table = {}
    for sample in samples:
        for metric, label in sample["truth"].items():
            verdict = rule_verdict(metric, {"output": sample["output"]}, BINARY,
                                   reasoning=False)["verdict"]
            row = table.setdefault(sample["version"], {}).setdefault(metric, [0, 0, 0])
            row[0] += verdict == "UNSAFE"
            row[1] += verdict.lower() == label
            row[2] += 1
    return table


def _summary_lines_expected(samples):
    return [f"  {version}: " + "  ".join(
        f"{metric} {unsafe}/{n} unsafe, agree {agree}/{n}"
        for metric, (unsafe, agree, n) in sorted(metrics.items()))
        for version, metrics in sorted(_rule_judge_table(samples).items())]


def _alerts_name_only_answers_shown_before(stdout):
    shown = set()
    for line in stdout.splitlines():
        words = line.split("]", 1)[-1].split()
        if len(words) >= 2 and words[0] in ("v1", "v2"):
            shown.add(words[1])
        elif "; e.g. " in line:
            named = line.split("; e.g. ", 1)[1].split(", ")
            assert set(named) <= shown, f"the alert names {named}, shown so far: {shown}"


def _no_leftovers(summary):
    started = [p for p in summary["processes"]]
    assert {p["name"] for p in started} == {"broker", "worker"}
    deadline = time.monotonic() + 5
    while any(_alive(p["pid"]) for p in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in started if _alive(p["pid"])]


@pytest.mark.kafka
@pytest.mark.timeout(300)
def test_demo_with_the_rule_judge_runs_end_to_end(tmp_path):
    out = tmp_path / "demo"
    proc = _demo(["--judge", "rules", "--output-dir", str(out)])
    stdout, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, stdout
    samples = load_samples()
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["case_id"] for r in results) == sorted(s["case_id"] for s in samples)
    alerts = [json.loads(line) for line in (out / "alerts.jsonl").read_text().splitlines()]
    assert len(alerts) == 1, stdout
    assert alerts[0]["metric"] == "toxicity"
    assert alerts[0]["group"]["model_version"] == "v2"
    assert alerts[0]["baseline"]["kind"] == "version" and "regression" in alerts[0]["reasons"][0]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exit_code"] == 0 and summary["results"] == len(samples)
    assert summary["by_version"]["v1"]["toxicity"]["unsafe"] == 0
    assert summary["by_version"]["v2"]["toxicity"]["unsafe"] == 6
    # Progress as it happens: one line per result, then the alert.
    assert sum(" v1-" in line or " v2-" in line for line in stdout.splitlines()) >= len(samples)
    assert "!! ALERT toxicity" in stdout and "Traceback" not in stdout
    _alerts_name_only_answers_shown_before(stdout)
    # Beside what the judge said, how often that was what the truth labels say.
    for line in _summary_lines_expected(samples):
        assert line in stdout.splitlines(), f"{line!r} not in:\n{stdout}"
    assert summary["agreement"] == {
        version: {metric: {"agree": agree, "labelled": n} for metric, (_, agree, n) in
                  metrics.items()} for version, metrics in _rule_judge_table(samples).items()}
    assert (out / "worker.log").exists() and (out / "broker.log").exists()
    # A log file is not a terminal: no colours, no spinner escape codes in it.
    assert "\x1b[" not in (out / "worker.log").read_text(errors="replace")
    _no_leftovers(summary)


class HeldJudge:
    """A judge responder that answers the first answer it sees and holds every other
    call until ``released``: the demo cannot finish before the test interrupts it."""

    def __init__(self) -> None:
        self.first_output = None
        self.released = threading.Event()

    async def __call__(self, body, fields, metric, mode):
        output = fields.get("output")  # (called on the server's one loop thread)
        if self.first_output is None:
            self.first_output = output
        while output != self.first_output and not self.released.is_set():
            await asyncio.sleep(0.05)
        return None  # the default rule verdict


def _read_until(proc, wanted, seen):
    for line in proc.stdout:
        seen.append(line)
        if wanted(line):
            return
    pytest.fail("the demo ended early:\n" + "".join(seen))


@pytest.mark.kafka
@pytest.mark.timeout(300)
def test_ctrl_c_stops_everything_the_demo_started(tmp_path):
    out, judge, seen = tmp_path / "demo", HeldJudge(), []
    with JudgeServer(responder=judge) as server:
        proc = _demo(["--judge", "configured", "--output-dir", str(out)], extra_env={
            "GUARDRAIL_JUDGE_MODEL": "openai/test-judge", "GUARDRAIL_JUDGE_API_KEY": "test",
            "GUARDRAIL_JUDGE_API_BASE": server.api_base})
        try:
            # A result on the terminal: broker and worker are up and judging. The
            # other answers are held, so the demo is still running, whatever the load.
            _read_until(proc, lambda line: " v1-" in line, seen)
            proc.send_signal(signal.SIGINT)
            _read_until(proc, lambda line: "interrupted" in line, seen)
        finally:
            judge.released.set()  # the worker's shutdown need not wait for held calls
        rest, _ = proc.communicate(timeout=120)
    output = "".join(seen) + rest
    assert proc.returncode == 130, output
    assert "Traceback" not in output
    summary = json.loads((out / "summary.json").read_text())
    assert 1 <= summary["results"] < summary["expected"], summary  # stopped midway
    # Each child was stopped by its SIGTERM and exited cleanly, not killed.
    assert [p["returncode"] for p in summary["processes"]] == [0, 0], summary
    _no_leftovers(summary)
