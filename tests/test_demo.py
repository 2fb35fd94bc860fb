"""``guardrail demo``: the whole product from one command, and nothing left running."""

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from guardrail.demo.display import alert_lines, result_line
from guardrail.demo.runner import (WINDOW_SECONDS, alert_rule, load_samples, settings_env,
                                   stamp_samples)
from guardrail.settings import load_settings


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


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _demo(args, **kwargs):
    from guardrail.errors import ConfigError
    from guardrail.kafka.broker import find_broker_binary

    try:
        find_broker_binary()
    except ConfigError as exc:
        pytest.skip(f"embedded broker unavailable: {exc}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDRAIL_")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return subprocess.Popen([sys.executable, "-m", "guardrail.cli", "demo", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **kwargs)


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
    assert (out / "worker.log").exists() and (out / "broker.log").exists()
    _no_leftovers(summary)


@pytest.mark.kafka
@pytest.mark.timeout(300)
def test_ctrl_c_stops_everything_the_demo_started(tmp_path):
    out = tmp_path / "demo"
    proc = _demo(["--judge", "rules", "--output-dir", str(out)])
    lines = []
    for line in proc.stdout:  # interrupt once the worker is up and traffic flows
        lines.append(line)
        if "publishing" in line:
            break
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(lines) + rest
    assert "interrupted" in rest and "Traceback" not in rest
    _no_leftovers(json.loads((out / "summary.json").read_text()))
