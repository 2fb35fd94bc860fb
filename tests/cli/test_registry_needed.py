"""``schema_registry_url`` is asked for only where a registry is used: the worker,
``replay`` and ``inputs check --topic`` refuse a registry format without it
(exit 2, one line naming the settings) before anything connects; ``guardrail
run`` and ``inputs check`` on a file read the decoded records as JSON without it."""

from __future__ import annotations

import json

import pytest

from guardrail.cli import main
from guardrail.local.rule_judge import JudgeServer

CASES = [{"case_id": "r1", "output": "Have a nice day"},
         {"case_id": "r2", "output": "I hate you, idiot"}]


@pytest.fixture
def no_registry(monkeypatch):
    monkeypatch.delenv("GUARDRAIL_SCHEMA_REGISTRY_URL", raising=False)
    monkeypatch.delenv("GUARDRAIL_CONFIG", raising=False)
    for name in ("RESULTS", "DLQ", "ALERTS"):
        monkeypatch.delenv(f"GUARDRAIL_{name}_FORMAT", raising=False)


@pytest.fixture
def cases_file(tmp_path):
    path = tmp_path / "decoded.jsonl"
    path.write_text("".join(json.dumps(case) + "\n" for case in CASES))
    return path


def exit_of(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    return stopped.value.code, capsys.readouterr().err


def test_run_reads_a_file_of_decoded_records_without_a_registry(no_registry, cases_file,
                                                                  tmp_path, capsys):
    with JudgeServer(port=18731) as judge:
        code, err = exit_of(["run", "redteam", "--input", str(cases_file), "--input-format",
                             "avro", "--output-dir", str(tmp_path / "out"), "--quiet",
                             "--model", "openai/rule-judge", "--api-base", judge.api_base],
                            capsys)
    assert code == 0, err
    written = json.loads((tmp_path / "out" / "r2.json").read_text())
    assert {m["name"] for m in written["metrics"]} == {"bias", "toxicity"}
    assert "schema_registry_url" not in err


def test_inputs_check_on_a_file_needs_no_registry(no_registry, cases_file, capsys):
    code, err = exit_of(["inputs", "check", str(cases_file), "--input-format", "protobuf",
                         "--json"], capsys)
    assert code == 0, err


@pytest.mark.parametrize("argv, env, named", [
    (["worker", "--input-format", "avro"], {}, "input_format avro"),
    (["worker"], {"GUARDRAIL_ALERTS_FORMAT": "protobuf"}, "alerts_format protobuf"),
    (["replay", "--from", "0", "--input-format", "json_schema"],
     {"GUARDRAIL_DLQ_FORMAT": "avro"}, "input_format json_schema, dlq_format avro"),
    (["inputs", "check", "--topic", "t", "--input-format", "avro"],
     {"GUARDRAIL_RESULTS_FORMAT": "avro"}, "input_format avro"),
])
def test_the_commands_that_use_a_registry_refuse_to_start_without_one(
        no_registry, monkeypatch, capsys, argv, env, named):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # A broker nobody listens at: the refusal comes before Kafka is asked.
    monkeypatch.setenv("GUARDRAIL_BOOTSTRAP_SERVERS", "127.0.0.1:18732")
    code, err = exit_of(argv, capsys)
    assert code == 2
    expected = (f"error: the registry formats ({named}) need schema_registry_url (the "
                "registry's Confluent-compatible API; GUARDRAIL_SCHEMA_REGISTRY_URL)")
    assert err.strip().splitlines() == [expected]


def test_a_replay_writes_no_alerts_so_alerts_format_asks_no_registry(no_registry, monkeypatch,
                                                                     capsys):
    monkeypatch.setenv("GUARDRAIL_ALERTS_FORMAT", "avro")
    monkeypatch.setenv("GUARDRAIL_BOOTSTRAP_SERVERS", "127.0.0.1:18732")  # nothing listens
    code, err = exit_of(["replay", "--from", "0", "--quiet"], capsys)
    assert code == 2 and "schema_registry_url" not in err
    assert err.startswith("error: cannot reach Kafka at 127.0.0.1:18732"), err


def test_a_judge_built_in_code_with_a_registry_format_and_no_registry_refuses(
        make_settings, evaluators):
    from guardrail.errors import ConfigError
    from guardrail.stream.processing import MessageJudge

    settings = make_settings(input_format="avro")  # settings alone do not refuse it
    with pytest.raises(ConfigError, match="need schema_registry_url"):
        MessageJudge.from_settings(evaluators(settings), settings)
