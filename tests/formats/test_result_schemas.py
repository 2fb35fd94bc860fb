"""The results schemas of ``guardrail/formats/schemas/`` hold the contract: every
field of ``RedteamMetrics`` (as the pydantic models serialise it) and of the
stream's result record, and a real result written through them reads back
field-exact (absent fields as null in Avro)."""

from __future__ import annotations

import io

import fastavro
import jsonschema
import orjson
import pytest

from guardrail.formats.registry_results import ResultEncoder, result_schema, subject_name
from guardrail.formats.registry_wire import unframe
from guardrail.judging.models import (CostEstimate, JudgeVerdict, MetricResult,
                                      RedteamMetrics)
from guardrail.stream.envelope import Source, message_from_case, result_value

MODELS = {"RedteamResult": RedteamMetrics, "MetricResult": MetricResult,
          "JudgeVerdict": JudgeVerdict, "CostEstimate": CostEstimate}


def contract_fields(model) -> set[str]:
    """The fields the model writes to JSON (the excluded ones never leave the process)."""
    return {name for name, info in model.model_fields.items() if info.exclude is not True}


def avro_records(schema, found=None) -> dict[str, dict]:
    """Every named record of an Avro schema, by short name."""
    found = {} if found is None else found
    if isinstance(schema, list):
        for branch in schema:
            avro_records(branch, found)
    elif isinstance(schema, dict):
        if schema.get("type") == "record":
            found[schema["name"]] = schema
            for field in schema["fields"]:
                avro_records(field["type"], found)
        for key in ("items", "values"):
            if key in schema:
                avro_records(schema[key], found)
    return found


def a_result(**case) -> bytes:
    verdict = JudgeVerdict(severity=4, verdict="UNSAFE", passed=False, reasoning="rude",
                           violations=["insult"], evidence_spans=["you fool"])
    metrics = RedteamMetrics(metrics=[
        MetricResult(name="toxicity", score=0.25, result=[verdict]),
        MetricResult(name="bias", score=None, error="judge timed out")],
        cost=CostEstimate(cost=None, input_tokens=120, output_tokens=9))
    source = Source("in", 2, 41, key=b"k-1", headers=(("traceparent", None), ("x", b"\xff")))
    message = message_from_case({"case_id": "c1", "output": "you fool", "metadata": {"m": "v"},
                                 **case}, source)
    return result_value(message, metrics, source, judge_model="judge/1",
                        event_time_ms=1_700_000_000_000)


def test_the_avro_schema_has_every_field_of_the_contracts_models():
    records = avro_records(orjson.loads(result_schema("avro")))
    for name, model in MODELS.items():
        fields = {f["name"] for f in records[name]["fields"]}
        assert contract_fields(model) <= fields, name
    written = set(orjson.loads(a_result(trace={"trace_id": "a" * 32, "span_id": "b" * 16})))
    assert written | {"run", "session"} == {f["name"] for f in records["RedteamResult"]["fields"]}


def test_a_result_written_in_avro_reads_back_field_exact():
    value = a_result(trace={"trace_id": "a" * 32, "span_id": "b" * 16})
    framed = ResultEncoder("avro", schema_id=12).encode(value)
    assert unframe(framed).schema_id == 12
    schema = fastavro.parse_schema(orjson.loads(result_schema("avro")))
    back = fastavro.schemaless_reader(io.BytesIO(unframe(framed).payload), schema, None)
    expected = orjson.loads(value)
    for verdict in (r for m in expected["metrics"] for r in m["result"]):
        for absent in ("probability_unsafe", "judge_model"):
            verdict.setdefault(absent, None)
    expected["source"]["index"] = None
    assert back == {**expected, "run": None, "session": None}


def test_a_result_validates_against_the_json_schema():
    schema = orjson.loads(result_schema("json_schema"))
    jsonschema.validators.validator_for(schema).check_schema(schema)
    jsonschema.validate(orjson.loads(a_result()), schema)
    required = schema["definitions"]["MetricResult"]["required"]
    assert set(required) == contract_fields(MetricResult)
    assert set(schema["properties"]["cost"]["required"]) == contract_fields(CostEstimate)


@pytest.mark.parametrize("strategy, subject", [
    ("topic", "results-value"), ("record", "dev.guardrail.RedteamResult"),
    ("topic-record", "results-dev.guardrail.RedteamResult")])
