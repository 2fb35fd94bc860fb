"""What the demo prints around its results: alerts after the answers they name,
the local judge's state before its first verdict, agreement with the truth labels."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from guardrail.demo.judge_status import JudgeWatch, status_line
from guardrail.demo.runner import _summary_cell, load_samples
from guardrail.demo.screen import Screen
from guardrail.demo.truth import JUDGE_NOTES, agreement
from guardrail.local.server import judge_activity


def _result(case_id, version="v2", **verdicts):
    return {"case_id": case_id, "metadata": {"model_version": version}, "metrics": [
        {"name": name, "error": "judge unavailable", "result": []} if verdict is None else
        {"name": name, "result": [{"verdict": verdict, "evidence_spans": []}]}
        for name, verdict in verdicts.items()]}


def _alert(*examples):
    return {"metric": "toxicity", "group": {"model": "m", "model_version": "v2"},
            "reasons": ["regression"], "counts": {"unsafe": 2, "judged": 3},
            "window": {"start": "T"}, "examples": [{"case_id": e} for e in examples]}


def test_an_alert_waits_for_the_lines_of_the_answers_it_names():
    lines = []
    screen = Screen(lines.append)
    screen.show("result", _result("a", toxicity="UNSAFE"))
    screen.show("alert", _alert("a", "b"))
    assert not [line for line in lines if "ALERT" in line]  # b has no line yet
    screen.show("result", _result("b", toxicity="UNSAFE"))
    assert [line.split()[1] for line in lines[:2]] == ["a", "b"]
    assert lines[2].startswith("!! ALERT toxicity") and lines[-1].endswith("; e.g. a, b")
    screen.flush()
    assert len([line for line in lines if "ALERT" in line]) == 1  # printed once


def test_at_the_end_a_held_alert_names_only_the_answers_shown():
    lines = []
    screen = Screen(lines.append)
    screen.show("alert", _alert("never-arrived", "a"))
    screen.show("result", _result("a", toxicity="UNSAFE"))
    screen.flush()
    assert lines[1].startswith("!! ALERT") and lines[-1].endswith("; e.g. a")


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


IDLE = {"requests_processing": 0.0, "prompt_tokens_read": 0.0, "prompt_seconds": 0.0,
        "tokens_in_slot": 0.0}


def _watch(states, said, clock, results=()):
    return JudgeWatch(read=lambda: states[0], say=said.append, done=lambda: bool(results),
                      every=10.0, clock=clock)


def test_the_watch_says_each_phase_of_the_first_prompt_and_stops_at_the_first_result():
    clock, said, states, results = FakeClock(), [], [IDLE], []
    watch = _watch(states, said, clock, results)
    watch._said_at = clock()  # as start() does
    assert watch.step() and said == []  # idle at once: the worker is still starting
    clock.now += 10
    watch.step()
    assert said == ["… local judge: idle, no judge call from the worker yet"]
    states[0] = {**IDLE, "requests_processing": 2.0}  # a phase change is said at once
    watch.step()
    assert said[-1].startswith("… local judge: processing its first prompt (just started;")
    clock.now += 4
    states[0] = {**IDLE, "requests_processing": 2.0, "tokens_in_slot": 512.0}
    watch.step()
    assert len(said) == 2  # the same phase, and not 10 s since the last line
    clock.now += 10
    watch.step()
    assert said[-1] == ("… local judge: reading its first prompt, 512 tokens of it so far "
                        "(for 14s; later prompts reuse its cached start)")
    states[0] = {**IDLE, "requests_processing": 2.0, "prompt_tokens_read": 917.0,
                 "prompt_seconds": 21.4}
    watch.step()
    assert said[-1] == ("… local judge: first prompt read (917 tokens in 21s); writing its "
                        "first verdicts")
    results.append("v1-refund")
    assert not watch.step() and len(said) == 4


def test_the_watch_says_nothing_when_the_judge_does_not_answer():
    clock, said = FakeClock(), []
    watch = JudgeWatch(read=lambda: None, say=said.append, done=lambda: False, clock=clock)
    clock.now += 60
    assert watch.step() and said == []


def test_the_watch_thread_polls_until_stopped():
    said, spoke = [], threading.Event()

    def say(line):
        said.append(line)
        spoke.set()

    watch = JudgeWatch(read=lambda: {**IDLE, "requests_processing": 1.0}, say=say,
                       done=lambda: False, poll=0.01).start()
    assert spoke.wait(5) and "first prompt" in said[0]  # a phase change: said at once
    watch.stop()
    assert not watch._thread.is_alive()


METRICS = b"""# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 0
llamacpp:prompt_seconds_total 0
llamacpp:n_tokens_max 1024
llamacpp:requests_processing 2
"""


@pytest.fixture
def metrics_server():
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = METRICS if self.path == "/metrics" else b""
            self.send_response(200 if body else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()


def test_judge_activity_reads_llama_cpp_metrics(metrics_server):
    activity = judge_activity(metrics_server)
    assert activity == {"requests_processing": 2.0, "prompt_tokens_read": 0.0,
                        "prompt_seconds": 0.0, "tokens_in_slot": 1024.0}
    assert status_line(activity, 9.0).startswith(
        "… local judge: reading its first prompt, 1024 tokens of it so far (for 9s")
    from guardrail._processes import free_port

    assert judge_activity(f"http://127.0.0.1:{free_port()}/v1") is None  # closed port


def test_agreement_counts_verdicts_equal_to_the_truth_labels():
    samples = [{"case_id": "x", "truth": {"toxicity": "unsafe", "bias": "safe"}},
               {"case_id": "y", "truth": {"toxicity": "unsafe"}}]
    results = [_result("x", toxicity="UNSAFE", bias="UNSAFE"),
               _result("y", toxicity="SAFE", bias="SAFE"),      # bias: no label
               _result("z", toxicity="UNSAFE"),                 # no sample
               _result("x", version="v1", toxicity=None)]       # an error: no verdict
    assert agreement(results, samples) == {"v2": {"toxicity": {"agree": 1, "labelled": 2},
                                                  "bias": {"agree": 0, "labelled": 1}}}
    row = {"unsafe": 1, "judged": 2, "errors": 0}
    assert _summary_cell("toxicity", row, {"agree": 1, "labelled": 2}) == \
        "toxicity 1/2 unsafe, agree 1/2"
    assert _summary_cell("toxicity", {**row, "errors": 1}, None) == \
        "toxicity 1/2 unsafe (1 errors)"


def test_every_sample_has_a_truth_label_per_default_metric_and_the_local_judge_a_note():
    assert all(set(s["truth"]) == {"bias", "toxicity"} and
               set(s["truth"].values()) <= {"safe", "unsafe"} for s in load_samples())
    note = JUDGE_NOTES["local"]
    assert "stand-in" in note and "1.5B" in note and "docs/judge-quality.md" in note
