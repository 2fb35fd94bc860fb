"""Input formats through the worker's own batch processing (real HTTP judge),
and through the commands that read input files: ``inputs check``, ``run``,
and a worker refusing a bad mapping at startup."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from support.otel_traffic import genai_spans, http_span, otlp_json, otlp_proto, span_ids

from guardrail.stream.envelope import Source, trace_from_headers
from guardrail.stream.processing import MessageJudge, RawMessage

BIN = Path(sys.executable).parent
TRACEPARENT = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def _process(settings, evaluators, *values, headers=()):
    judge = MessageJudge.from_settings(evaluators(settings), settings)
    batch = [RawMessage(v, Source("in", 0, i, headers=headers)) for i, v in enumerate(values)]
    outgoing = await judge.process(batch)
    return judge, {topic: [orjson.loads(o.value) for o in outgoing if o.topic == topic]
                   for topic in (settings.kafka.results_topic, settings.kafka.dlq_topic)}


async def test_a_mapping_picks_fields_and_a_missing_one_sends_the_record_to_the_dlq(
        make_settings, evaluators):
    settings = make_settings(input_mapping={
        "case_id": "event.id", "output": "event.llm.response.text",
        "input": "event.llm.request.prompt", "metadata.model_version": "tags.ver"})
    nested = {"event": {"id": "e1", "llm": {"request": {"prompt": "Say hi"},
                                            "response": {"text": "Hi, you idiot."}}},
              "tags": {"ver": "v7"}}
    missing = {"event": {"id": "e2", "llm": {"request": {"prompt": "Say hi"}}},
               "tags": {"ver": "v7"}}
    _, out = await _process(settings, evaluators, orjson.dumps(nested), orjson.dumps(missing))
    results, dlq = out[settings.kafka.results_topic], out[settings.kafka.dlq_topic]
    assert [(r["case_id"], r["metadata"]) for r in results] == [("e1", {"model_version": "v7"})]
    assert results[0]["metrics"][1]["result"][0]["verdict"] == "UNSAFE"
    assert len(dlq) == 1 and "output" in dlq[0]["reason"] \
        and "event.llm.response.text" in dlq[0]["reason"]


async def test_results_carry_the_trace_of_a_traceparent_header(make_settings, evaluators):
    settings = make_settings()
    _, out = await _process(settings, evaluators, b'{"case_id": "c1", "output": "fine"}',
                            headers=(("traceparent", TRACEPARENT),))
    (result,) = out[settings.kafka.results_topic]
    assert result["trace"] == {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
                               "span_id": "00f067aa0ba902b7"}
    assert trace_from_headers((("traceparent", b"00-" + b"0" * 32 + b"-00f067aa0ba902b7-01"),
                               )) is None  # the all-zero trace id is invalid
    assert trace_from_headers((("traceparent", b"garbage"),)) is None


async def test_an_otlp_record_becomes_one_case_per_genai_span(make_settings, evaluators):
    settings = make_settings(input_format="otlp")
    spans = genai_spans(["Happy to help.", "Go away, idiot."], service_version="v2")
    judge, out = await _process(settings, evaluators, otlp_proto(spans + [http_span()]),
                                otlp_proto([http_span()]), b"\xff\x00 not otlp")
    results, dlq = out[settings.kafka.results_topic], out[settings.kafka.dlq_topic]
    assert [r["case_id"] for r in results] == [":".join(span_ids(s)) for s in spans]
    assert [r["source"] for r in results] == [
        {"topic": "in", "partition": 0, "offset": 0, "index": i} for i in range(2)]
    assert len(dlq) == 1 and dlq[0]["reason"].startswith("otlp:")
    metrics = judge.telemetry.render().decode()
    assert 'guardrail_messages_total{outcome="no_genai_span"} 1.0' in metrics


def _cli(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDRAIL_")}
    env.update({"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
                "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    return subprocess.run(["guardrail", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def test_inputs_check_shows_the_cases_of_each_record_or_why_none(tmp_path):
    spans = genai_spans(["The answer is 42."], service_version="v3")
    path = tmp_path / "spans.jsonl"
    path.write_bytes(otlp_json(spans) + b"\n" + otlp_json([http_span()]) + b"\n[1]\n")
    proc = _cli("inputs", "check", str(path), "--input-format", "otlp", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # one record would go to the DLQ
    trace_id, span_id = span_ids(spans[0])
    assert f"case_id={trace_id}:{span_id}" in proc.stdout
    assert "model_version=v3" in proc.stdout and "'The answer is 42.'" in proc.stdout
    assert "line 2: 0 case(s); not judged: 1 no_genai_span" in proc.stdout
    assert "line 3: DLQ: otlp:" in proc.stdout
    proto = tmp_path / "batch.bin"
    proto.write_bytes(otlp_proto(spans))
    proc = _cli("inputs", "check", str(proto), "--input-format", "otlp", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (line,) = [json.loads(x) for x in proc.stdout.splitlines()]
    assert line["cases"][0]["case_id"] == f"{trace_id}:{span_id}"


def test_a_bad_mapping_is_one_line_and_exit_2_before_anything_connects(tmp_path):
    for command in (["worker"], ["inputs", "check", "/dev/null"]):
        proc = _cli(*command, "--input-mapping", '{"output": "a[b"}', cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "input_mapping" in lines[0] and "output" in lines[0], lines


@pytest.mark.parametrize("encoding", ["json"])
def test_run_judges_otlp_json_lines(encoding, judge_server_thread, tmp_path):
    spans = genai_spans(["Happy to help.", "Shut up, idiot."])
    path = tmp_path / "spans.jsonl"
    path.write_bytes(otlp_json(spans) + b"\n")
    env_args = ("--model", "openai/test-judge", "--api-base", judge_server_thread.api_base)
    proc = _cli("run", "redteam", "--input", str(path), "--output-dir", str(tmp_path / "out"),
                "--input-format", "otlp", *env_args, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    written = {p.stem for p in (tmp_path / "out").glob("*.json") if p.stem != "summary"}
    assert len(written) == 2
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["cases"] == 2


@pytest.fixture
def judge_server_thread(thread_judge):
    thread_judge.reset()
    return thread_judge