def test_subjects_are_named_as_confluents_strategies_name_them(strategy, subject):
    assert subject_name(strategy, "results") == subject


def proto_messages():
    """The results .proto's messages by name, as a consumer's generated classes."""
    from google.protobuf import descriptor_pool, message_factory

    from guardrail.formats.registry_protobuf import schema_files

    pool = descriptor_pool.DescriptorPool()
    for proto in schema_files(result_schema("protobuf"))[0]:
        pool.Add(proto)
    return {name: message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"dev.guardrail.{name}")) for name in MODELS}


def test_the_protobuf_schema_has_every_field_of_the_contracts_models():
    messages = proto_messages()
    for name, model in MODELS.items():
        fields = {f.name for f in messages[name].DESCRIPTOR.fields}
        assert contract_fields(model) <= fields, name
    written = set(orjson.loads(a_result(trace={"trace_id": "a" * 32, "span_id": "b" * 16})))
    assert written | {"run", "session"} == {
        f.name for f in messages["RedteamResult"].DESCRIPTOR.fields}


def test_a_result_written_in_protobuf_reads_back_field_exact():
    value = a_result(trace={"trace_id": "a" * 32, "span_id": "b" * 16})
    framed = unframe(ResultEncoder("protobuf", schema_id=13).encode(value), protobuf=True)
    assert (framed.schema_id, framed.indexes) == (13, [0])
    read = proto_messages()["RedteamResult"].FromString(framed.payload)
    toxicity, bias = read.metrics
    verdict = toxicity.result[0]
    assert (toxicity.name, toxicity.score, toxicity.HasField("error")) == ("toxicity", 0.25, False)
    assert (verdict.severity, verdict.verdict, verdict.passed, verdict.reasoning) == (
        4, "UNSAFE", False, "rude")
    assert not verdict.HasField("probability_unsafe")
    assert list(verdict.violations) == ["insult"] and list(verdict.evidence_spans) == ["you fool"]
    assert (bias.HasField("score"), bias.error, list(bias.result)) == (False, "judge timed out", [])
    assert not read.cost.HasField("cost") and read.cost.input_tokens == 120
    assert (read.case_id, dict(read.metadata), read.key) == ("c1", {"m": "v"}, "k-1")
    assert (read.source.topic, read.source.partition, read.source.offset) == ("in", 2, 41)
    assert dict(read.headers) == {"traceparent": None, "x": "b64:/w=="}
    assert read.trace.trace_id == "a" * 32 and not read.HasField("run")


def a_dlq_record(raw: bytes = b"\x00\x00\x00\x00\x07oops") -> bytes:
    from guardrail.stream.envelope import dlq_record

    source = Source("in", 1, 9, key=b"k", headers=(("h", None),), timestamp_ms=5)
    return orjson.dumps(dlq_record("unknown schema id 7 (the registry has none)", raw, source))


def test_the_dlq_schemas_have_every_field_of_the_dlq_record():
    from guardrail.stream.schemas import DlqRecord, DlqSource

    models = {"DlqRecord": DlqRecord, "DlqSource": DlqSource}
    records = avro_records(orjson.loads(result_schema("avro", "dlq")))
    json_schema = orjson.loads(result_schema("json_schema", "dlq"))
    for name, model in models.items():
        assert {f["name"] for f in records[name]["fields"]} == set(model.model_fields), name
    assert set(json_schema["properties"]) == set(DlqRecord.model_fields)
    assert set(json_schema["properties"]["source"]["properties"]) == set(DlqSource.model_fields)


@pytest.mark.parametrize("raw", [b"\x00\x00\x00\x00\x07oops", b"x" * 70_000])
def test_a_dlq_record_reads_back_in_each_format(raw):
    from guardrail.formats.registry import SchemaBook

    value = a_dlq_record(raw)
    expected = orjson.loads(value)
    jsonschema.validate(expected, orjson.loads(result_schema("json_schema", "dlq")))
    book = SchemaBook()
    for schema_id, fmt, kind in ((1, "avro", None), (2, "protobuf", "PROTOBUF")):
        book.learn(schema_id, kind, result_schema(fmt, "dlq"))
        framed = unframe(ResultEncoder(fmt, schema_id, "dlq").encode(value),
                         protobuf=fmt == "protobuf")
        back = book.codec(schema_id).decode(framed.payload, framed.indexes)
        if fmt == "avro":
            absent = "value_excerpt" if "value_base64" in expected else "value_base64"
            assert back == {**expected, absent: None,
                            "source": {**expected["source"], "index": None}}
        else:  # Protobuf's JSON mapping: int64 as text
            assert back["reason"] == expected["reason"] and back["size"] == str(len(raw))
            assert back["headers"] == {"h": None} and back["source"]["offset"] == "9"


ALERTS = {"regression": "regression-alert", "budget": "budget-alert",
          "agreement": "agreement-alert"}


def alert_models() -> dict[str, type]:
    """The three alert models and every model in their fields, by name."""
    import typing

    from pydantic import BaseModel

    from guardrail.stream.alert_schemas import AgreementAlert, BudgetAlert, RegressionAlert

    found: dict[str, type] = {}
    todo: list = [RegressionAlert, BudgetAlert, AgreementAlert]
    while todo:
        hint = todo.pop()
        if isinstance(hint, type) and issubclass(hint, BaseModel):
            if hint.__name__ not in found:
                found[hint.__name__] = hint
                todo.extend(f.annotation for f in hint.model_fields.values())
        else:
            todo.extend(typing.get_args(hint))
    return found


def an_alert(kind: str) -> dict:
    from guardrail.reference.record_examples import EXAMPLES

    return EXAMPLES[ALERTS[kind]]


def test_the_alert_schemas_have_every_field_of_the_alert_models():
    from google.protobuf import descriptor_pool

    from guardrail.formats.registry_protobuf import schema_files

    models = alert_models()
    assert {"RegressionAlert", "AlertRule", "Baseline", "Disagreement", "WeightedCount"} <= set(
        models)
    records = avro_records(orjson.loads(result_schema("avro", "alert")))
    definitions = orjson.loads(result_schema("json_schema", "alert"))["definitions"]
    pool = descriptor_pool.DescriptorPool()
    for proto in schema_files(result_schema("protobuf", "alert"))[0]:
        pool.Add(proto)
    for name, model in models.items():
        fields = set(model.model_fields)
        assert {f["name"] for f in records[name]["fields"]} == fields, name
        assert set(definitions[name]["properties"]) == fields, name
        assert set(definitions[name]["required"]) == {
            n for n, f in model.model_fields.items() if f.is_required()}, name
        message = pool.FindMessageTypeByName(f"dev.guardrail.{name}")
        assert {f.name for f in message.fields} == fields, name
    (oneof,) = pool.FindMessageTypeByName("dev.guardrail.Alert").oneofs
    assert {f.name: f.message_type.name for f in oneof.fields} == {
        "regression": "RegressionAlert", "budget": "BudgetAlert", "agreement": "AgreementAlert"}


@pytest.mark.parametrize("kind", ALERTS)
def test_an_alert_reads_back_field_exact_in_each_format(kind):
    from guardrail.formats.registry import SchemaBook

    alert = an_alert(kind)
    value = orjson.dumps(alert)
    schema = orjson.loads(result_schema("json_schema", "alert"))
    jsonschema.validate(alert, schema)
    matching = [d for d in schema["oneOf"] if jsonschema.Draft7Validator(
        {**d, "definitions": schema["definitions"]}).is_valid(alert)]
    assert len(matching) == 1  # the kind picks one branch
    book = SchemaBook()
    for schema_id, fmt, schema_type in ((1, "avro", None), (2, "protobuf", "PROTOBUF"),
                                        (3, "json_schema", "JSON")):
        book.learn(schema_id, schema_type, result_schema(fmt, "alert"))
        framed = unframe(ResultEncoder(fmt, schema_id, "alert").encode(value),
                         protobuf=fmt == "protobuf")
        back = book.codec(schema_id).decode(framed.payload, framed.indexes)
        expected = alert
        if fmt == "avro" and kind == "regression":  # absent in the JSON: null in Avro
            expected = {**alert, "baseline": {**alert["baseline"], "windows": None}}
        if fmt == "protobuf":  # the Alert message's oneof, 64-bit integers as text
            (held,) = back.values()
            assert list(back) == [kind] and held["alert_id"] == alert["alert_id"]
            assert held["reasons"] == alert["reasons"] and held["fired_at"] == alert["fired_at"]
        else:
            assert back == expected, fmt
